"""The OpenAI endpoints: authenticate, validate, route and proxy, then log and count."""

from __future__ import annotations

import asyncio
import itertools
import os
import time

import orjson
from aiohttp import web

from cache.billing.pricing import LineItem, billing_headers, usage_extension
from cache.buckets import Reservation, TakeResult
from gateway.errors import GatewayError, error_response
from gateway.observability.logs import log_access
from gateway.pipeline import billing as metering
from gateway.pipeline import cache as response_cache
from gateway.pipeline.context import Call, Outcome
from gateway.pipeline.parse import ParsedRequest, parse_request
from gateway.pipeline.tenant import Tenant
from gateway.process.state import GatewayState, current_state

_MAX_REQUEST_ID = 128
_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(1)


def request_id_of(request: web.Request) -> str:
    """The client's ``x-request-id`` when it is a sane token, else a fresh one."""
    given = request.headers.get("x-request-id")
    if given and len(given) <= _MAX_REQUEST_ID and given.isascii() and given.isprintable():
        return given
    return f"{_ID_PREFIX}{next(_id_counter):012x}"


async def _inference(request: web.Request, endpoint: str) -> web.StreamResponse:
    state: GatewayState = current_state(request.app)
    outcome = Outcome(request_id=request_id_of(request))
    model = "-"
    tenant_label = "-"
    resp: web.StreamResponse | None = None
    try:
        tenant = state.tenants.resolve(request.headers, request.remote)
        tenant_label = tenant.metric_label
        parsed = await parse_request(request, endpoint, state.policy.limits)
        pool = state.pools.get(parsed.model)
        if pool is None:
            raise GatewayError(
                404, f"The model '{parsed.model}' does not exist", param="model", code="model_not_found"
            )
        model = pool.name
        billing = metering.prepare(state.metering, pool, parsed, tenant)
        if state.metering is not None:
            m = state.metering
            outcome.settle = lambda: metering.settle(m, billing, pool, tenant, outcome)
            outcome.pinned_replica = await metering.pinned_replica(m, billing, pool, tenant)
        reservation = await admit_tenant(state, tenant, parsed, outcome)
        try:
            resp = await response_cache.serve(
                Call(request, state, pool, parsed, tenant, outcome), billing.payload
            )
            if outcome.settle is not None and not billing.settled:
                await outcome.settle()  # a whole (non-stream) answer: its row is written before it is sent
            if billing.item is not None and isinstance(resp, web.Response):
                add_billing(resp, billing.item, state)
        finally:
            if reservation is not None:
                await settle_tenant(state, reservation, outcome)
            if outcome.settle is not None and not billing.settled and state.metering is not None:
                metering.settle_in_background(state.metering, outcome.settle())
        return resp
    except GatewayError as err:
        err.headers.setdefault("x-request-id", outcome.request_id)
        outcome.status = err.status
        resp = error_response(err)
        return resp
    except asyncio.CancelledError:
        outcome.status = 499  # client closed the connection
        raise
    finally:
        elapsed = time.perf_counter() - outcome.started
        if not outcome.status and resp is not None:
            outcome.status = resp.status
        _observe(state, model, tenant_label, endpoint, outcome, elapsed)


def add_billing(resp: web.Response, item: LineItem, state: GatewayState) -> None:
    """The line item as ``x-gateway-billing-*`` headers and/or a ``usage.billing`` body extension."""
    cfg = state.policy.billing.response
    if cfg.headers:
        resp.headers.update(billing_headers(item, cfg.header_prefix))
    if cfg.usage_extension and resp.status == 200 and resp.body:
        try:
            body = orjson.loads(resp.body)  # type: ignore[arg-type]
        except orjson.JSONDecodeError:
            return
        if isinstance(body, dict) and isinstance(body.get("usage"), dict):
            body["usage"]["billing"] = usage_extension(item)
            resp.body = orjson.dumps(body)


async def admit_tenant(
    state: GatewayState, tenant: Tenant, parsed: ParsedRequest, outcome: Outcome
) -> Reservation | None:
    """Per-tenant token buckets: requests/s, then prompt + max_tokens reserved from tokens/min."""
    if state.cache is None:
        return None
    limiter = state.cache.limiter
    took = await limiter.check_request(tenant.id)
    if not took.allowed:
        state.metrics.ratelimited.labels(tenant.metric_label, "requests").inc()
        raise _rate_limited(took, "requests per second", limiter.request_burst or 0, outcome)
    estimate = parsed.prompt_chars // 4 + int(
        parsed.body.get("max_tokens") or parsed.body.get("max_completion_tokens") or 16
    )
    took, reservation = await limiter.reserve_tokens(tenant.id, estimate)
    if not took.allowed:
        state.metrics.ratelimited.labels(tenant.metric_label, "tokens").inc()
        raise _rate_limited(took, "tokens per minute", limiter.tokens_per_min or 0, outcome)
    return reservation


def _rate_limited(took: TakeResult, what: str, limit: float, outcome: Outcome) -> GatewayError:
    retry = 60 if took.retry_after_s == float("inf") else max(1, int(took.retry_after_s + 0.999))
    return GatewayError(
        429,
        f"Rate limit reached for {what} (limit {limit:g}); retry after {retry}s",
        code="rate_limit_exceeded",
        headers={
            "Retry-After": str(retry),
            "x-ratelimit-limit": f"{limit:g}",
            "x-ratelimit-remaining": f"{max(0.0, took.remaining):.0f}",
            "x-ratelimit-reset": f"{retry}s",
        },
    )


async def settle_tenant(state: GatewayState, reservation: Reservation, outcome: Outcome) -> None:
    """Refund what the reservation did not use (all of it when nothing was generated)."""
    assert state.cache is not None
    used = 0
    if outcome.usage and outcome.source == "upstream":
        used = int(outcome.usage.get("total_tokens") or 0)
    await state.cache.limiter.settle(reservation, used)


def _observe(
    state: GatewayState, model: str, tenant: str, endpoint: str, outcome: Outcome, elapsed: float
) -> None:
    metrics = state.metrics
    metrics.count_request(model, outcome.replica, outcome.status)
    if outcome.cache:
        metrics.cache_requests.labels(outcome.cache).inc()
    if model != "-":
        metrics.duration.labels(model).observe(elapsed)
        ttfb = outcome.first_byte_s if outcome.first_byte_s is not None else elapsed
        metrics.ttfb.labels(model).observe(ttfb)
    if state.policy.server.access_log:
        log_access(
            {
                "request_id": outcome.request_id,
                "tenant": tenant,
                "model": model,
                "endpoint": endpoint,
                "status": outcome.status,
                "replica": outcome.replica,
                "attempts": outcome.attempts,
                "route_reason": outcome.route_reason,
                "prompt_tokens_est": outcome.prompt_tokens,
                "matched_tokens_est": outcome.matched_tokens,
                "upstream_error": outcome.upstream_error,
                "cache": outcome.cache,
                "source": outcome.source,
                "ttfb_ms": round(outcome.first_byte_s * 1000, 2)
                if outcome.first_byte_s is not None
                else None,
                "duration_ms": round(elapsed * 1000, 2),
            }
        )


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _inference(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    return await _inference(request, "completions")


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _inference(request, "embeddings")


async def list_models(request: web.Request) -> web.Response:
    state: GatewayState = current_state(request.app)
    try:
        state.tenants.resolve(request.headers, request.remote)
    except GatewayError as err:
        return error_response(err)
    created = int(time.time())
    data = [
        {"id": name, "object": "model", "created": created, "owned_by": "prefix-gateway"}
        for name in state.pools
    ]
    return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")
