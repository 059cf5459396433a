"""The one module that writes the end of an answer, so that ``completed`` (billing: the ledger row)
always happens before the client can see that end.

- ``whole``: a JSON answer sent at once (relayed, from the cache, or a fallback). Parsed at most once
  upstream of here; serialised again only when something changes it (unmasking, the client's API when
  it is not the replica's, the billing usage extension). The billing line item goes out as
  ``x-gateway-billing-*`` headers.
- ``open_stream`` / ``close_stream``: an SSE answer in the client's API (the front end's encoder).
  ``close_stream`` emits ``completed``, then writes the encoder's end (``[DONE]``, or for a stream
  that failed part-way an error event; a Responses or Messages stream's final events with its usage)
  and ends it.
- ``error``: an answer in the client's API's error format; ``failed`` is emitted by the handler.

``conclude`` is the one place the request's ``Outcome`` is made: each of the three ends above calls it
before its event is emitted (the hooks read the outcome), and the handler calls it when the client
went away (``cancelled``, or ``resent``) or a stage raised what none expected (500, what aiohttp
answers then). The answer it records is the one passed (a whole answer, parsed; a served stream's), else
the last attempt's (a relayed stream's, assembled by its tap).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from aiohttp import web

from cache.billing.pricing import billing_headers, usage_extension
from gateway.errors import GatewayError
from gateway.pipeline.context import Ended, Outcome, RequestContext
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.protocols.base import Encoder, replica_error

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def whole(
    ctx: RequestContext,
    status: int,
    data: bytes,
    headers: dict[str, str],
    parsed: dict[str, Any] | None = None,
    rewrite: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> web.Response:
    """Send a whole answer: ``data`` as it came, unless ``parsed`` (the same answer, parsed) must be
    rewritten, mapped to the client's API or carry the billing extension."""
    ctx.first_byte_s = time.perf_counter() - ctx.started
    conclude(ctx, "answered" if status == 200 else "error", status, parsed)
    await ctx.process.hooks.emit(Event.COMPLETED if status == 200 else Event.FAILED, ctx)
    item = ctx.line_item
    cfg = ctx.state.policy.billing.response
    frontend = ctx.frontend
    if parsed is not None and status == 200:
        extend = item is not None and cfg.usage_extension and isinstance(parsed.get("usage"), (dict, Mapping))
        if rewrite is not None or extend or not frontend.passthrough:
            body = rewrite(parsed) if rewrite is not None else parsed
            if not frontend.passthrough:
                body = await frontend.answer(ctx, body)
            if extend and isinstance(body.get("usage"), (dict, Mapping)):
                body = {**body, "usage": {**body["usage"], "billing": usage_extension(item)}}  # type: ignore[arg-type]
            data = orjson.dumps(body)
    elif status != 200:  # a replica's error, in the client's API's shape (OpenAI's for OpenAI's)
        data = frontend.error(replica_error(status, data)).body  # type: ignore[assignment]
        headers["Content-Type"] = "application/json"
    if item is not None and cfg.headers:
        headers.update(billing_headers(item, cfg.header_prefix))
    headers.setdefault("Content-Type", "application/json")
    return web.Response(status=status, body=data, headers=headers)


async def open_stream(ctx: RequestContext, headers: Mapping[str, str]) -> web.StreamResponse:
    assert ctx.request is not None, "only a request that came over HTTP streams"  # batch lines never do
    out = web.StreamResponse(status=200, headers={**headers, **SSE_HEADERS})
    await out.prepare(ctx.request)
    ctx.first_byte_s = time.perf_counter() - ctx.started
    head = encoder_of(ctx).start()
    if head:
        await out.write(head)
    return out


def encoder_of(ctx: RequestContext) -> Encoder:
    """The request's stream encoder (the front end's), made once."""
    if ctx.encoder is None:
        ctx.encoder = ctx.frontend.encoder(ctx)
    return ctx.encoder


async def close_stream(
    ctx: RequestContext,
    out: web.StreamResponse,
    *,
    done: bool,
    error: str | None = None,
    answer: dict[str, Any] | None = None,
) -> web.StreamResponse:
    """End a stream: the encoder's end (``[DONE]`` when it ended normally, the error event when it
    failed part-way (``error`` set), nothing more when the replica sent no end). The ledger row comes
    first. ``answer``: a served stream's (the cache's, the leader's); a relayed one's is its attempt's."""
    conclude(ctx, "answered" if error is None else "error", 200, answer)
    await ctx.process.hooks.emit(Event.COMPLETED, ctx)
    tail = await encoder_of(ctx).end(ctx, done=done, error=error)
    await out.write_eof(tail or b"")  # the end and the last chunk of the body in one write
    return out


def error(ctx: RequestContext, err: GatewayError) -> web.Response:
    conclude(ctx, "error", err.status)
    for name, value in ctx.answer_headers().items():
        err.headers.setdefault(name, value)
    return ctx.frontend.error(err)


def conclude(ctx: RequestContext, ended: Ended, status: int, answer: dict[str, Any] | None = None) -> None:
    """The request's outcome (see the module): the only place an ``Outcome`` is made."""
    if answer is not None:
        usage = answer.get("usage")
        usage = usage if isinstance(usage, dict) else None
    elif ctx.outcome is not None:  # the client went away while its answer's end was written: that end's
        usage, answer = ctx.outcome.usage, ctx.outcome.response
    else:
        attempt = ctx.attempt
        usage, answer = (attempt.usage, attempt.response) if attempt is not None else (None, None)
    ctx.outcome = Outcome(ended, status, ctx.served, usage, answer)
