"""Send a request to a replica of its pool: a retry loop around one attempt.

``dispatch`` retries on another replica only while nothing has been sent to the client: connect
errors, timeouts before the first byte, and the policy's retryable statuses, within
``retries.max_attempts`` and ``retries.deadline_s``, with jittered backoff. ``attempt_once`` is one
try on one replica, from the routing decision to the relayed answer; what it holds (the replica's load
in the router, a slot, the in-flight gauge, the upstream response) is released in its one ``finally``.
A client that goes away cancels the handler wherever it waits: that ``finally`` closes the upstream
connection at once (``close`` of the answer, not a release to the pool), so the replica sees the
disconnect and aborts the generation (vLLM and SGLang do), as a cancel while the request waits for
the replica's headers closes it in the client (``gateway.upstream.lean``, or aiohttp for https).

Each try is its own ``Attempt`` in ``ctx.attempts`` (``ctx.decision`` is the last one's).
``Attempt.generation_started`` records what billing needs of it: set once its request is sent,
kept when the replica answers 200, cleared when it answers an error status or the attempt fails before
its first byte (a retry, or the request's error, takes over; the replica never delivered that
generation, so it is never billed).

When every replica is at its slot cap (the router's slot filter), the request waits, bounded, for
one to free (``process.admission``), else 503. With ``fairness.enabled`` it waits in the pool's fair
queue instead (``process.fair_admission``: priority, tenant shares, TTFT objectives).
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import GatewayError
from gateway.fleet.pools import Pool
from gateway.pipeline.context import Attempt, RequestContext
from gateway.pipeline.hooks.routing_feedback import prefill_room
from gateway.pipeline.hooks.trace import propagation
from gateway.pipeline.lifecycle import Event
from gateway.pipeline.parse import ENDPOINTS
from gateway.pipeline.protocols.base import replica_error
from gateway.pipeline.relay import Relay, relay
from gateway.upstream.client import Response, UpstreamFailure
from router.types import Decision, NoReplicaAvailable, OnlineReserve, ReplicasBusy, RouteRequest

if TYPE_CHECKING:
    from router.pool import PoolRouter


class AttemptFailed(Exception):
    """An attempt that failed before anything reached the client: try another replica."""

    def __init__(self, kind: str, error: GatewayError):
        super().__init__(kind)
        self.kind = kind
        self.error = error


# W3C trace context: passed on as the client sent it (the tracing hooks replace it with their span's).
TRACE_HEADERS = ("traceparent", "tracestate")


def _online_reserve(ctx: RequestContext) -> OnlineReserve | None:
    """The replicas a batch running on the request's pool leaves to online traffic (``batch.online_replicas``)."""
    batch = ctx.process.batch
    if batch is None or ctx.placement is not None or ctx.pool is None:
        return None
    return batch.online_reserve(ctx.pool.name)


def _backoff(attempt: int, base: float, cap: float) -> float:
    return random.uniform(0, min(cap, base * (2**attempt)))


async def dispatch(ctx: RequestContext, body: bytes, how: Relay) -> web.StreamResponse:
    """Send ``body`` (``pipeline.upstream_request``) to a replica of the request's pool and relay the answer."""
    assert ctx.parsed is not None and ctx.pool is not None and ctx.tenant is not None
    parsed = ctx.parsed
    retries = ctx.state.policy.retries
    headers = {"Content-Type": "application/json", "X-Request-Id": ctx.request_id}
    for h in TRACE_HEADERS:
        if h in ctx.headers:
            headers[h] = ctx.headers[h]
    if parsed.stream:
        headers["Accept"] = "text/event-stream"
    route_req = RouteRequest(
        parsed.endpoint,
        parsed.model,
        parsed.body,
        ctx.tenant.salt,
        ctx.headers,
        ctx.pinned_replica,
        ctx.placement,
        adapter=ctx.adapter,
        load_adapter=ctx.adapter is not None and _adapter_path(ctx) is not None,
        online_reserve=_online_reserve(ctx),
    )
    deadline = time.monotonic() + retries.deadline_s
    tried: set[str] = set()
    last: GatewayError | None = None
    for attempt in range(retries.max_attempts):
        if attempt and time.monotonic() >= deadline:
            break
        if Event.ROUTING in ctx.process.hooks.live:
            await ctx.process.hooks.emit(Event.ROUTING, ctx)
        try:
            decision = await _route(ctx, route_req, tried)
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
        try:
            return await attempt_once(
                ctx, decision, body, headers, how, last=attempt + 1 == retries.max_attempts
            )
        except AttemptFailed as failed:
            last = failed.error
        await asyncio.sleep(_backoff(attempt, retries.backoff_base_s, retries.backoff_max_s))
    assert last is not None
    raise last


async def _route(ctx: RequestContext, request: RouteRequest, tried: set[str]) -> Decision:
    """The router's decision; while every replica is at its slot cap, wait (bounded) for a slot."""
    assert ctx.pool is not None and ctx.parsed is not None
    router = ctx.pool.router
    if ctx.fair is not None:  # fairness.enabled: the pool's fair queue (gateway.process.fair_admission)
        policy, body = ctx.state.policy, ctx.parsed.body
        max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
        return await ctx.process.fair.route(
            ctx.pool.name,
            router,
            request,
            tried,
            ctx.fair,
            policy.fairness,
            policy.limits,
            max_tokens if isinstance(max_tokens, int) else None,
        )
    try:
        return router.route(request, exclude=tried)
    except ReplicasBusy:
        pass
    async with ctx.process.admission.replica_queue(ctx.pool.name, ctx.state.policy.limits) as queue:
        while True:
            await queue.wait()
            try:
                return router.route(request, exclude=tried)
            except ReplicasBusy:
                continue


