"""TTFT objectives: ``first_byte`` counts whether the request met the objective it was admitted with."""

from __future__ import annotations

import time

from gateway.pipeline.context import RequestContext


def objective_outcome(ctx: RequestContext) -> None:
    """The replica's first byte: the request met its objective or missed it."""
    t, pool = ctx.fair, ctx.pool
    if t is None or t.objective_s is None or pool is None:
        return
    met = time.perf_counter() - ctx.started <= t.objective_s
    metrics = ctx.process.metrics
    metrics.child(metrics.ttft_objective, pool.name, t.spec.name, "met" if met else "missed").inc()
