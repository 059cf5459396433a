"""A request's place in a saturated fleet (``fairness.enabled``): its priority class, weight and TTFT
objective, decided once after the tenant's limits; the waiting itself is the process's
(``gateway.process.fair_admission``, reached through ``ctx.process.fair`` from ``dispatch``).

- The class: the policy's header (``x-gateway-priority``; smg's ``x-smg-priority`` when accepted and
  the first is absent) names a class, capped at the tenant's ceiling (``router.fairness.classes``);
  the answer's ``x-gateway-priority`` says the class it was served in. A name that is no class: 400.
- The objective: ``x-gateway-ttft-ms`` (milliseconds, > 0), else the class's ``ttft_ms``. Met or
  missed is counted at the replica's first byte (a whole answer's comes at its end: its TTFT is its
  latency).
- A line of an offline batch is the batch band: no tenant, no header, no objective.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from config.fairness import FairnessConfig
from gateway.errors import GatewayError
from gateway.pipeline.context import RequestContext
from router.fairness.classes import ClassSpec, UnknownClass, batch_band, resolve

SMG_HEADER = "x-smg-priority"


@dataclass(slots=True, eq=False)
class Ticket:
    spec: ClassSpec  # the class it waits in (the batch band for a batch line)
    flow: str | None  # its tenant (None: a batch line)
    label: str  # the tenant's metric label ("batch" for a batch line)
    weight: float
    max_queued: int  # its tenant's waiters at once
    objective_s: float | None  # TTFT objective
    capped: bool = False
    # its last routing through the fair queue (``gateway.process.fair_admission``), for the decision log
    waited_s: float = 0.0  # seconds in the queue (0: sent at once)
    released_by: str = "direct"  # what released it: direct, arrival, end, prefill, tick, give_back


def class_specs(cfg: FairnessConfig) -> tuple[ClassSpec, ...]:
    return tuple(
        ClassSpec(c.name, i, c.max_wait_s, c.ttft_ms / 1000 if c.ttft_ms else None)
        for i, c in enumerate(cfg.classes)
    )


def classify(ctx: RequestContext) -> None:
    """Set ``ctx.fair`` when the policy turns fairness on; 400 for a bad header."""
    cfg = ctx.state.policy.fairness
    if not cfg.enabled:
        return
    specs = class_specs(cfg)
    if ctx.batch_id is not None:
        band = batch_band(specs, cfg.batch_max_wait_s)
        ctx.fair = Ticket(band, None, "batch", 1.0, cfg.max_queued, None)
        return
    assert ctx.tenant is not None
    tenant = next((t for t in cfg.tenants if t.id == ctx.tenant.id), None)
    ceiling = (tenant.max_priority if tenant else None) or cfg.default_max_priority
    asked, header = _asked(ctx, cfg)
    try:
        got = resolve(asked, specs, cfg.default_class, ceiling)
    except UnknownClass:
        raise GatewayError(
            400,
            f"header {header} names no priority class; the classes are {[s.name for s in specs]}",
            param=header,
            code="invalid_priority",
        ) from None
    objective = _objective(ctx, cfg, got.spec)
    ctx.fair = Ticket(
        got.spec,
        ctx.tenant.id,
        ctx.tenant.metric_label,
        tenant.weight if tenant else cfg.default_weight,
        (tenant.max_queued if tenant and tenant.max_queued else None) or cfg.max_queued_per_tenant,
        objective,
        got.capped,
    )
    if got.capped:
        metrics = ctx.process.metrics
        metrics.child(metrics.fair_capped, ctx.tenant.metric_label).inc()


def _asked(ctx: RequestContext, cfg: FairnessConfig) -> tuple[str | None, str]:
    value = ctx.headers.get(cfg.header)
    if value is None and cfg.accept_smg_priority:
        smg = ctx.headers.get(SMG_HEADER)
        if smg is not None:
            return smg, SMG_HEADER
    return value, cfg.header


def _objective(ctx: RequestContext, cfg: FairnessConfig, spec: ClassSpec) -> float | None:
    raw = ctx.headers.get(cfg.ttft_header)
    if raw is None:
        return spec.ttft_s
    try:
        ms = float(raw)
    except ValueError:
        ms = math.nan
    if not math.isfinite(ms) or ms <= 0:
        raise GatewayError(
            400,
            f"header {cfg.ttft_header} must be a positive number of milliseconds",
            param=cfg.ttft_header,
            code="invalid_ttft_objective",
        )
    return ms / 1000
