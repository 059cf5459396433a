"""The inference endpoints: one request through the pipeline, stage by stage.

    context   a request id; the process and the state this request is served with
    tenant    API key (or trusted header) → tenant, its salt            pipeline.tenant   → 401
    parse     body size, UTF-8, JSON, the fields the gateway relies on  pipeline.parse    → 4xx
    prepare   the client's API mapped onto chat (Responses: the stored  pipeline.protocols → 400
              conversation expanded; Anthropic Messages)
    pool      the model's pool (or the pool serving the LoRA adapter it names)              → 404
    budgets   the tenant's budgets for the pool's model                 pipeline.budgets  → 429
    billing   cache_control markers → marked prefix; stripped payload;  pipeline.billing  → 400
              the replica holding its live explicit entry (a pin)
    limits    tenant token buckets: requests/s, tokens/min reserved     pipeline.limits   → 429
              (``admitted``)
    cache     bypass / key / lookup / coalescing                        pipeline.cache
    dispatch  route, attempt, retry before the first byte               pipeline.dispatch → 503, 502, 504
    relay     whole (parsed once) or streamed event by event            pipeline.relay
    respond   the end of the answer, after the ledger row               pipeline.respond

Billing, tenant refunds, routing feedback, metrics and the access log run as hooks on the lifecycle's
events (``pipeline.lifecycle``), emitted where they happen. The handler resolves every input of the
request (``pipeline.context``: tenant, parsed request, the front end's exchange, pool and adapter) and
no other module writes one. The request ends with one ``Outcome`` (``respond.conclude``); its status is
what the client saw (499 when it went away, for the access log); the ledger row is decided from what
happened upstream (``pipeline.hooks.billing.row_source``), never from it.

``call`` runs the same stages for a body that did not come over HTTP: a line of an offline batch
(``gateway.batch``), as the tenant that created the batch, under the line's own request id (derived from
the batch and the line, so a line re-run after a crash is still one ledger row). Routing (its planned
replica is a soft pin within the batch's share: ``router.filters.planned``), the response cache,
billing (source ``batch``, at ``billing.batch_price_factor``) and metrics apply as to any request. A
line does not draw on the tenant's token buckets: a batch has its own bounds (its share of each replica,
which shrinks while online queues grow, ``batch.limits``), as OpenAI keeps batch limits apart from the
per-model rate limits; drawing on them would let one large batch starve the tenant's own online traffic
for hours, or turn its lines into 429s that fail them. A line is never streamed (validation refuses
``stream: true``), so its answer is a whole ``web.Response`` the caller reads status and body from.
"""

from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

from gateway.errors import GatewayError
from gateway.fleet.pools import find_pool
from gateway.pipeline import billing, budgets, cache, fairness, limits, respond
from gateway.pipeline.context import RESENT, RequestContext
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.parse import ENDPOINTS, parse_request, validate
from gateway.pipeline.protocols import FRONTENDS
from gateway.pipeline.tenant import Tenant, allows, not_accessible

if TYPE_CHECKING:
    from gateway.pipeline.protocols.base import FrontEnd
    from gateway.pipeline.services import Services
    from router.types import Placement

_NO_HEADERS: Mapping[str, str] = {}

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


async def handle(request: web.Request, process: Services, endpoint: str) -> web.StreamResponse:
    """One request that came over HTTP."""
    ctx = RequestContext(
        process,
        process.state,
        endpoint,
        new_request_id(),
        _FRONTEND_OF[endpoint],
        request.headers,
        request,
        client_request_id=client_request_id(request),
    )
    return await _run(ctx, _read_request(ctx, request))


async def call(
    process: Services,
    endpoint: str,
    body: dict[str, Any],
    *,
    tenant: Tenant,
    request_id: str,
    batch_id: str,
    placement: Placement | None = None,
) -> web.Response:
    """One line of an offline batch, through the same stages (see the module)."""
    ctx = RequestContext(
        process,
        process.state,
        endpoint,
        request_id,
        _FRONTEND_OF[endpoint],
        _NO_HEADERS,
        batch_id=batch_id,
        placement=placement,
        tenant=tenant,
    )
    resp = await _run(ctx, _read_line(ctx, body))
    assert isinstance(resp, web.Response)  # never a stream
    return resp


_FRONTEND_OF: dict[str, FrontEnd] = {name: FRONTENDS[spec.frontend] for name, spec in ENDPOINTS.items()}
"""Each endpoint's front end, resolved once (a lookup a request, not a call)."""


async def _read_request(ctx: RequestContext, request: web.Request) -> None:
    state = ctx.state
    ctx.tenant = state.tenants.resolve(request.headers, request.remote)
    ctx.parsed = await parse_request(request, ctx.endpoint, state.policy.limits)


async def _read_line(ctx: RequestContext, body: dict[str, Any]) -> None:
    ctx.parsed = validate(ctx.endpoint, body, ctx.state.policy.limits)


async def _run(ctx: RequestContext, read: Awaitable[None]) -> web.StreamResponse:
    """``read`` (tenant and parsed body), then the stages; the lifecycle's end events, whatever happens."""
    state, hooks = ctx.state, ctx.process.hooks
    try:
        await read
        assert ctx.parsed is not None
        prepared = await ctx.frontend.prepare(ctx)
        if prepared is not None:  # the client's API mapped onto the request the stages read
            ctx.parsed, ctx.exchange = prepared
        assert ctx.tenant is not None
        if not allows(ctx.tenant, ctx.parsed.model):
            raise not_accessible(ctx.parsed.model)
        ctx.pool, ctx.adapter = find_pool(state.pools, ctx.parsed.model)
        if ctx.pool is None:
            raise not_accessible(ctx.parsed.model)
        await budgets.admit(ctx)
        billing.prepare(ctx)
        await billing.pin(ctx)
        await limits.admit(ctx)
        fairness.classify(ctx)
        if Event.ADMITTED in hooks.live:
            await hooks.emit(Event.ADMITTED, ctx)
        return await cache.serve(ctx)
    except GatewayError as err:
        resp = respond.error(ctx, err)
        await hooks.emit(Event.FAILED, ctx)
        return resp
    except (asyncio.CancelledError, ConnectionResetError) as exc:
        # The client closed the connection (cancelled, or a write to it failed first; a batch line: its
        # run was stopped). A generation it started is still billed (the ``finished`` hook), unless the
        # same request is sent again (``RESENT``).
        respond.conclude(ctx, "resent" if exc.args[:1] == (RESENT,) else "cancelled", 499)
        await hooks.emit(Event.CANCELLED, ctx)
        raise
    except Exception:
        respond.conclude(ctx, "error", 500)  # a stage raised what none expected: aiohttp answers 500
        raise
    finally:
        await hooks.emit(Event.FINISHED, ctx)
