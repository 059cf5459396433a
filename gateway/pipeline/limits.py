"""Per-tenant token buckets on the request path: requests/s, then prompt + n x max_tokens reserved from
tokens/min before the call (429 with ``Retry-After`` beyond either); what the request did not use is
refunded when it finishes (the ``finished`` hook), all of it when nothing was generated. Lines of an
offline batch do not draw on them (why: ``pipeline.handler``)."""

from __future__ import annotations

from cache.buckets import TakeResult
from gateway.errors import GatewayError
from gateway.pipeline.context import RequestContext


async def admit(ctx: RequestContext) -> None:
    cache = ctx.state.cache
    if cache is None or ctx.batch_id is not None:
        return
    assert ctx.tenant is not None and ctx.parsed is not None and ctx.pool is not None
    limiter, metrics, tenant = cache.limiter, ctx.process.metrics, ctx.tenant
    if limiter.requests_per_s is None and limiter.tokens_per_min is None:
        return  # no bucket to draw on (the default policy): both checks would admit, reserving nothing
    took = await limiter.check_request(tenant.id)
    if not took.allowed:
        metrics.child(metrics.ratelimited, tenant.metric_label, "requests").inc()
        raise _rate_limited(took, "requests per second", limiter.request_burst or 0)
    body = ctx.parsed.body
    sequences = max(int(body.get("n") or 1), int(body.get("best_of") or 1))  # checked by parse
    estimate = ctx.parsed.prompt_chars // ctx.pool.router.tokenizer.chars_per_token + sequences * int(
        body.get("max_tokens") or body.get("max_completion_tokens") or 16
    )
    took, ctx.reservation = await limiter.reserve_tokens(tenant.id, estimate)
    if not took.allowed:
        metrics.child(metrics.ratelimited, tenant.metric_label, "tokens").inc()
        raise _rate_limited(took, "tokens per minute", limiter.tokens_per_min or 0)


def _rate_limited(took: TakeResult, what: str, limit: float) -> GatewayError:
    retry = 60 if took.retry_after_s == float("inf") else max(1, int(took.retry_after_s + 0.999))
    return GatewayError(
        429,
        f"Rate limit reached for {what} (limit {limit:g}); retry after {retry}s",
        code="rate_limit_exceeded",
        headers={
            "Retry-After": str(retry),
            "x-ratelimit-limit": f"{limit:g}",
            "x-ratelimit-remaining": f"{max(0.0, took.remaining):.0f}",
            "x-ratelimit-reset": f"{retry}s",
        },
    )
