"""Proxy one validated request to a replica and relay the answer, streamed or whole.

The attempt loop retries on another replica only while nothing has been sent to the client: connect
errors, timeouts before the first byte, and the policy's retryable statuses. Once the first byte of a
stream has been written, a failure ends the client's stream with an SSE error event in OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from gateway.errors import GatewayError, error_body
from gateway.fleet.pools import Pool
from gateway.pipeline.context import Call, Outcome
from gateway.pipeline.parse import ENDPOINT_PATHS
from gateway.pipeline.stream_tap import StreamTap
from gateway.pipeline.tenant import Tenant
from gateway.process.admission import replica_released, route_with_slots
from gateway.process.state import GatewayState
from gateway.upstream.client import HOP_BY_HOP, UpstreamFailure
from router.pool import PoolRouter
from router.types import Decision, NoReplicaAvailable, RouteRequest

log = logging.getLogger("prefix_gateway")

SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(slots=True)
class Relay:
    """How to treat the answer on its way back: what to watch in a stream, how to rewrite a whole body."""

    tap: StreamTap | None = None
    rewrite_whole: Callable[[dict[str, Any]], dict[str, Any]] | None = None
    parse_whole: bool = True


def upstream_body(payload: dict[str, Any], pool: Pool, tenant: Tenant) -> bytes:
    """The body sent to the replica: the client's fields in the client's order (so the replica's own
    prefix cache sees the same prompt), the served model name, and the tenant's ``cache_salt``."""
    body = dict(payload)
    body.pop("cache", None)  # LiteLLM's cache-control object is for the gateway, not the replica
    if pool.cfg.served_model_name:
        body["model"] = pool.cfg.served_model_name
    if pool.sends_cache_salt:
        body["cache_salt"] = tenant.salt
    else:
        body.pop("cache_salt", None)
    return orjson.dumps(body)


def _relay_headers(resp: aiohttp.ClientResponse, outcome: Outcome, decision: Decision) -> dict[str, str]:
    headers = {k: v for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP}
    headers["x-gateway-replica"] = decision.replica.id
    headers["x-request-id"] = outcome.request_id
    headers.update(outcome.extra_headers)
    if decision.prompt_tokens:
        headers["x-gateway-prefix-match"] = f"{decision.matched_tokens}/{decision.prompt_tokens}"
    return headers


class _Retry(Exception):
    """An attempt that failed before anything reached the client: try another replica."""

    def __init__(self, kind: str, error: GatewayError):
        super().__init__(kind)
        self.kind = kind
        self.error = error


def _backoff(attempt: int, base: float, cap: float) -> float:
    return random.uniform(0, min(cap, base * (2**attempt)))


async def proxy(
    call: Call, payload: dict[str, Any] | None = None, relay: Relay | None = None
) -> web.StreamResponse:
    """Send ``payload`` (default: the client's body) to a replica of the call's pool and relay the answer."""
    request, state, pool, parsed, tenant, outcome = (
        call.request,
        call.state,
        call.pool,
        call.parsed,
        call.tenant,
        call.outcome,
    )
    retries = state.policy.retries
    relay = relay or Relay()
    body = upstream_body(parsed.body if payload is None else payload, pool, tenant)
    headers = {"Content-Type": "application/json", "X-Request-Id": outcome.request_id}
    if parsed.stream:
        headers["Accept"] = "text/event-stream"
    path = ENDPOINT_PATHS[parsed.endpoint]
    route_req = RouteRequest(
        parsed.endpoint, parsed.model, parsed.body, tenant.salt, request.headers, outcome.pinned_replica
    )
    router = pool.router
    deadline = time.monotonic() + retries.deadline_s
    tried: set[str] = set()
    last_failure: GatewayError | None = None

    for attempt in range(retries.max_attempts):
        if attempt and time.monotonic() >= deadline:
            break
        try:
            decision = await route_with_slots(state, router, route_req, tried)  # per-replica limit
        except NoReplicaAvailable:
            if not tried:
                raise GatewayError(
                    503,
                    f"no healthy replica for model '{parsed.model}'",
                    code="no_replica_available",
                    headers={"Retry-After": "1"},
                ) from None
            break
        tried.add(decision.replica.id)
        outcome.attempts += 1
        outcome.replica = decision.replica.id
        outcome.route_reason = decision.reason
        outcome.prompt_tokens = decision.prompt_tokens
        outcome.matched_tokens = decision.matched_tokens
        state.metrics.count_decision(
            pool.name, decision.policy, decision.reason, decision.matched_tokens, decision.prompt_tokens
        )
        state.metrics.in_flight.labels(decision.replica.id).inc()
        try:
            resp: aiohttp.ClientResponse | None = None
            try:
                resp = await state.upstream.open(decision.replica.url + path, body, headers)
                if resp.status in retries.on_status and attempt + 1 < retries.max_attempts:
                    raise _Retry(f"status_{resp.status}", await _error_from_status(resp, state))
                if parsed.stream and resp.status == 200:
                    answer = await _relay_stream(request, state, router, resp, decision, outcome, relay)
                else:
                    answer = await _relay_whole(state, router, resp, decision, outcome, relay)
                _observe_usage(state, router, decision, outcome.usage)
                return answer
            except UpstreamFailure as failure:  # nothing reached the client yet
                failed = _Retry(failure.kind, failure.to_gateway_error())
            except _Retry as retry:
                failed = retry
            finally:
                if resp is not None:
                    resp.close()
            # Count it, unlearn the blocks the replica never prefilled, and try another replica.
            router.forget_failed(decision)
            state.metrics.upstream_errors.labels(decision.replica.id, failed.kind).inc()
            last_failure = failed.error
            outcome.upstream_error = failed.kind
            await asyncio.sleep(_backoff(attempt, retries.backoff_base_s, retries.backoff_max_s))
        finally:
            router.release(decision)
            replica_released(router)  # a request waiting for a replica slot may go
            state.metrics.in_flight.labels(decision.replica.id).dec()

    assert last_failure is not None
    raise last_failure


