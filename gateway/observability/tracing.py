"""OpenTelemetry for one gateway process (the ``otel`` extra): a tracer provider exporting over
OTLP/HTTP as the policy's ``tracing`` section says, opened and closed with the process.

Sampling is parent-based: a client's sampled ``traceparent`` is followed, new traces are sampled at
``sample_ratio``. Spans wait in a bounded queue (``max_queue_size``; beyond, dropped) for a background
exporter thread, so the request path never waits on the collector. The spans themselves are made by
the pipeline's lifecycle hooks (``gateway.pipeline.hooks.trace``).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from config.protocols import TracingConfig

try:  # the otel extra
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    from opentelemetry.trace import Tracer
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    OTEL = True
except ImportError:  # pragma: no cover - exercised only without the extra
    OTEL = False


@dataclass(slots=True)
class Tracing:
    provider: Any  # TracerProvider
    tracer: Any  # Tracer
    propagator: Any  # TraceContextTextMapPropagator (W3C traceparent / tracestate)

    async def close(self) -> None:
        """Export what is queued (within the export timeout), then stop."""
        await asyncio.to_thread(self.provider.shutdown)


def otlp_headers(cfg: TracingConfig) -> dict[str, str]:
    """``k=v,k=v`` from the variable ``headers_env`` names (an auth token stays out of the policy)."""
    raw = os.environ.get(cfg.headers_env, "") if cfg.headers_env else ""
    pairs = (p.split("=", 1) for p in raw.split(",") if "=" in p)
    return {k.strip(): v.strip() for k, v in pairs}


def open_tracing(cfg: TracingConfig, exporter: Any = None) -> Tracing | None:
    """The process's tracing, or None when the policy turns it off. ``exporter`` replaces OTLP (tests
    pass the SDK's in-memory exporter)."""
    if not cfg.enabled:
        return None
    if not OTEL:
        raise RuntimeError("tracing.enabled needs the otel extra: pip install 'prefix-gateway[otel]'")
    span_exporter: SpanExporter = exporter or OTLPSpanExporter(
        endpoint=cfg.otlp_endpoint, headers=otlp_headers(cfg), timeout=cfg.export_timeout_s
    )
    provider = TracerProvider(
        resource=Resource.create({"service.name": cfg.service_name}),
        sampler=ParentBased(TraceIdRatioBased(cfg.sample_ratio)),
    )
    provider.add_span_processor(
        BatchSpanProcessor(
            span_exporter,
            max_queue_size=cfg.max_queue_size,
            max_export_batch_size=min(512, cfg.max_queue_size),
            export_timeout_millis=cfg.export_timeout_s * 1000,
        )
    )
    tracer: Tracer = provider.get_tracer("prefix-gateway")
    return Tracing(provider, tracer, TraceContextTextMapPropagator())
