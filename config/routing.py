"""Routing section of a model pool: which policy picks the replica, and its parameters."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

PolicyName = Literal["round_robin", "least_load", "consistent_hash", "chwbl", "prefix_affinity", "session"]

# RFC 9110 token characters: what an HTTP header name may be made of.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")


class TokenizerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["approx", "hf"] = "approx"
    bytes_per_token: int = Field(4, ge=1, le=16, description="approx: UTF-8 bytes per token")
    path: str | None = Field(None, description="hf: path to a tokenizer.json")

    @model_validator(mode="after")
    def _hf_needs_path(self) -> TokenizerConfig:
        if self.kind == "hf" and not self.path:
            raise ValueError("tokenizer kind 'hf' needs 'path' (a tokenizer.json file)")
        return self


class RoutingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policy: PolicyName = "prefix_affinity"
    block_size: int = Field(16, ge=1, le=1024, description="tokens per hashed block")
    max_prefix_tokens: int = Field(
        4096, ge=1, le=1_048_576, description="tokens of the prompt that are hashed"
    )
    route_key_tokens: int = Field(256, ge=1, description="tokens that form the route key of a cold prompt")
    load_factor: float = Field(
        1.25, gt=1.0, le=10.0, description="bounded-load factor c: max load = c x mean"
    )
    min_match_fraction: float = Field(
        0.1, ge=0.0, le=1.0, description="a match below this fraction of the prompt counts as no match"
    )
    affinity_ratio: float = Field(
        0.9,
        gt=0.0,
        le=1.0,
        description="prefix_affinity: replicas matching at least this fraction of the best match "
        "form the affinity set",
    )
    max_queued_prefill_tokens: int = Field(
        65536, ge=1, description="a replica with more uncached prefill tokens queued is saturated"
    )
    index_ttl_s: float | None = Field(None, gt=0, description="forget index entries older than this")
    default_kv_capacity_blocks: int = Field(
        8192, ge=1, le=16_777_216, description="index bound of a replica whose KV capacity is unknown"
    )
    report_stale_s: float = Field(
        5.0, gt=0, description="ignore a replica's scraped load older than this many seconds"
    )
    virtual_nodes: int = Field(160, ge=1, le=4096, description="ring points per replica (consistent hashing)")
    session_header: str = Field("x-session-id", description="session policy: header carrying the session id")
    seed: int | None = Field(None, description="seed of the random tie break (None: nondeterministic)")
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)

    @field_validator("session_header")
    @classmethod
    def _header_name(cls, value: str) -> str:
        if not _HEADER_NAME.match(value):
            raise ValueError(
                f"session_header must be an HTTP header name (letters, digits, '-'), got {value!r}"
            )
        return value.lower()

    @model_validator(mode="after")
    def _check_sizes(self) -> RoutingConfig:
        if self.route_key_tokens > self.max_prefix_tokens:
            raise ValueError(
                f"route_key_tokens ({self.route_key_tokens}) must not exceed max_prefix_tokens "
                f"({self.max_prefix_tokens})"
            )
        if self.max_prefix_tokens < self.block_size:
            raise ValueError(
                f"max_prefix_tokens ({self.max_prefix_tokens}) must be at least one block "
                f"(block_size {self.block_size})"
            )
        return self