def _observe_usage(state: GatewayState, router: PoolRouter, decision: Decision, usage: Any) -> None:
    """Compare what the index predicted with what the replica says it had cached."""
    if not isinstance(usage, dict) or not decision.block_hashes:
        return
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    if not isinstance(cached, int):
        return
    router.observe_usage(decision, cached)
    state.metrics.predicted_tokens.labels(decision.replica.id).inc(decision.matched_tokens)
    state.metrics.reported_cached_tokens.labels(decision.replica.id).inc(max(0, cached))


async def _error_from_status(resp: aiohttp.ClientResponse, state: GatewayState) -> GatewayError:
    try:
        data = await state.upstream.read_all(resp)
        err = orjson.loads(data).get("error") or {}
        message = err.get("message") or f"upstream answered {resp.status}"
    except (UpstreamFailure, orjson.JSONDecodeError, AttributeError):
        message = f"upstream answered {resp.status}"
    return GatewayError(resp.status, str(message), code=f"upstream_status_{resp.status}")


async def _relay_whole(
    state: GatewayState,
    router: PoolRouter,
    resp: aiohttp.ClientResponse,
    decision: Decision,
    outcome: Outcome,
    relay: Relay,
) -> web.Response:
    data = await state.upstream.read_all(resp)
    router.release_prefill(decision)
    outcome.status = resp.status
    outcome.first_byte_s = time.perf_counter() - outcome.started  # a whole answer goes out at once
    headers = _relay_headers(resp, outcome, decision)
    if resp.status == 200 and relay.parse_whole and data[:1] == b"{":
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            outcome.response = parsed
            usage = parsed.get("usage")
            outcome.usage = usage if isinstance(usage, dict) else None
            if relay.rewrite_whole is not None:
                data = orjson.dumps(relay.rewrite_whole(parsed))
    return web.Response(status=resp.status, body=data, headers=headers)


async def _relay_stream(
    request: web.Request,
    state: GatewayState,
    router: PoolRouter,
    resp: aiohttp.ClientResponse,
    decision: Decision,
    outcome: Outcome,
    relay: Relay,
) -> web.StreamResponse:
    tap = relay.tap
    chunks = state.upstream.iter_chunks(resp)
    # Read the first chunk before answering: until then a failure can still be retried elsewhere.
    first = await anext(chunks, b"")
    router.release_prefill(decision)
    headers = _relay_headers(resp, outcome, decision)
    headers.update(SSE_HEADERS)
    out = web.StreamResponse(status=200, headers=headers)
    await out.prepare(request)
    outcome.status = 200
    outcome.first_byte_s = time.perf_counter() - outcome.started
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
    if tap is not None:
        outcome.usage = tap.usage
        outcome.response = tap.result()
        outcome.generated_chunks = tap.events
    if outcome.settle is not None:
        await outcome.settle()  # the ledger row is written before the client sees the end
    if failed is not None:
        # Too late to retry: tell the client in OpenAI's shape, then end the stream.
        state.metrics.upstream_errors.labels(decision.replica.id, f"midstream_{failed.kind}").inc()
        outcome.upstream_error = f"midstream_{failed.kind}"
        event = error_body(
            f"upstream stream failed: {failed}", "upstream_error", None, "upstream_stream_error"
        )
        await out.write(b"data: " + orjson.dumps(event) + b"\n\n")
    elif tap is not None and tap.done:
        await out.write(b"data: [DONE]\n\n")
    await out.write_eof()
    return out
