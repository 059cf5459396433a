"""Tenant limits' refund: ``finished`` gives back what the request's token reservation did not use."""

from __future__ import annotations

from gateway.pipeline.context import RequestContext


async def refund(ctx: RequestContext) -> None:
    """Refund what the reservation did not use (all of it when nothing was generated)."""
    if ctx.reservation is None or ctx.state.cache is None:
        return
    used = 0
    outcome = ctx.outcome
    if outcome is not None and outcome.usage and outcome.source == "upstream":
        used = int(outcome.usage.get("total_tokens") or 0)
    await ctx.state.cache.limiter.settle(ctx.reservation, used)
