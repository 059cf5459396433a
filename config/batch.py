"""Batch section of the policy: the OpenAI Files and Batches API run on the gateway's own fleet.

Batches run in shared-prefix order (``router.batch_plan``) within a share of each replica's capacity,
and yield to online traffic: the share shrinks while a replica's online queue grows. Every per-pool
knob can be overridden under ``pools.<model>``; unset fields inherit the section's values.
See docs/batch.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_WINDOW = re.compile(r"^([1-9][0-9]{0,4})([smhd])$")
_WINDOW_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def window_seconds(window: str) -> int:
    """Seconds of a completion window written ``<n>s``, ``<n>m``, ``<n>h`` or ``<n>d`` (``24h`` → 86400)."""
    m = _WINDOW.match(window)
    if m is None:
        raise ValueError(f"completion window must look like 24h, 90m, 7d or 30s, got {window!r}")
    return int(m.group(1)) * _WINDOW_UNIT_S[m.group(2)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BatchBackoffConfig(_Strict):
    """How batch traffic yields to online traffic on one replica, from that replica's online queue
    (requests waiting, as its metrics report them): full share at or below ``waiting_start``, none at
    or above ``waiting_stop``, linear in between."""

    waiting_start: float = Field(
        1.0, ge=0, description="online requests waiting at which the share starts to shrink"
    )
    waiting_stop: float = Field(
        8.0, gt=0, description="online requests waiting at which batch sends nothing new"
    )

    @model_validator(mode="after")
    def _ordered(self) -> BatchBackoffConfig:
        if self.waiting_start >= self.waiting_stop:
            raise ValueError("waiting_start must be below waiting_stop")
        return self


class BatchPoolConfig(_Strict):
    """Per-pool overrides (the key is the model name); unset fields inherit the section's values."""

    share: float | None = Field(None, gt=0, le=1, description="overrides `batch.share` for this pool")
    replica_slots: int | None = Field(None, ge=1, le=100_000, description="overrides `batch.replica_slots`")
    online_replicas: int | None = Field(
        None, ge=0, le=10_000, description="overrides `batch.online_replicas`"
    )
    engine_priority: int | None = Field(None, description="overrides `batch.engine_priority`")
    backoff: BatchBackoffConfig | None = Field(None, description="overrides `batch.backoff`")


class BatchLimitsConfig(_Strict):
    """Named limits of the Files and Batches API (defaults: OpenAI's where it publishes one)."""

    max_file_bytes: int = Field(
        200 * 1024 * 1024,
        ge=1024,
        description="largest uploaded file (413 beyond); a larger input fails a batch",
    )
    max_tenant_bytes: int = Field(
        10 * 1024**3,
        ge=1024,
        description="bytes of files (uploads and results) one tenant may keep (uploads beyond get 413)",
    )
    max_tenant_files: int = Field(
        10_000, ge=1, description="files (uploads and results) one tenant may keep (uploads beyond get 429)"
    )
    max_lines: int = Field(
        50_000, ge=1, description="requests in one batch (more: the batch fails, too_many_tasks)"
    )
    max_line_bytes: int | None = Field(
        None,
        ge=1024,
        description="longest input line (None: `limits.max_body_bytes`); longer lines fail the batch",
    )
    max_custom_id_chars: int = Field(512, ge=1, le=65_536, description="longest custom_id of a line")
    max_filename_chars: int = Field(255, ge=1, le=4096, description="longest name of an uploaded file")
    max_reported_errors: int = Field(
        100,
        ge=1,
        le=10_000,
        description="validation errors listed in a failed batch's `errors` (the count is exact)",
    )
    max_active_batches: int = Field(
        16, ge=1, description="batches one tenant may have not yet finished (429 beyond)"
    )
    max_running_batches: int = Field(4, ge=1, le=1000, description="batches one gateway process runs at once")


