"""OpenTelemetry spans of one request, made by hooks on the lifecycle's events (each a no-op while
the policy has tracing off).

    <operation> <model>   SERVER  the request, from its first byte to ``finished``; the parent is the
                                  client's ``traceparent`` when it sent one
      admission           handler start → ``admitted``: tenancy, validation, markers, tenant limits
      cache               ``admitted`` → ``routing`` (a miss or bypass) or the answer (a hit)
      route               ``routing`` → ``routed``: filters, the policy's pick, a slot awaited
      <operation> <model> CLIENT  one upstream attempt, ``routed`` → the next ``routing`` (a retry) or
                                  the end; its context goes to the replica as ``traceparent``

Attributes follow the GenAI semantic conventions (``gen_ai.operation.name``, ``gen_ai.request.model``,
``gen_ai.usage.input_tokens`` / ``output_tokens`` / ``cache_read.input_tokens``, ``server.address``)
plus the gateway's own (``prefix_gateway.cache``, ``.replica``, ``.route_reason``, ``.matched_tokens``,
``.tenant``); they are counts, names and ids, never prompt or answer text.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import ENDPOINTS

if TYPE_CHECKING:
    from gateway.observability.tracing import Tracing

_OPERATION = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings"}

try:  # the otel extra (tracing on needs it: ``gateway.observability.tracing`` refuses otherwise)
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover
    otel_trace = None  # type: ignore[assignment]


@dataclass(slots=True)
class Spans:
    request: Any
    parent: Any  # the context child spans start in
    open: dict[str, Any] = field(default_factory=dict)  # stage name -> its open span


def _ns_since_start(ctx: RequestContext) -> int:
    """The request's start on the wall clock (spans take epoch nanoseconds)."""
    return time.time_ns() - int((time.perf_counter() - ctx.started) * 1e9)


def _operation(ctx: RequestContext) -> str:
    endpoint = ctx.parsed.endpoint if ctx.parsed is not None else ctx.endpoint
    return _OPERATION.get(endpoint, endpoint)


def _spans(ctx: RequestContext, tracing: Tracing) -> Spans:
    if ctx.trace is None:
        parent = tracing.propagator.extract(carrier=ctx.headers)  # case-insensitive over HTTP
        span = tracing.tracer.start_span(
            f"{_operation(ctx)} {ctx.model}",
            context=parent,
            kind=SpanKind.SERVER,
            start_time=_ns_since_start(ctx),
            attributes={"http.request.method": "POST", "url.path": ENDPOINTS[ctx.endpoint].path},
        )
        ctx.trace = Spans(span, otel_trace.set_span_in_context(span, parent))
    return ctx.trace


def _child(ctx: RequestContext, tracing: Tracing, name: str, **kw: Any) -> Any:
    spans = _spans(ctx, tracing)
    span = tracing.tracer.start_span(name, context=spans.parent, **kw)
    spans.open[name] = span
    return span


def _end(
    ctx: RequestContext, tracing: Tracing, name: str, error: str | None = None, **attributes: Any
) -> None:
    span = _spans(ctx, tracing).open.pop(name, None)
    if span is None:
        return
    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if error is not None:
        span.set_status(Status(StatusCode.ERROR, error))
    span.end()


# -- the events: each does nothing when the policy has tracing off (``process.tracing`` is None) -------
def admitted(ctx: RequestContext) -> None:
    if (tracing := ctx.process.tracing) is None:
        return
    start = _ns_since_start(ctx)
    _spans(ctx, tracing).request.update_name(f"{_operation(ctx)} {ctx.model}")
    _child(ctx, tracing, "admission", start_time=start)
    tenant = ctx.tenant.metric_label if ctx.tenant is not None else None
    _end(ctx, tracing, "admission", **{"prefix_gateway.tenant": tenant})
    _child(ctx, tracing, "cache")


