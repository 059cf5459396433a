"""Releasing waiters to replicas with room: the queue's order, the router's placement.

While the pool has a free slot and someone waits, the next waiter in the queue's order
(``router.fairness.queue``) is routed by the pool's router itself (``PoolRouter.route``: its filters,
then prefix affinity among the replicas with room), so the slot is counted at once, before another
release could see it free. Among the first ``lookahead`` waiters of the band, one whose longest prefix
match is on a replica with room goes first: the freed replica gets a request whose prefix it holds,
where fair order alone may hand it one whose prefix lives on a replica that is still full (a spill:
its prefix prefilled again, a copy crowding the cache). Measured (``python -m bench.fairness
--kv-blocks 700 --lookahead 1``, docs/benchmarks.md): hit rate 0.752 with a lookahead of 8 and 0.746
with 1 (the well-behaved tenants' 0.675 and 0.646), a small gain as six prefixes soon live on both
replicas; kept at 8 since it costs fairness at most 8 requests' work.

**A waiter waits for its home.** A waiter whose home (the replica of its longest match) is full,
popped for a slot elsewhere, keeps its place instead while it has waited for its home less than the
prefill that home saves over the best replica it may use now, weighted as the router weighs a
private prefix (``(1 + reuse_weight)`` x those tokens at the home's prefill rate), and less than its
class's ``max_wait_s``; at arrival too, a request whose home is full is queued rather than sent to
the replica with room (``queues_for_home``). Not the highest class: its headroom is there so that
it never waits, and holding it for its home put the flood case's p99 at 1.78-2.04 x alone
(``python -m bench.fairness --seconds 20 --kv-blocks 700 --reserved --lookahead 1``, headroom 2:
1.07 x without). Measured on the Mooncake conversation trace at 2 x with
two tenants 3 : 1 (``python -m bench.fairness_trace``, docs/benchmarks.md "Issue 28, round 3"):
without it the fair queue's releases re-prefilled 105,072 prompt tokens that another replica held
(no gateway queue: 12,400), hit rate 0.093 against no queue's 0.162 (8 x 32 slots) and 0.147 against
0.206 (12 x 16); with it 0.145 and 0.198, and more completed (2.62 -> 2.78 and 4.74 -> 4.98 req/s).
Waiting only the unweighted prefill (x 1) kept 0.138 / 0.169; x 21 without the class cap 0.146 /
0.204: the cap costs little and keeps an interactive class's wait within its bound.

Below the highest class a waiter may use only the slots beyond the reserved ones, and none of the
headroom or of a replica past the queued-prefill bound (``SaturationLimits``): while that room is
taken, only the highest band is released. A waiter
whose routing finds every replica it may use busy (it already tried the one with room, or its
batch's share of the replica with room is taken) keeps its place and the release goes on with the
next, up to ``lookahead`` such waiters in one release: a waiter that cannot use the free slot never
holds the queue. Shared by the gateway
(``gateway.process.fair_admission``) and the benchmark in model time (``bench.fairness``).
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator, Mapping
from typing import TYPE_CHECKING, Protocol

from router.fairness.queue import FairQueue, Waiter
from router.fairness.saturation import SaturationLimits, free_slots, full_for, pool_saturation
from router.prefill import rate_of
from router.types import Decision, NoReplicaAvailable, ReplicasBusy, RouteRequest

if TYPE_CHECKING:
    from router.pool import PoolRouter


class Held(Protocol):
    """What a waiter's payload carries for its release."""

    request: RouteRequest
    exclude: Container[str]  # replicas it tried
    home: str | None  # the replica holding its longest prefix match
    matched: Mapping[str, int]  # prefix tokens each replica holds (the router's index, at arrival)

    @property
    def gone(self) -> bool: ...  # it stopped waiting (its client left): skipped


class _Union:
    """Replicas a request may not go to: those it tried, and those full by their reports."""

    __slots__ = ("a", "b")

    def __init__(self, a: Container[str], b: Container[str]):
        self.a, self.b = a, b

    def __contains__(self, x: object) -> bool:
        return x in self.a or x in self.b


def not_to(tried: Container[str], full: Container[str]) -> Container[str]:
    return _Union(tried, full)


def could_take(router: PoolRouter, tried: Container[str]) -> bool:
    """A healthy replica the request has not tried exists: ``NoReplicaAvailable`` from a routing that
    also left out the full replicas means "wait", not "no replica"."""
    return any(r.healthy and r.id not in tried for r in router.replicas)