class BatchConfig(_Strict):
    """Offline batches (the OpenAI Files and Batches API), run in shared-prefix order within a share of each replica."""

    enabled: bool = Field(False, description="serve /v1/files and /v1/batches and run batches")
    dir: str = Field(
        "var/batch/files",
        description="directory of uploaded and result files (a shared volume for several pods)",
    )
    store: Literal["sqlite", "redis"] = Field(
        "sqlite", description="job state: 'sqlite' (one host) or 'redis' (several pods: `redis.url`)"
    )
    sqlite_path: str = Field(
        "var/batch/batch.db", description="SQLite file of job state and per-line results"
    )
    completion_windows: list[str] = Field(
        default_factory=lambda: ["24h"],
        min_length=1,
        description="completion_window values a batch may ask for (OpenAI accepts only 24h)",
    )
    share: float = Field(
        0.5, gt=0, le=1, description="share of each replica's slots batch requests may hold at once"
    )
    replica_slots: int = Field(
        64,
        ge=1,
        le=100_000,
        description="requests one replica runs well at once (vLLM --max-num-seqs); `share` applies to it",
    )
    online_replicas: int = Field(
        0,
        ge=0,
        le=10_000,
        description="replicas of each pool kept for online traffic while a batch runs on it: batches plan on "
        "the others (at least one), online requests prefer these up to `replica_slots` in flight each (the "
        "overflow spreads over every replica); chosen by rendezvous hash of the replica ids, so every process "
        "and pod agrees",
    )
    engine_priority: int | None = Field(
        None,
        description="sent as each batch request's `priority`: vLLM (--scheduling-policy priority) runs larger "
        "values later, SGLang (--enable-priority-scheduling) earlier unless --schedule-low-priority-values-first; "
        "None sends none",
    )
    backoff: BatchBackoffConfig = Field(default_factory=BatchBackoffConfig)
    pools: dict[str, BatchPoolConfig] = Field(default_factory=dict)
    default_output_tokens: int = Field(
        256, ge=0, description="planning: decode work assumed for a line without max_tokens"
    )
    warm_prefix_tokens: int = Field(
        256,
        ge=0,
        description="a line waits for the line that prefills its shared prefix when that brings at least this "
        "many tokens (0: never wait)",
    )
    balance_tolerance: float = Field(
        0.1,
        ge=0,
        le=0.5,
        description="planning: a replica's range may move this share of its work to end between groups",
    )
    max_attempts: int = Field(
        3, ge=1, le=20, description="attempts per line on 429, 5xx or a transport error"
    )
    retry_backoff_s: float = Field(
        1.0, ge=0, description="first wait before a line's retry; doubles, jittered"
    )
    retry_backoff_max_s: float = Field(30.0, ge=0, description="cap of a line's retry wait")
    lease_ttl_s: float = Field(
        30.0, ge=1, le=3600, description="a running batch's lease; renewed every third of it"
    )
    poll_s: float = Field(
        1.0, gt=0, le=60, description="how often a process looks for batches to run and re-reads load"
    )
    limits: BatchLimitsConfig = Field(default_factory=BatchLimitsConfig)

    @field_validator("completion_windows")
    @classmethod
    def _windows(cls, value: list[str]) -> list[str]:
        for w in value:
            window_seconds(w)
        return value

    def pool(self, model: str) -> PoolBatchParams:
        """The section's values with ``pools.<model>``'s overrides applied."""
        o = self.pools.get(model) or BatchPoolConfig()
        return PoolBatchParams(
            share=self.share if o.share is None else o.share,
            replica_slots=self.replica_slots if o.replica_slots is None else o.replica_slots,
            online_replicas=self.online_replicas if o.online_replicas is None else o.online_replicas,
            engine_priority=self.engine_priority if o.engine_priority is None else o.engine_priority,
            backoff=o.backoff or self.backoff,
        )


@dataclass(frozen=True, slots=True)
class PoolBatchParams:
    """Resolved per-pool batch parameters (not a policy section)."""

    share: float
    replica_slots: int
    online_replicas: int
    engine_priority: int | None
    backoff: BatchBackoffConfig

    @property
    def slots(self) -> int:
        """Batch requests one replica may hold at once: ``floor(share × replica_slots)``, at least 1."""
        return max(1, int(self.share * self.replica_slots))

    def allowed(self, waiting: float | None) -> int:
        """Slots allowed now, given the replica's online queue (None: unknown, the full share)."""
        if waiting is None or waiting <= self.backoff.waiting_start:
            return self.slots
        if waiting >= self.backoff.waiting_stop:
            return 0
        span = self.backoff.waiting_stop - self.backoff.waiting_start
        return int(self.slots * (self.backoff.waiting_stop - waiting) / span)