def routing(ctx: RequestContext) -> None:
    if (tracing := ctx.process.tracing) is None:
        return
    _end(ctx, tracing, "cache", **{"prefix_gateway.cache": ctx.served.cache or "off"})
    _end(ctx, tracing, "attempt", ctx.upstream_error)  # the previous attempt failed: this is a retry
    _child(ctx, tracing, "route")


def routed(ctx: RequestContext) -> None:
    if (tracing := ctx.process.tracing) is None:
        return
    d = ctx.decision
    assert d is not None
    attributes: dict[str, Any] = {
        "prefix_gateway.replica": d.replica.id,
        "prefix_gateway.route_policy": d.policy,
        "prefix_gateway.route_reason": d.reason,
        "prefix_gateway.prompt_tokens_estimate": d.prompt_tokens,
        "prefix_gateway.matched_tokens": d.matched_tokens,
    }
    _end(ctx, tracing, "route", **attributes)
    url = urlsplit(d.replica.url)
    attempt = _child(
        ctx,
        tracing,
        "attempt",
        kind=SpanKind.CLIENT,
        attributes={
            "gen_ai.operation.name": _operation(ctx),
            "gen_ai.request.model": ctx.parsed.model if ctx.parsed is not None else ctx.model,
            "gen_ai.system": ctx.pool.cfg.backend if ctx.pool is not None else "vllm",
            "server.address": url.hostname or "",
            "server.port": url.port or 80,
            "prefix_gateway.replica": d.replica.id,
            "prefix_gateway.attempt": len(ctx.attempts),
        },
    )
    attempt.update_name(f"{_operation(ctx)} {ctx.model}")


def propagation(ctx: RequestContext) -> dict[str, str]:
    """The headers an attempt carries to its replica: the context of its open ``attempt`` span (the
    ``routed`` hook opened it), derived when the attempt is sent, never stored for the stage to read."""
    tracing = ctx.process.tracing
    if tracing is None or ctx.trace is None or (attempt := ctx.trace.open.get("attempt")) is None:
        return {}
    carrier: dict[str, str] = {}
    tracing.propagator.inject(carrier, context=otel_trace.set_span_in_context(attempt))
    return carrier


def first_byte(ctx: RequestContext) -> None:
    if ctx.process.tracing is None or ctx.trace is None:
        return
    span = ctx.trace.open.get("attempt")
    if span is not None:
        span.add_event("first_byte")


def answered(ctx: RequestContext) -> None:
    if (tracing := ctx.process.tracing) is None:
        return
    usage = _usage(ctx)
    error = f"status {ctx.status}" if ctx.status >= 400 else None
    _end(ctx, tracing, "attempt", error, **usage)
    _end(ctx, tracing, "cache", **{"prefix_gateway.cache": ctx.served.cache or "off"})


def finished(ctx: RequestContext) -> None:
    if (tracing := ctx.process.tracing) is None:
        return
    spans = _spans(ctx, tracing)
    for name in list(spans.open):
        _end(ctx, tracing, name, "cancelled" if ctx.status == 499 else None)
    span = spans.request
    attributes = {
        "http.response.status_code": ctx.status,
        "gen_ai.operation.name": _operation(ctx),
        "gen_ai.request.model": ctx.parsed.model if ctx.parsed is not None else None,
        "prefix_gateway.cache": ctx.served.cache,
        "prefix_gateway.replica": ctx.replica_id if ctx.decision is not None else None,
        "prefix_gateway.attempts": len(ctx.attempts),
        "prefix_gateway.source": ctx.served.source,
        **_usage(ctx),
    }
    span.set_attributes({k: v for k, v in attributes.items() if v is not None})
    if ctx.status >= 400:
        span.set_status(Status(StatusCode.ERROR, f"status {ctx.status}"))
    span.end()


def _usage(ctx: RequestContext) -> dict[str, Any]:
    usage = ctx.usage if isinstance(ctx.usage, dict) else {}
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return {
        "gen_ai.usage.input_tokens": usage.get("prompt_tokens"),
        "gen_ai.usage.output_tokens": usage.get("completion_tokens"),
        "gen_ai.usage.cache_read.input_tokens": cached,
    }
