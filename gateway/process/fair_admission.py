"""The gateway's queue while a pool is saturated (``fairness.enabled``): one fair queue per pool.

A request of an enabled pool goes to a replica at once while a replica has a slot free and nobody
waits; otherwise it waits here, in the pool's ``router.fairness.queue.FairQueue`` (priority band,
then start-time fair order by predicted work between tenants). A slot freeing (an attempt's end:
``released``), a request arriving, a request's queued prefill released under
``max_queued_prefill_tokens`` (its first byte: ``released(why="prefill")``, which the tick alone saw
up to 50 ms late), and a tick while anyone waits (reports and health change without a release) each
release waiters while a replica has room: the releaser routes the waiter itself
(``PoolRouter.route``, prefix affinity among the replicas with room), so the slot is counted before
anyone else can take it, and hands it the decision. Among the first ``fairness.lookahead`` waiters
it prefers one whose longest prefix match is on a replica with room: a released request lands where
its prefix lives; below the highest class, a waiter whose home (the replica of its longest match) is full waits for
it, at arrival too, while the prefill it saves there outweighs the wait (``router.fairness.release``).

At arrival, a request with a TTFT objective is predicted (``router.fairness.ttft``: its wait for a
slot, from the requests the queue would release before it, then the best replica's queued prefill)
and answered at once with 429 and ``Retry-After`` when the prediction exceeds the objective
(``on_objective_miss: reject``), never queued to fail later. A tenant past its queue cap gets 429, a
full queue 503 unless the request preempts a lower band's newest waiter (which gets the 503), and a
request that waited ``fairness.queue_timeout_s`` 503. Every answer is OpenAI's error shape. How
each request went through (seconds waited, the event that released it) is kept in the ticket for the
decision log (``/admin/routing/explain``'s ``fair_queue``).

One process's view: slots count this process's requests, like the slot filter; with ``--workers N``
each worker queues its own (replicas' reported KV usage and engine queue carry the others' load).
"""

from __future__ import annotations

import asyncio
from collections.abc import Container, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from config.fairness import FairnessConfig
from config.policy import LimitsConfig
from gateway.errors import GatewayError
from gateway.observability.metrics import GatewayMetrics
from router.fairness.headroom import DERIVE_EVERY_S, AutoHeadroom, ClassLoad, TopConcurrency, derived_slots
from router.fairness.queue import FairQueue, QueueFull, Waiter
from router.fairness.release import could_take, not_to, queues_for_home, release, with_room
from router.fairness.saturation import SaturationLimits, full_for, pool_saturation
from router.fairness.ttft import ServiceTime, predict_on_pool, retry_after_s
from router.fairness.work import predicted_work
from router.types import Decision, NoReplicaAvailable, ReplicasBusy, RouteRequest

if TYPE_CHECKING:
    from gateway.pipeline.fairness import Ticket
    from router.pool import PoolRouter

TICK_S = 0.05  # while anyone waits: reports, health and aging change without a release


def saturation_limits(cfg: FairnessConfig, limits: LimitsConfig, derived: int = 0) -> SaturationLimits:
    """The pool's limits; ``derived``: the headroom derived for the highest class (``auto_headroom``),
    kept inside the slots as reserved slots are (``router.fairness.headroom``)."""
    return SaturationLimits(
        slots=cfg.slots_per_replica or limits.max_concurrent_per_replica,
        kv_usage=cfg.kv_usage_full,
        max_waiting=cfg.max_engine_waiting,
        reserved=cfg.reserved_slots or derived,
        headroom=cfg.headroom_slots,
        max_prefill_tokens=cfg.max_queued_prefill_tokens,
    )


def auto_headroom(cfg: FairnessConfig, limits: LimitsConfig) -> AutoHeadroom | None:
    """The derivation's settings, or None: off, or an explicit ``headroom_slots`` / ``reserved_slots``."""
    if not cfg.auto_headroom or cfg.headroom_slots or cfg.reserved_slots:
        return None
    slots = cfg.slots_per_replica or limits.max_concurrent_per_replica
    most = cfg.auto_headroom_max_slots if cfg.auto_headroom_max_slots is not None else slots // 2
    return AutoHeadroom(
        most,
        cfg.auto_headroom_min_slots,
        cfg.auto_headroom_quantile,
        cfg.auto_headroom_window_s,
        cfg.auto_headroom_model,
    )


