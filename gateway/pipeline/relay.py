"""Relay one replica's answer to the client: whole (parsed at most once) or streamed event by event.

Until the first byte goes to the client a failure is the attempt's (``UpstreamFailure``: the
dispatcher retries elsewhere); after it, a failed stream ends with an SSE error event in OpenAI's
shape (``respond.close_stream``) whose message says what happened in our words, never the HTTP
client's (no "TransferEncodingError: 400" for a client to puzzle over).

An error a replica answers is relayed with its status and message in the client's API's error shape
(``respond.whole``, ``protocols.base.replica_error``): vLLM and SGLang answer ``"type":
"BadRequestError", "code": 400``, which OpenAI's clients do not know. An answer the replica ended with ``finish_reason: "abort"`` (vLLM: the engine
gave the request up) is relayed as it came, and logged and counted as an upstream failure of kind
``aborted`` (never cached: ``cache.entry.storable``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from cache.entry import aborted
from gateway.pipeline import respond
from gateway.pipeline.context import RequestContext
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.stream_tap import StreamTap
from gateway.upstream.client import HOP_BY_HOP, UpstreamFailure

log = logging.getLogger("prefix_gateway")


def _count_abort(ctx: RequestContext) -> None:
    ctx.upstream_error = "aborted"
    metrics = ctx.process.metrics
    metrics.child(metrics.upstream_errors, ctx.replica_id, "aborted").inc()
    log.warning(
        "the replica aborted the answer (finish_reason abort)",
        extra={
            "event": "upstream_aborted",
            "replica": ctx.replica_id,
            "model": ctx.model,
            "request_id": ctx.request_id,
        },
    )


@dataclass(slots=True)
class Relay:
    """How to treat the answer on its way back: what to watch in a stream, how to rewrite a whole body."""

    tap: StreamTap | None = None
    rewrite_whole: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def relayed_headers(resp: aiohttp.ClientResponse, ctx: RequestContext) -> dict[str, str]:
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP}
    decision = ctx.decision
    assert decision is not None
    headers["x-gateway-replica"] = decision.replica.id
    headers.update(ctx.answer_headers())
    if decision.prompt_tokens:
        headers["x-gateway-prefix-match"] = f"{decision.matched_tokens}/{decision.prompt_tokens}"
    return headers


async def relay(ctx: RequestContext, resp: aiohttp.ClientResponse, how: Relay) -> web.StreamResponse:
    assert ctx.parsed is not None
    if ctx.parsed.stream and resp.status == 200:
        return await _stream(ctx, resp, how.tap)
    return await _whole(ctx, resp, how.rewrite_whole)


async def _whole(
    ctx: RequestContext,
    resp: aiohttp.ClientResponse,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None,
) -> web.Response:
    assert ctx.decision is not None
    data, parsed = await ctx.state.upstream.read_answer(ctx.decision.replica, resp)
    await ctx.process.hooks.emit(Event.FIRST_BYTE, ctx)
    headers = relayed_headers(resp, ctx)
    if parsed is not None:
        ctx.response = parsed
        usage = parsed.get("usage")
        ctx.usage = usage if isinstance(usage, dict) else None
        if aborted(parsed):
            _count_abort(ctx)
    return await respond.whole(ctx, resp.status, data, headers, parsed, rewrite)


async def _stream(
    ctx: RequestContext, resp: aiohttp.ClientResponse, tap: StreamTap | None
) -> web.StreamResponse:
    assert ctx.decision is not None
    chunks = ctx.state.upstream.stream(ctx.decision.replica, resp)
    # Read the first chunk before answering: until then a failure can still be retried elsewhere.
    first = await anext(chunks, b"")
    await ctx.process.hooks.emit(Event.FIRST_BYTE, ctx)
    out = await respond.open_stream(ctx, relayed_headers(resp, ctx))
    failed: UpstreamFailure | None = None
    try:
        if first:
            await out.write(tap.feed(first) if tap is not None else first)
        async for chunk in chunks:
            if tap is not None:
                chunk = tap.feed(chunk)
                if not chunk:
                    continue
            await out.write(chunk)
    except UpstreamFailure as failure:
        failed = failure
    finally:
        if tap is not None:  # also when the client went away: its row is made of these
            ctx.usage = tap.usage
            ctx.generated_chunks = tap.events
    if tap is not None:
        ctx.response = tap.result()
        if tap.aborted:
            _count_abort(ctx)
    if failed is not None:
        ctx.upstream_error = f"midstream_{failed.kind}"
        metrics = ctx.process.metrics
        metrics.child(metrics.upstream_errors, ctx.replica_id, ctx.upstream_error).inc()
        error = f"the replica's stream broke off before its end: {failed}"
        return await respond.close_stream(ctx, out, done=False, error=error)
    return await respond.close_stream(ctx, out, done=tap is not None and tap.done)
