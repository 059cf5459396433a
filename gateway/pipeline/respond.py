"""The one module that writes the end of an answer, so that ``completed`` (billing: the ledger row)
always happens before the client can see that end.

- ``whole``: a JSON answer sent at once (relayed, from the cache, or a fallback). Parsed at most once
  upstream of here; serialised again only when something changes it (unmasking, the billing usage
  extension). The billing line item goes out as ``x-gateway-billing-*`` headers.
- ``open_stream`` / ``close_stream``: an SSE answer. ``close_stream`` emits ``completed``, then writes
  ``[DONE]`` (or, for a stream that failed part-way, an OpenAI-shaped error event) and ends it.
- ``error``: an answer in OpenAI's error format; ``failed`` is emitted by the handler.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from cache.billing.pricing import billing_headers, usage_extension
from gateway.errors import GatewayError, error_body, error_response
from gateway.pipeline.context import RequestContext
from gateway.pipeline.lifecycle import Event

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
DONE_EVENT = b"data: [DONE]\n\n"


def sse_event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


async def whole(
    ctx: RequestContext,
    status: int,
    data: bytes,
    headers: dict[str, str],
    parsed: dict[str, Any] | None = None,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> web.Response:
    """Send a whole answer: ``data`` as it came, unless ``parsed`` (the same answer, parsed) must be
    rewritten or carry the billing extension."""
    ctx.status = status
    ctx.first_byte_s = time.perf_counter() - ctx.started
    await ctx.process.hooks.emit(Event.COMPLETED if status == 200 else Event.FAILED, ctx)
    item = ctx.line_item
    cfg = ctx.state.policy.billing.response
    if parsed is not None:
        extend = item is not None and cfg.usage_extension and isinstance(parsed.get("usage"), Mapping)
        if rewrite is not None or extend:
            body = rewrite(parsed) if rewrite is not None else parsed
            if extend:
                body = {**body, "usage": {**body["usage"], "billing": usage_extension(item)}}  # type: ignore[arg-type]
            data = orjson.dumps(body)
    if item is not None and cfg.headers:
        headers.update(billing_headers(item, cfg.header_prefix))
    headers.setdefault("Content-Type", "application/json")
    return web.Response(status=status, body=data, headers=headers)


async def open_stream(ctx: RequestContext, headers: Mapping[str, str]) -> web.StreamResponse:
    assert ctx.request is not None, "only a request that came over HTTP streams"  # batch lines never do
    out = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
    await out.prepare(ctx.request)
    ctx.status = 200
    ctx.first_byte_s = time.perf_counter() - ctx.started
    return out


async def close_stream(
    ctx: RequestContext, out: web.StreamResponse, *, done: bool, error: str | None = None
) -> web.StreamResponse:
    """End a stream: ``[DONE]`` when it ended normally, the error event when it failed part-way
    (``error`` set), or nothing more when the replica sent no end. The ledger row comes first."""
    await ctx.process.hooks.emit(Event.COMPLETED, ctx)
    if error is not None:
        await out.write(sse_event(error_body(error, "upstream_error", None, "upstream_stream_error")))
    elif done:
        await out.write(DONE_EVENT)
    await out.write_eof()
    return out


def error(ctx: RequestContext, err: GatewayError) -> web.Response:
    ctx.status = err.status
    err.headers.setdefault("x-request-id", ctx.request_id)
    return error_response(err)