async def attempt_once(
    ctx: RequestContext,
    decision: Decision,
    body: bytes,
    headers: dict[str, str],
    how: Relay,
    *,
    last: bool,
) -> web.StreamResponse:
    """One try on ``decision.replica``. Raises ``AttemptFailed`` for a failure that reached nobody."""
    assert ctx.pool is not None and ctx.parsed is not None
    pool, metrics = ctx.pool, ctx.process.metrics
    retries = ctx.state.policy.retries
    rid = decision.replica.id
    ctx.attempts.append(attempt := Attempt(decision))
    await ctx.process.hooks.emit(Event.ROUTED, ctx)
    in_flight = metrics.in_flight
    in_flight.add(rid)
    resp: Response | None = None
    timer = None if ctx.parsed.stream else _prefill_timer(pool, decision, ctx)
    try:
        try:
            if ctx.adapter is not None:
                await _with_adapter(ctx, decision)
            path = ENDPOINTS[ctx.parsed.endpoint].path
            attempt.propagate = propagation(ctx)
            attempt.generation_started = True  # from here on the replica may be generating
            resp = await ctx.state.upstream.send(
                decision.replica, path, body, {**headers, **attempt.propagate}
            )
            attempt.generation_started = resp.status == 200  # an error status is no generation
            if resp.status in retries.on_status and not last:
                raise AttemptFailed(f"status_{resp.status}", await _error_from_status(ctx, decision, resp))
            return await relay(ctx, resp, how)
        except UpstreamFailure as failure:  # nothing reached the client yet
            failed = AttemptFailed(failure.kind, failure.to_gateway_error())
        except AttemptFailed as attempt_failed:
            failed = attempt_failed
        attempt.generation_started = False  # nothing of it reached the client: not billed
        # Unlearn the blocks the replica never prefilled, count it; the loop tries another replica.
        pool.router.forget_failed(decision)
        metrics.child(metrics.upstream_errors, rid, failed.kind).inc()
        attempt.error = failed.kind
        ctx.process.decisions.outcome(ctx.request_id, f"failed: {failed.kind}")
        raise failed
    finally:
        if timer is not None:
            timer.cancel()
        if resp is not None:
            resp.close()
        pool.router.release(decision)  # the prefill too, if neither a first byte nor the timer did
        ctx.process.admission.replica_released(pool.cfg.name)  # a request waiting for a slot may go
        if ctx.fair is not None:  # a waiter of the fair queue may go; the slot's time teaches its model
            held = pool.router.clock() - decision.routed_at
            ctx.process.fair.released(pool.name, held, band=ctx.fair.spec.rank)
        in_flight.add(rid, by=-1)


def _prefill_timer(
    pool: Pool, decision: Decision, ctx: RequestContext | None = None
) -> asyncio.TimerHandle | None:
    """A non-streamed answer says nothing until its end: release its queued prefill when the router
    predicts the replica prefilled it (``router.prefill``), then tell the fair queue (``prefill_room``
    of ``ctx``, when given: a waiter may take that room). Cancelled in ``attempt_once``'s ``finally``,
    whose ``release`` releases it if the timer did not; ``release_prefill`` acts once whoever calls.
    The timer's callback takes its arguments (no closure made per request)."""
    router = pool.router
    if router.cfg.nonstream_prefill_release != "predicted":
        return None
    due = router.prefill_due_s(decision)
    if due is None:
        return None
    return asyncio.get_running_loop().call_later(due, _prefilled, router, decision, ctx)


def _prefilled(router: PoolRouter, decision: Decision, ctx: RequestContext | None) -> None:
    router.release_prefill(decision)
    if ctx is not None:
        prefill_room(ctx)


def _adapter_path(ctx: RequestContext) -> str | None:
    """The path the gateway may load the request's adapter from (``lora.dynamic_loading``), else None."""
    if ctx.adapter is None or ctx.pool is None or not ctx.pool.cfg.lora.dynamic_loading:
        return None
    return next((a.path for a in ctx.pool.cfg.lora.adapters if a.name == ctx.adapter), None)


async def _with_adapter(ctx: RequestContext, decision: Decision) -> None:
    """Load the request's adapter on the chosen replica when it does not serve it yet."""
    adapter, replica = ctx.adapter, decision.replica
    if adapter is None or adapter in replica.adapters:
        return
    path = _adapter_path(ctx)
    assert path is not None and ctx.pool is not None  # else the adapter filter kept only its servers
    lora, metrics = ctx.pool.cfg.lora, ctx.process.metrics
    session = ctx.state.upstream.session
    result = await ctx.process.adapter_loader.ensure(session, replica, adapter, path, lora.load_timeout_s)
    if result != "present":
        metrics.child(metrics.adapter_loads, ctx.pool.name, adapter, result).inc()
    if result == "failed":
        raise AttemptFailed(
            "adapter_load",
            GatewayError(503, f"could not load adapter '{adapter}'", code="adapter_load_failed"),
        )


async def _error_from_status(ctx: RequestContext, decision: Decision, resp: Response) -> GatewayError:
    """A retryable status: what the client gets if no other replica does better."""
    try:
        data, _ = await ctx.state.upstream.read_answer(decision.replica, resp)
    except UpstreamFailure:
        data = b""
    return replica_error(resp.status, data)