@dataclass(slots=True, eq=False)
class _Entry:
    request: RouteRequest
    exclude: Container[str]
    home: str | None  # the replica holding the longest match of its prompt
    ticket: Ticket
    future: asyncio.Future[Decision]
    gauge_labels: tuple[str, str, str]
    matched: Mapping[str, int]  # prefix tokens each replica holds, at arrival
    left: bool = False
    released_by: str = ""  # the event whose pump released it (``_pump``'s ``why``)

    @property
    def gone(self) -> bool:
        return self.future.done()


class _PoolQueue:
    __slots__ = (
        "bands",
        "cfg",
        "derived",
        "derived_at",
        "high",
        "limits",
        "load",
        "queue",
        "router",
        "service",
        "ticking",
        "top",
    )

    def __init__(self, bands: int, cfg: FairnessConfig, limits: LimitsConfig, router: PoolRouter):
        self.bands = bands
        self.queue = FairQueue(bands, cfg.max_queued)
        self.service = ServiceTime(cfg.service_s)
        self.cfg, self.limits, self.router = cfg, limits, router
        self.ticking = False
        self.top = TopConcurrency(
            cfg.auto_headroom_window_s, router.clock()
        )  # the highest class's, arrival to end
        self.derived, self.derived_at, self.high = 0, float("-inf"), 0.0
        self.load = ClassLoad(0.0, 0.0, 0.0, 0)  # the highest class's, at the last derivation

    def sat_limits(self) -> SaturationLimits:
        """The limits now: with ``auto_headroom``, the headroom derived from the highest class's recent
        concurrency (recomputed at most every ``DERIVE_EVERY_S``)."""
        auto = auto_headroom(self.cfg, self.limits)
        if auto is None:
            return saturation_limits(self.cfg, self.limits)
        now = self.router.clock()
        if now - self.derived_at >= DERIVE_EVERY_S:
            self.top.window_s = auto.window_s
            bound = auto.max_slots * len(self.router.replicas)  # a cold start's
            self.high, self.derived_at = self.top.needed(now, auto, bound), now
            self.load = self.top.load(now)
        healthy = sum(1 for r in self.router.replicas if r.healthy)
        slots = self.cfg.slots_per_replica or self.limits.max_concurrent_per_replica
        self.derived = derived_slots(self.high, self.top.count, healthy, slots, auto)
        return saturation_limits(self.cfg, self.limits, self.derived)


def _shed(status: int, message: str, code: str, retry_after: int) -> GatewayError:
    return GatewayError(status, message, code=code, headers={"Retry-After": str(retry_after)})


