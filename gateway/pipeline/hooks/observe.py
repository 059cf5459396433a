"""Request metrics and the access log: the ``finished`` hook, once per request, from its outcome
(``pipeline.context.Outcome``) and its attempts.

One JSON access-log line per request (ids, tenant, model, replica, status, timings, routing and cache
outcome, the batch of a batch line; never prompt text), serialised once with orjson. Batch lines count
in the request counters but not in the latency histograms, which are the online path's: a line's
latency is its batch's business (``prefix_gateway_batch_*``).
"""

from __future__ import annotations

import time

from gateway.observability.logs import log_access
from gateway.pipeline.context import RequestContext


def finished(ctx: RequestContext) -> None:
    elapsed = time.perf_counter() - ctx.started
    metrics, model, d, outcome = ctx.process.metrics, ctx.model, ctx.decision, ctx.outcome
    assert outcome is not None  # the handler concludes every request before ``finished``
    status, served = str(outcome.status), outcome.served
    replica = ctx.replica_id
    metrics.requests.inc(model, replica, status)
    if served.cache:
        metrics.cache_requests.inc(served.cache)
    if ctx.adapter is not None:  # a name the pool knows: bounded by lora.max_adapters
        metrics.child(metrics.adapter_requests, model, ctx.adapter, status).inc()
    if model != "-" and ctx.batch_id is None:
        metrics.duration.observe(elapsed, model)
        metrics.ttfb.observe(ctx.first_byte_s if ctx.first_byte_s is not None else elapsed, model)
    if ctx.state.policy.server.access_log:
        log_access(
            {
                "request_id": ctx.request_id,
                "client_request_id": ctx.client_request_id,
                "tenant": ctx.tenant.metric_label if ctx.tenant is not None else "-",
                "model": model,
                "endpoint": ctx.endpoint,
                "status": outcome.status,
                "replica": replica,
                "attempts": len(ctx.attempts),
                "route_reason": d.reason if d is not None else None,
                "prompt_tokens_est": d.prompt_tokens if d is not None else 0,
                "matched_tokens_est": d.matched_tokens if d is not None else 0,
                "upstream_error": ctx.upstream_error,
                "cache": served.cache,
                "source": served.source,
                "batch": ctx.batch_id,
                "ttfb_ms": round(ctx.first_byte_s * 1000, 2) if ctx.first_byte_s is not None else None,
                "duration_ms": round(elapsed * 1000, 2),
            }
        )