def _at_home(room: set[str]) -> Callable[[Waiter], bool]:
    return lambda w: w.payload.home in room


def with_room(router: PoolRouter, limits: SaturationLimits, now: float) -> set[str]:
    """Replicas with a free slot for the highest class."""
    return {r.id for r in router.replicas if free_slots(r, limits.for_band(0), now) > 0}


def saved_at_home_s(
    router: PoolRouter,
    home: str | None,
    matched: Mapping[str, int],
    exclude: Container[str],
    room: Container[str],
    full: Container[str],
) -> float:
    """Seconds of prefill a request's home, full now, saves over the best replica it may use now: its
    cached tokens there less those here, at the router's prefill rate of its home; 0 when its home has
    room (or is gone, unhealthy or tried)."""
    if home is None or home in exclude or (home in room and home not in full):
        return 0.0
    replica = next((r for r in router.replicas if r.id == home), None)
    if replica is None or not replica.healthy:
        return 0.0
    here = max((n for r, n in matched.items() if r in room and r not in full), default=0)
    saved = matched.get(home, 0) - here
    return saved / rate_of(replica, router.cfg.prefill_tokens_per_s) if saved > 0 else 0.0


def queues_for_home(
    band: int,
    router: PoolRouter,
    home: str | None,
    matched: Mapping[str, int],
    exclude: Container[str],
    room: Container[str],
    full: Container[str],
) -> bool:
    """At arrival, with room in the pool and nobody waiting: whether a request of ``band`` is queued to
    wait for its full home instead of going to a replica with room (the release then bounds the wait)."""
    return band > 0 and saved_at_home_s(router, home, matched, exclude, room, full) > 0.0


def waits_for_home(
    waiter: Waiter, router: PoolRouter, room: Container[str], full: Container[str], now: float
) -> bool:
    """Whether ``waiter`` stays queued for its full home rather than take a free slot elsewhere: while
    it has waited for it less than the prefill its home saves (``saved_at_home_s``) weighted as the
    router weighs a private prefix's cached tokens against queued ones (``1 + reuse_weight``), and
    less than its class's ``max_wait_s`` (the longest its class is meant to wait unserved)."""
    if waiter.band == 0:
        return False  # the highest class never waits for its home: its headroom is there so it never waits
    held: Held = waiter.payload
    saved_s = saved_at_home_s(router, held.home, held.matched, held.exclude, room, full)
    if saved_s <= 0.0:
        return False
    if waiter.held_since is None:
        waiter.held_since = now
    bound = min((1.0 + router.cfg.reuse_weight) * saved_s, waiter.max_wait_s)
    return now - waiter.held_since < bound


def release(
    queue: FairQueue, router: PoolRouter, limits: SaturationLimits, now: float, lookahead: int
) -> Iterator[tuple[Waiter, Decision | NoReplicaAvailable]]:
    """Route waiters while a replica has room: each released waiter with its decision (or the
    ``NoReplicaAvailable`` that says no replica may ever take it)."""
    top, low = limits.for_band(0), limits.for_band(1)
    skipped: list[Waiter] = []  # waiters no replica they may use has room for: back in their places
    try:
        while len(queue) and len(skipped) < lookahead:
            if pool_saturation(router.replicas, top, now).saturated:
                return
            # below the highest class, only the slots beyond the reserved ones are room
            max_band = None if not pool_saturation(router.replicas, low, now).saturated else 0
            room = with_room(router, limits, now)
            waiter = queue.pop(now, prefer=_at_home(room), lookahead=lookahead, max_band=max_band)
            if waiter is None:
                return
            held: Held = waiter.payload
            if held.gone:
                continue
            full = full_for(router.replicas, limits.for_band(waiter.band), now)
            if waits_for_home(waiter, router, room, full, now):
                skipped.append(waiter)  # its home is full: it waits for it while that saves more
                continue
            try:
                decision = router.route(held.request, exclude=not_to(held.exclude, full))
            except NoReplicaAvailable as exc:
                if isinstance(exc, ReplicasBusy) or could_take(router, held.exclude):
                    skipped.append(waiter)  # busy, or only the full replicas are left to it: it waits
                    continue
                yield waiter, exc
                continue
            yield waiter, decision
    finally:
        for waiter in reversed(skipped):
            queue.requeue(waiter)
