"""Layout advisor section of the policy: how prompts are sampled and sketched, and when advice is given.

The advisor (``cache/advisor/``) keeps, per tenant and model, a bounded sketch of recent prompts (no
prompt text, salted hashes and token positions only) and turns it into findings priced with the
tenant's own billing rules. Every size here bounds memory or request-path cost; see docs/advisor.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AdvisorConfig(BaseModel):
    """Prompt-layout advisor: bounded, sampled, salted sketches of prompts (docs/advisor.md)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = Field(False, description="observe sampled prompts and give layout advice")
    sample_rate: float = Field(
        0.01, ge=0, le=1, description="share of requests observed (the rest pay one random draw)"
    )
    window_s: float = Field(
        3600.0,
        ge=60,
        le=7 * 86_400,
        description="a sketch covers this long, then advice is kept and it restarts",
    )
    max_sketches: int = Field(
        128,
        ge=1,
        le=100_000,
        description="(tenant, model) pairs sketched at once; the least recent is dropped",
    )
    recent_blocks: int = Field(
        8192,
        ge=256,
        le=1 << 22,
        description="slots of a sketch's table of recent block hashes (rounded up to a power of two)",
    )
    recent_requests: int = Field(
        256,
        ge=16,
        le=65_536,
        description="recent (sampled) requests a sketch keeps as chunk hashes; findings replay them",
    )
    recent_chunks: int = Field(
        65_536,
        ge=1024,
        le=1 << 24,
        description="chunks the ring of recent requests holds at most (23 bytes each): bounds its memory",
    )
    chunk_bytes: int = Field(
        64, ge=16, le=4096, description="average content-defined chunk, in bytes of the rendered prompt"
    )
    max_prompt_bytes: int = Field(
        131_072, ge=1024, description="only this many leading bytes of a prompt are chunked"
    )
    min_requests: int = Field(
        50, ge=1, description="a (tenant, model) with fewer observed requests gets no findings yet"
    )
    min_share: float = Field(
        0.1, gt=0, le=1, description="a span is stable when it is in at least this share of requests"
    )
    min_saving_pct: float = Field(
        1.0,
        ge=0,
        le=100,
        description="a finding must save at least this % of its (tenant, model)'s input cost",
    )

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        """``top_chunks`` sized the chunk summary the ring of recent requests replaced (issue 26); a
        policy that still sets it would believe it bounds something, so it is refused, not ignored."""
        if isinstance(data, dict) and "top_chunks" in data:
            raise ValueError(
                "advisor.top_chunks was removed: the chunk summary it sized is gone; the ring of recent "
                "requests is bounded by advisor.recent_requests and advisor.recent_chunks (delete top_chunks)"
            )
        return data

    @model_validator(mode="after")
    def _chunk_fits(self) -> AdvisorConfig:
        if self.chunk_bytes * 8 > self.max_prompt_bytes:
            raise ValueError("advisor.max_prompt_bytes must hold at least 8 chunks (8 x chunk_bytes)")
        return self

    @property
    def table_slots(self) -> int:
        """``recent_blocks`` rounded up to a power of two (the table is indexed by a hash's low bits)."""
        return 1 << (self.recent_blocks - 1).bit_length()
