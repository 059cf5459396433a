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

What the replica answered is the attempt's (``Attempt``: a stream's usage, event count and assembled
answer, kept when the client goes away mid-stream; a whole answer goes to ``respond.whole``, which
makes the request's outcome of it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from cache.entry import aborted
from gateway.pipeline import respond
from gateway.pipeline.context import Attempt, RequestContext
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.stream_tap import StreamTap
from gateway.upstream.client import HOP_BY_HOP, Response, UpstreamFailure

log = logging.getLogger("prefix_gateway")


def _count_abort(ctx: RequestContext, attempt: Attempt) -> None:
    attempt.error = "aborted"
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


# Header names a replica sent, as it spelled them, by whether they are relayed: a replica sends the same
# few names every time, so a name is lowered and looked up once, not once an answer (4 of the 5 calls
# of the relayed headers a request, ``python -m bench.profile --calls``). Bounded: past ``_NAMES_KEPT``
# names each, a new one is decided without being remembered.
_RELAYED: set[str] = set()
_DROPPED: set[str] = set()
_NAMES_KEPT = 1024


def _relayed(name: str) -> bool:
    keep = name.lower() not in HOP_BY_HOP
    seen = _RELAYED if keep else _DROPPED
    if len(seen) < _NAMES_KEPT:
        seen.add(name)
    return keep


def relayed_headers(resp: Response, ctx: RequestContext) -> dict[str, str]:
    headers = {k: v for k, v in resp.headers.items() if k in _RELAYED or (k not in _DROPPED and _relayed(k))}
    decision = ctx.attempts[-1].decision  # an answer came: its attempt is there (one call less)
    headers["x-gateway-replica"] = decision.replica.id
    headers.update(ctx.answer_headers())
    if decision.prompt_tokens:
        headers["x-gateway-prefix-match"] = f"{decision.matched_tokens}/{decision.prompt_tokens}"
    return headers


async def relay(ctx: RequestContext, resp: Response, how: Relay) -> web.StreamResponse:
    assert ctx.parsed is not None
    if ctx.parsed.stream and resp.status == 200:
        return await _stream(ctx, resp, how.tap)
    return await _whole(ctx, resp, how.rewrite_whole)


async def _whole(
    ctx: RequestContext,
    resp: Response,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None,
) -> web.Response:
    attempt = ctx.attempt
    assert attempt is not None
    data, parsed = await ctx.state.upstream.read_answer(attempt.decision.replica, resp)
    await ctx.process.hooks.emit(Event.FIRST_BYTE, ctx)
    headers = relayed_headers(resp, ctx)
    if parsed is not None and aborted(parsed):
        _count_abort(ctx, attempt)
    return await respond.whole(ctx, resp.status, data, headers, parsed, rewrite)  # the outcome's answer


async def _stream(ctx: RequestContext, resp: Response, tap: StreamTap | None) -> web.StreamResponse:
    attempt = ctx.attempt
    assert attempt is not None
    chunks = ctx.state.upstream.stream(attempt.decision.replica, resp)
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
            attempt.usage = tap.usage
            attempt.chunks = tap.events
    if tap is not None:
        attempt.response = tap.result()
        if tap.aborted:
            _count_abort(ctx, attempt)
    if failed is not None:
        attempt.error = f"midstream_{failed.kind}"
        metrics = ctx.process.metrics
        metrics.child(metrics.upstream_errors, ctx.replica_id, attempt.error).inc()
        error = f"the replica's stream broke off before its end: {failed}"
        return await respond.close_stream(ctx, out, done=False, error=error)
    return await respond.close_stream(ctx, out, done=tap is not None and tap.done)
