"""Routing feedback: what the router and the operator learn from each attempt.

``routed``: the decision is counted (by policy and reason, with its predicted match) and kept for
``GET /admin/routing/explain``. ``first_byte``: the replica's prefill for this request is done (a
stream's first byte; a whole answer's comes at its end), so the router releases the prefill it had
queued there (and, under a queued-prefill bound, a fair-queue waiter may take the room). ``completed``: the replica's ``cached_tokens`` against what the index predicted (the
capacity learning's evidence, and the achieved/available counters).
"""

from __future__ import annotations

from gateway.pipeline.context import RequestContext


def prefill_done(ctx: RequestContext) -> None:
    """The answer's first byte: a stream's says its prefill is done (and how fast it went); a whole
    answer's comes at its end (its prefill was released by its timer, else now)."""
    d, pool = ctx.attempts[-1].decision, ctx.pool  # an attempt has a first byte: ``decision``, one call less
    if pool is None or ctx.parsed is None:
        return
    if ctx.parsed.stream:
        pool.router.first_byte(d)
        prefill_room(ctx)
        return
    if ctx.generation_started:
        pool.router.answered_whole(d)
    pool.router.release_prefill(d)


def prefill_room(ctx: RequestContext) -> None:
    """The request's queued prefill was released: under ``fairness.max_queued_prefill_tokens`` that is
    room for a waiter of a lower class, released now rather than at the fair queue's next tick (50 ms
    later) or the next end (``gateway.process.fair_admission``)."""
    bounded = ctx.state.policy.fairness.max_queued_prefill_tokens is not None
    if bounded and ctx.fair is not None and ctx.pool is not None:
        ctx.process.fair.released(ctx.pool.name, why="prefill")


def record_decision(ctx: RequestContext) -> None:
    d = ctx.attempts[-1].decision  # ``routed``: the attempt is there (``ctx.decision``, one call less)
    if d.explanation is not None:
        limit = ctx.state.policy.limits.explain_decisions
        f = ctx.fair
        queued = (f.spec.name, f.waited_s, f.released_by) if f is not None else None
        ctx.process.decisions.record(
            ctx.request_id, ctx.client_request_id, ctx.model, d.explanation, limit, queued
        )


def count_decision(ctx: RequestContext) -> None:
    d, metrics = ctx.attempts[-1].decision, ctx.process.metrics  # ``routed``: as ``record_decision``
    model = ctx.model
    metrics.decisions.inc(model, d.policy, d.reason)
    if d.prompt_tokens:
        metrics.match_fraction.observe(d.matched_tokens / d.prompt_tokens, model)


def observe_usage(ctx: RequestContext) -> None:
    """Compare what the index predicted with what the replica says it had cached."""
    d, outcome = ctx.decision, ctx.outcome
    usage = outcome.usage if outcome is not None else None
    if (
        d is None
        or ctx.pool is None
        or outcome is None
        or outcome.source != "upstream"
        or not isinstance(usage, dict)
    ):
        return
    if not d.block_hashes:
        return
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        return
    ctx.pool.router.observe_usage(d, cached)
    metrics = ctx.process.metrics
    metrics.child(metrics.predicted_tokens, d.replica.id).inc(d.matched_tokens)
    metrics.child(metrics.reported_cached_tokens, d.replica.id).inc(max(0, cached))
    metrics.child(metrics.available_tokens, ctx.pool.name, d.replica.id).inc(d.available_tokens)
    metrics.child(metrics.achieved_tokens, ctx.pool.name, d.replica.id).inc(max(0, cached))
    ctx.process.decisions.reported(ctx.request_id, max(0, cached))
