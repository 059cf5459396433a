"""The inference endpoints: one request through the pipeline, stage by stage.

    context   a request id; the process and the state this request is served with
    tenant    API key (or trusted header) → tenant, its salt            pipeline.tenant   → 401
    parse     body size, UTF-8, JSON, the fields the gateway relies on  pipeline.parse    → 4xx
    prepare   the client's API mapped onto chat (Responses: the stored  pipeline.protocols → 400
              conversation expanded; Anthropic Messages)
    pool      the model's pool (or the pool serving the LoRA adapter it names)              → 404
    billing   cache_control markers → marked prefix; stripped payload;  pipeline.billing  → 400
              the replica holding its live explicit entry (a pin)
    limits    tenant token buckets: requests/s, tokens/min reserved     pipeline.limits   → 429
              (``admitted``)
    cache     bypass / key / lookup / coalescing                        pipeline.cache
    dispatch  route, attempt, retry before the first byte               pipeline.dispatch → 503, 502, 504
    relay     whole (parsed once) or streamed event by event            pipeline.relay
    respond   the end of the answer, after the ledger row               pipeline.respond

Billing, tenant refunds, routing feedback, metrics and the access log run as hooks on the lifecycle's
events (``pipeline.lifecycle``), emitted where they happen.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import GatewayError
from gateway.fleet.pools import find_pool
from gateway.pipeline import billing, cache, limits, respond
from gateway.pipeline.context import RequestContext
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.parse import ENDPOINTS, parse_request
from gateway.pipeline.protocols import FRONTENDS

if TYPE_CHECKING:
    from gateway.process.process import Process

_MAX_REQUEST_ID = 128
_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(1)


def new_request_id() -> str:
    """The gateway's own id of one generation: unique per process (random prefix) and request."""
    return f"{_ID_PREFIX}{next(_id_counter):012x}"


def client_request_id(request: web.Request) -> str | None:
    """The client's ``x-request-id`` when it is a sane token (kept and echoed, never a key)."""
    given = request.headers.get("x-request-id")
    if given and len(given) <= _MAX_REQUEST_ID and given.isascii() and given.isprintable():
        return given
    return None


async def handle(request: web.Request, process: Process, endpoint: str) -> web.StreamResponse:
    state = process.state
    frontend = FRONTENDS[ENDPOINTS[endpoint].frontend]
    ctx = RequestContext(
        request,
        process,
        state,
        endpoint,
        new_request_id(),
        frontend,
        client_request_id=client_request_id(request),
    )
    hooks = process.hooks
    try:
        ctx.tenant = state.tenants.resolve(request.headers, request.remote)
        ctx.parsed = await parse_request(request, endpoint, state.policy.limits)
        await frontend.prepare(ctx)
        ctx.pool, ctx.adapter = find_pool(state.pools, ctx.parsed.model)
        if ctx.pool is None:
            raise GatewayError(
                404, f"The model '{ctx.parsed.model}' does not exist", param="model", code="model_not_found"
            )
        billing.prepare(ctx)
        await billing.pin(ctx)
        await limits.admit(ctx)
        await hooks.emit(Event.ADMITTED, ctx)
        return await cache.serve(ctx)
    except GatewayError as err:
        resp = respond.error(ctx, err)
        await hooks.emit(Event.FAILED, ctx)
        return resp
    except asyncio.CancelledError:
        ctx.status = 499  # client closed the connection
        await hooks.emit(Event.CANCELLED, ctx)
        raise
    finally:
        await hooks.emit(Event.FINISHED, ctx)