class FairAdmission:
    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics
        self._pools: dict[str, _PoolQueue] = {}

    def _pool(self, name: str, cfg: FairnessConfig, limits: LimitsConfig, router: PoolRouter) -> _PoolQueue:
        """The pool's queue, with a reload's settings and router: waiters keep their places (their
        requests route on whichever router is current); a new class list waits for an empty queue."""
        bands = len(cfg.classes) + 1
        pq = self._pools.get(name)
        if pq is None or (pq.bands != bands and not len(pq.queue)):
            pq = self._pools[name] = _PoolQueue(bands, cfg, limits, router)
        elif pq.bands == bands:
            pq.cfg = cfg
            pq.queue.max_queued = cfg.max_queued
        pq.limits, pq.router = limits, router
        return pq

    def depth(self, pool: str) -> int:
        pq = self._pools.get(pool)
        return len(pq.queue) if pq is not None else 0

    # -- a request --------------------------------------------------------------------------------------
    async def route(
        self,
        pool: str,
        router: PoolRouter,
        request: RouteRequest,
        tried: Container[str],
        ticket: Ticket,
        cfg: FairnessConfig,
        limits: LimitsConfig,
        max_tokens: int | None,
    ) -> Decision:
        """A decision for ``request`` on ``pool``, at once or after its wait (see the module)."""
        pq = self._pool(pool, cfg, limits, router)
        top = ticket.spec.rank == 0
        if top:  # the highest class's concurrency (auto_headroom), from arrival to its attempt's end
            pq.top.started(router.clock())
        try:
            decision = await self._route(pq, pool, router, request, tried, ticket, cfg, max_tokens)
        except BaseException:
            if top:
                pq.top.ended(router.clock())
            raise
        self._gauge_headroom(pool, pq)
        return decision

    def _gauge_headroom(self, pool: str, pq: _PoolQueue) -> None:
        if auto_headroom(pq.cfg, pq.limits) is not None:
            m = self.metrics
            m.child(m.fair_headroom, pool).set(pq.derived)
            load = pq.load
            for term, value in (
                ("arrival_rate_per_s", load.rate_per_s),
                ("service_s", load.service_s),
                ("concurrency", load.concurrency),
                ("needed", pq.high),
            ):
                m.child(m.fair_headroom_model, pool, term).set(value)

    async def _route(
        self,
        pq: _PoolQueue,
        pool: str,
        router: PoolRouter,
        request: RouteRequest,
        tried: Container[str],
        ticket: Ticket,
        cfg: FairnessConfig,
        max_tokens: int | None,
    ) -> Decision:
        all_lim = pq.sat_limits()
        lim = all_lim.for_band(ticket.spec.rank)  # its class's room
        loop = asyncio.get_running_loop()
        arrived = loop.time()
        now = router.clock()
        sat = pool_saturation(router.replicas, lim, now)
        prompt, matched = router.matches(request)
        home = max(matched, key=matched.__getitem__) if matched else None
        labels = (pool, ticket.label, ticket.spec.name)
        m = self.metrics
        direct = not len(pq.queue) and not sat.saturated
        if direct:
            full_now = full_for(router.replicas, lim, now)
            room = with_room(router, all_lim, now)
            direct = not queues_for_home(ticket.spec.rank, router, home, matched, tried, room, full_now)
        if direct:
            self._check_objective(pq, pool, ticket, prompt, matched, 0, tried)
            try:
                decision = router.route(request, exclude=not_to(tried, full_now))
                m.child(m.fair_wait, *labels).observe(0.0)
                ticket.waited_s, ticket.released_by = 0.0, "direct"
                return decision
            except NoReplicaAvailable as exc:
                if not isinstance(exc, ReplicasBusy) and not could_take(router, tried):
                    raise  # no healthy replica it has not tried: dispatch answers as without fairness
        work = predicted_work(
            prompt, max(matched.values(), default=0), max_tokens or cfg.default_max_tokens, cfg.decode_weight
        )
        entry = _Entry(request, tried, home, ticket, loop.create_future(), labels, matched)
        band = min(ticket.spec.rank, pq.bands - 1)  # a reload's longer class list: the old queue's bands
        waiter = Waiter(ticket.flow, band, work, ticket.weight, now, ticket.spec.max_wait_s, entry)
        try:
            evicted = pq.queue.push(waiter, ticket.max_queued)
        except QueueFull as full:
            if full.scope == "tenant":
                m.child(m.fair_shed, pool, ticket.spec.name, "tenant_cap").inc()
                raise _shed(
                    429,
                    f"too many requests of this tenant are waiting for model '{pool}' (at most "
                    f"{ticket.max_queued}); retry shortly",
                    "tenant_queue_full",
                    1,
                ) from None
            m.child(m.fair_shed, pool, ticket.spec.name, "queue_full").inc()
            raise _shed(
                503, f"every replica of model '{pool}' is busy and its queue is full", "overloaded", 1
            ) from None
        m.child(m.fair_queued, *labels).inc()
        if evicted is not None:
            self._leave(evicted.payload)
            m.child(m.fair_shed, pool, evicted.payload.ticket.spec.name, "preempted").inc()
            evicted.payload.future.set_exception(
                _shed(
                    503,
                    f"every replica of model '{pool}' is busy; a higher priority took the place",
                    "overloaded",
                    1,
                )
            )
        try:
            self._check_objective(pq, pool, ticket, prompt, matched, pq.queue.ahead(waiter), tried)
        except GatewayError:
            pq.queue.remove(waiter)
            self._leave(entry)
            raise
        self._pump(pq, "arrival")
        self._arm(pq)
        try:
            async with asyncio.timeout(cfg.queue_timeout_s):
                decision = await entry.future
        except TimeoutError:
            pq.queue.remove(waiter)
            self._give_back(pq, entry)  # released at the deadline's instant: too late all the same
            m.child(m.fair_shed, pool, ticket.spec.name, "timeout").inc()
            raise _shed(
                503,
                f"every replica of model '{pool}' stayed busy for {cfg.queue_timeout_s:g}s",
                "overloaded",
                1,
            ) from None
        except asyncio.CancelledError:
            pq.queue.remove(waiter)
            self._give_back(pq, entry)
            raise
        finally:
            self._leave(entry)
            ticket.waited_s, ticket.released_by = loop.time() - arrived, entry.released_by
            m.child(m.fair_wait, *labels).observe(ticket.waited_s)
        return decision

    def _give_back(self, pq: _PoolQueue, entry: _Entry) -> bool:
        """A waiter that stopped waiting after the pump routed it: the decision's load is given back."""
        f = entry.future
        if not f.done() or f.cancelled() or f.exception() is not None:
            return False
        decision = f.result()
        pq.router.forget_failed(decision)
        pq.router.release(decision)
        self._pump(pq, "give_back")
        return True

    def _leave(self, entry: _Entry) -> None:
        if not entry.left:
            entry.left = True
            self.metrics.child(self.metrics.fair_queued, *entry.gauge_labels).dec()

    def _check_objective(
        self,
        pq: _PoolQueue,
        pool: str,
        ticket: Ticket,
        prompt: int,
        matched: dict[str, int],
        ahead: int,
        tried: Container[str],
    ) -> None:
        objective = ticket.objective_s
        if objective is None:
            return
        router, cfg = pq.router, pq.cfg
        predicted = predict_on_pool(
            router.replicas,
            prompt,
            matched,
            limits=pq.sat_limits().for_band(ticket.spec.rank),  # its class's room
            now=router.clock(),
            default_rate=router.cfg.prefill_tokens_per_s,
            ahead=ahead,
            service_s=pq.service.value,
            overhead_s=cfg.overhead_ms / 1000,
            exclude=tried,
        )
        if predicted <= objective or cfg.on_objective_miss == "serve":
            return
        m = self.metrics
        m.child(m.fair_shed, pool, ticket.spec.name, "objective").inc()
        m.child(m.ttft_objective, pool, ticket.spec.name, "shed").inc()
        retry = retry_after_s(predicted, objective)
        raise _shed(
            429,
            f"no replica of model '{pool}' is predicted to give a first token within the objective of "
            f"{objective * 1000:g} ms (predicted {predicted * 1000:.0f} ms); retry after {retry}s",
            "ttft_objective_unattainable",
            retry,
        )

    # -- releases ---------------------------------------------------------------------------------------
    def released(
        self, pool: str, held_s: float | None = None, why: str = "end", band: int | None = None
    ) -> None:
        """A request of ``pool`` (of ``band``, at its attempt's end) left its replica (after ``held_s``
        there), or ``why`` else freed room there: a waiter may go."""
        pq = self._pools.get(pool)
        if pq is None:
            return
        if held_s is not None:
            pq.service.observe(held_s)
        if band == 0:
            pq.top.ended(pq.router.clock())
        self._pump(pq, why)

    def _pump(self, pq: _PoolQueue, why: str) -> None:
        router = pq.router
        lim = pq.sat_limits()
        for waiter, got in release(pq.queue, router, lim, router.clock(), pq.cfg.lookahead):
            entry: _Entry = waiter.payload
            entry.released_by = why
            if isinstance(got, Decision):
                entry.future.set_result(got)
            else:
                entry.future.set_exception(got)

    def _arm(self, pq: _PoolQueue) -> None:
        if pq.ticking:
            return
        pq.ticking = True
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._pump(pq, "tick")
            if len(pq.queue):
                loop.call_later(TICK_S, tick)
            else:
                pq.ticking = False

        loop.call_later(TICK_S, tick)
