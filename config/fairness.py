"""The ``fairness`` section: sharing a saturated fleet between tenants, priority classes, TTFT
objectives (``router.fairness``, ``gateway.process.fair_admission``; docs/operations.md).

Off by default. On, requests wait at the gateway while every replica of their pool holds its slots,
which needs a number the gateway cannot guess: how many requests a replica runs well at once
(``slots_per_replica``, else ``limits.max_concurrent_per_replica``). Without one the queue has no
point at which to start; a default would either never hold anything (a large number) or hold
requests an idle engine could have run (a small one), and a single-tenant deployment, the quick
start, has nobody to be fair to.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PriorityClassConfig(_Strict):
    name: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9_-]+$", description="class name")
    max_wait_s: float = Field(
        10.0, gt=0, description="starvation bound: a request that waited this long goes before any order"
    )
    ttft_ms: float | None = Field(
        None, gt=0, description="TTFT objective of the class (a request's header may set its own)"
    )


class FairTenantConfig(_Strict):
    id: str = Field(min_length=1, max_length=128, description="tenant id (tenancy.tenants)")
    weight: float = Field(1.0, gt=0, le=1e6, description="share of a saturated pool's work, relative")
    max_priority: str | None = Field(
        None, description="highest class it may ask for (None: default_max_priority)"
    )
    max_queued: int | None = Field(
        None, ge=1, description="its requests waiting at once (None: max_queued_per_tenant)"
    )


def _default_classes() -> list[PriorityClassConfig]:
    return [
        PriorityClassConfig(name="interactive", max_wait_s=2.0),
        PriorityClassConfig(name="standard", max_wait_s=10.0),
        PriorityClassConfig(name="background", max_wait_s=30.0),
    ]


class FairnessConfig(_Strict):
    enabled: bool = Field(
        False,
        description="hold requests at the gateway while a pool is saturated, released in fair order "
        "(off: requests go to the replicas at once, as before)",
    )
    slots_per_replica: int = Field(
        0,
        ge=0,
        le=100_000,
        description="requests one process runs at once on one replica before the pool is saturated "
        "(0: limits.max_concurrent_per_replica; one of them must be set when enabled)",
    )
    reserved_slots: int = Field(
        0,
        ge=0,
        le=100_000,
        description="slots of each replica only the highest class may take (smg's reserved slots); "
        "fewer than the slots",
    )
    headroom_slots: int = Field(
        0,
        ge=0,
        le=100_000,
        description="slots above the slots of each replica only the highest class may take: the engines' "
        "batch (max_num_seqs) must hold slots + headroom; an interactive request then finds one free instead "
        "of waiting for a lower class's request to end",
    )
    auto_headroom: bool = Field(
        False,
        description="keep slots of each replica for the highest class as many as its measured concurrency "
        "needs (router.fairness.headroom): the slots are then the engines' batch, the lower classes get the "
        "slots less the derived headroom; an explicit headroom_slots or reserved_slots wins",
    )
    auto_headroom_max_slots: int | None = Field(
        None, ge=0, le=100_000, description="derived headroom of a replica at most (None: half the slots)"
    )
    auto_headroom_min_slots: int = Field(
        1,
        ge=0,
        le=100_000,
        description="derived headroom of a replica at least (kept while the class is idle)",
    )
    auto_headroom_model: str = Field(
        "poisson",
        pattern="^(poisson|observed)$",
        description="how the highest class's concurrency is taken (router.fairness.headroom): poisson, the "
        "quantile of a Poisson count of mean arrival rate x time in the system (Little's law) over the "
        "window; observed, the quantile of the counts its arrivals made in the window",
    )
    auto_headroom_quantile: float = Field(
        0.95,
        gt=0,
        le=1,
        description="the quantile of the highest class's concurrency kept room for (auto_headroom_model)",
    )
    auto_headroom_window_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="seconds of the highest class's concurrency the quantile is taken over",
    )
    max_queued_prefill_tokens: int | None = Field(
        None,
        ge=0,
        description="below the highest class, a replica with more prefill tokens queued by this process "
        "(sent, first token not yet seen) is full: an interactive request's prefill then shares an engine "
        "step with at most about this much of a lower class's (None: not bounded)",
    )
    kv_usage_full: float | None = Field(
        None, gt=0, le=1, description="a replica reporting this KV usage or more is full (None: not read)"
    )
    max_engine_waiting: float | None = Field(
        None, ge=0, description="a replica reporting more requests waiting is full (None: not read)"
    )
    classes: list[PriorityClassConfig] = Field(
        default_factory=_default_classes, min_length=1, max_length=16, description="highest first"
    )
    default_class: str = Field("standard", description="class of a request that names none")
    default_max_priority: str = Field(
        "standard", description="highest class a tenant not listed in `tenants` may ask for"
    )
    header: str = Field("x-gateway-priority", min_length=1, description="request header naming the class")
    accept_smg_priority: bool = Field(
        True, description="also read x-smg-priority (a class name) when the header is absent"
    )
    ttft_header: str = Field(
        "x-gateway-ttft-ms", min_length=1, description="request header: its TTFT objective in milliseconds"
    )
    on_objective_miss: str = Field(
        "reject",
        pattern="^(reject|serve)$",
        description="a request no replica is predicted to serve within its objective: reject (429 with "
        "Retry-After, at once) or serve (queued anyway; counted as predicted missed)",
    )
    batch_max_wait_s: float = Field(60.0, gt=0, description="starvation bound of the batch band")
    queue_timeout_s: float = Field(30.0, gt=0, description="longest wait at the gateway before 503")
    max_queued: int = Field(1024, ge=1, description="requests waiting per pool (past it: preemption or 503)")
    max_queued_per_tenant: int = Field(
        256, ge=1, description="a tenant's requests waiting per pool, else 429"
    )
    tenants: list[FairTenantConfig] = Field(default_factory=list)
    default_weight: float = Field(1.0, gt=0, description="weight of a tenant not listed")
    decode_weight: float = Field(
        5.0, ge=0, description="prefill tokens one output token counts as in predicted work"
    )
    default_max_tokens: int = Field(256, ge=1, description="decode estimate of a request without max_tokens")
    lookahead: int = Field(
        8,
        ge=1,
        le=1024,
        description="waiters a release looks at for one whose prefix the freed replica holds",
    )
    overhead_ms: float = Field(
        9.7, ge=0, description="TTFT model: one engine step (the simulator's A100 step)"
    )
    service_s: float = Field(
        2.0, gt=0, description="TTFT model: a request's slot time until the pool's attempts teach it"
    )

    @model_validator(mode="after")
    def _names(self) -> FairnessConfig:
        names = [c.name for c in self.classes]
        if len(names) != len(set(names)):
            raise ValueError("fairness.classes names must be unique")
        if "batch" in names:
            raise ValueError("'batch' is the band of offline batch lines, not a class name")
        for what, name in (
            ("default_class", self.default_class),
            ("default_max_priority", self.default_max_priority),
        ):
            if name not in names:
                raise ValueError(f"fairness.{what} {name!r} is not one of fairness.classes {names}")
        ids = [t.id for t in self.tenants]
        if len(ids) != len(set(ids)):
            raise ValueError("fairness.tenants ids must be unique")
        for t in self.tenants:
            if t.max_priority is not None and t.max_priority not in names:
                raise ValueError(f"fairness.tenants {t.id!r}: max_priority {t.max_priority!r} is no class")
        return self
