"""OpenTelemetry spans of one request, made by hooks on the lifecycle's events (installed by the
process when the policy turns tracing on).

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
from gateway.pipeline.lifecycle import Event, Hooks
from gateway.pipeline.parse import ENDPOINTS

if TYPE_CHECKING:
    from gateway.observability.tracing import Tracing

_OPERATION = {"chat": "chat", "completions": "text_completion", "embeddings": "embeddings"}

try:  # the otel extra (the process installs these hooks only when tracing is on)
    from opentelemetry import trace as otel_trace
    from opentelemetry.trace import SpanKind, Status, StatusCode
except ImportError:  # pragma: no cover
    otel_trace = None


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


class RequestTracer:
    def __init__(self, tracing: Tracing):
        self.tracing = tracing
        self.tracer = tracing.tracer

    def spans(self, ctx: RequestContext) -> Spans:
        if ctx.trace is None:
            parent = self.tracing.propagator.extract(carrier=ctx.headers)  # case-insensitive over HTTP
            span = self.tracer.start_span(
                f"{_operation(ctx)} {ctx.model}",
                context=parent,
                kind=SpanKind.SERVER,
                start_time=_ns_since_start(ctx),
                attributes={"http.request.method": "POST", "url.path": ENDPOINTS[ctx.endpoint].path},
            )
            ctx.trace = Spans(span, otel_trace.set_span_in_context(span, parent))
        return ctx.trace  # type: ignore[no-any-return]

    def _child(self, ctx: RequestContext, name: str, **kw: Any) -> Any:
        spans = self.spans(ctx)
        span = self.tracer.start_span(name, context=spans.parent, **kw)
        spans.open[name] = span
        return span

    def _end(self, ctx: RequestContext, name: str, error: str | None = None, **attributes: Any) -> None:
        span = self.spans(ctx).open.pop(name, None)
        if span is None:
            return
        span.set_attributes({k: v for k, v in attributes.items() if v is not None})
        if error is not None:
            span.set_status(Status(StatusCode.ERROR, error))
        span.end()

    # -- the events --------------------------------------------------------------------------------
    def admitted(self, ctx: RequestContext) -> None:
        start = _ns_since_start(ctx)
        self.spans(ctx).request.update_name(f"{_operation(ctx)} {ctx.model}")
        self._child(ctx, "admission", start_time=start)
        tenant = ctx.tenant.metric_label if ctx.tenant is not None else None
        self._end(ctx, "admission", **{"prefix_gateway.tenant": tenant})
        self._child(ctx, "cache")

    def routing(self, ctx: RequestContext) -> None:
        self._end(ctx, "cache", **{"prefix_gateway.cache": ctx.cache or "off"})
        self._end(ctx, "attempt", ctx.upstream_error)  # the previous attempt failed: this is a retry
        self._child(ctx, "route")

    def routed(self, ctx: RequestContext) -> None:
        d = ctx.decision
        assert d is not None
        self._end(
            ctx,
            "route",
            **{
                "prefix_gateway.replica": d.replica.id,
                "prefix_gateway.route_policy": d.policy,
                "prefix_gateway.route_reason": d.reason,
                "prefix_gateway.prompt_tokens_estimate": d.prompt_tokens,
                "prefix_gateway.matched_tokens": d.matched_tokens,
            },
        )
        url = urlsplit(d.replica.url)
        attempt = self._child(
            ctx,
            "attempt",
            kind=SpanKind.CLIENT,
            attributes={
                "gen_ai.operation.name": _operation(ctx),
                "gen_ai.request.model": ctx.parsed.model if ctx.parsed is not None else ctx.model,
                "gen_ai.system": ctx.pool.cfg.backend if ctx.pool is not None else "vllm",
                "server.address": url.hostname or "",
                "server.port": url.port or 80,
                "prefix_gateway.replica": d.replica.id,
                "prefix_gateway.attempt": ctx.attempts,
            },
        )
        attempt.update_name(f"{_operation(ctx)} {ctx.model}")
        carrier: dict[str, str] = {}
        self.tracing.propagator.inject(carrier, context=otel_trace.set_span_in_context(attempt))
        ctx.propagate = carrier

    def first_byte(self, ctx: RequestContext) -> None:
        span = self.spans(ctx).open.get("attempt")
        if span is not None:
            span.add_event("first_byte")

    def answered(self, ctx: RequestContext) -> None:
        usage = _usage(ctx)
        error = f"status {ctx.status}" if ctx.status >= 400 else None
        self._end(ctx, "attempt", error, **usage)
        self._end(ctx, "cache", **{"prefix_gateway.cache": ctx.cache or "off"})

    def finished(self, ctx: RequestContext) -> None:
        spans = self.spans(ctx)
        for name in list(spans.open):
            self._end(ctx, name, "cancelled" if ctx.status == 499 else None)
        span = spans.request
        attributes = {
            "http.response.status_code": ctx.status,
            "gen_ai.operation.name": _operation(ctx),
            "gen_ai.request.model": ctx.parsed.model if ctx.parsed is not None else None,
            "prefix_gateway.cache": ctx.cache,
            "prefix_gateway.replica": ctx.replica_id if ctx.decision is not None else None,
            "prefix_gateway.attempts": ctx.attempts,
            "prefix_gateway.source": ctx.source,
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


def install(hooks: Hooks, tracing: Tracing) -> None:
    t = RequestTracer(tracing)
    hooks.on(Event.ADMITTED, t.admitted)
    hooks.on(Event.ROUTING, t.routing)
    hooks.on(Event.ROUTED, t.routed)
    hooks.on(Event.FIRST_BYTE, t.first_byte)
    hooks.on(Event.COMPLETED, t.answered)
    hooks.on(Event.FAILED, t.answered)
    hooks.on(Event.FINISHED, t.finished)
