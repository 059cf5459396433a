"""A non-streamed request's queued prefill is released at its predicted prefill end: exactly once,
whichever of the timer, a first byte and the end of the request comes first (router.prefill and the
gateway's timer, gateway.pipeline.dispatch._prefill_timer)."""

from __future__ import annotations

import asyncio

from config.routing import RoutingConfig
from gateway.fleet.pools import Pool
from gateway.pipeline.dispatch import _prefill_timer
from router.pool import PoolRouter
from router.prefill import MIN_SAMPLE_TOKENS, learn_end, learn_first_byte, prefill_due_s
from router.replica import ReplicaState
from router.types import RouteRequest

DOC = "a long and private document about ships " * 60  # ~600 approx tokens


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def chat(text: str) -> RouteRequest:
    return RouteRequest("chat", "m", {"model": "m", "messages": [{"role": "user", "content": text}]}, "t")


def router(clock: Clock | None = None, **cfg: object) -> PoolRouter:
    replicas = [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(2)]
    return PoolRouter(replicas, RoutingConfig(seed=1, **cfg), clock=clock or Clock())


def test_the_prediction_is_the_queue_ahead_and_its_own_over_the_rate() -> None:
    clock = Clock()
    r = router(clock, prefill_tokens_per_s=1000.0)
    a = r.route(chat(DOC))
    b = r.route(chat(DOC.replace("ships", "trains")))  # cold too; the same replica only if it is cheaper
    rep = a.replica
    assert a.queued_at_route == a.uncached_tokens
    assert r.prefill_due_s(a) == a.uncached_tokens / 1000.0
    if b.replica is rep:  # queued behind a: its prefill ends after both
        assert b.queued_at_route == a.uncached_tokens + b.uncached_tokens
    clock.t += 0.25
    assert r.prefill_due_s(a) == max(0.0, a.uncached_tokens / 1000.0 - 0.25)
    clock.t += 100
    assert r.prefill_due_s(a) == 0.0  # overdue: release now
    r.release_prefill(a)
    assert r.prefill_due_s(a) is None  # nothing left to release
    assert prefill_due_s(3000, 1.0, 1000.0) == 2.0


def test_release_after_the_timer_does_not_release_the_prefill_twice() -> None:
    r = router()
    d = r.route(chat(DOC))
    rep = d.replica
    assert rep.queued_prefill_tokens == d.uncached_tokens > 0
    r.release_prefill(d)  # the timer
    r.release_prefill(d)  # a late first byte
    assert (rep.in_flight, rep.queued_prefill_tokens) == (1, 0)
    r.release(d)  # the end of the request
    r.release(d)
    assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)


def test_first_bytes_teach_the_rate_and_whole_answers_bound_it() -> None:
    rep = ReplicaState(id="r", url="u")
    learn_first_byte(rep, MIN_SAMPLE_TOKENS - 1, 0.001)
    assert rep.prefill_tokens_per_s is None  # a tiny prompt's first byte is latency, not prefill
    learn_first_byte(rep, 2000, 1.0)
    assert rep.prefill_tokens_per_s == 2000.0
    learn_first_byte(rep, 4000, 1.0)
    assert 2000.0 < rep.prefill_tokens_per_s < 4000.0
    before = rep.prefill_tokens_per_s
    learn_end(rep, 1000, 1.0, 15000.0)  # 1000/s is no news: the rate is known to be higher
    assert rep.prefill_tokens_per_s == before
    learn_end(rep, 9000, 1.0, 15000.0)  # prefill of 9000 tokens ended within 1 s
    assert rep.prefill_tokens_per_s == 9000.0
    fresh = ReplicaState(id="f", url="u")
    learn_end(fresh, 9000, 1.0, 15000.0)  # the default is above the bound: unchanged
    assert fresh.prefill_tokens_per_s is None


def test_router_learns_from_a_streamed_first_byte() -> None:
    clock = Clock()
    r = router(clock, prefill_tokens_per_s=1e6)
    d = r.route(chat(DOC))
    clock.t += 0.5
    r.first_byte(d)
    assert d.replica.prefill_tokens_per_s == d.queued_at_route / 0.5
    assert d.replica.queued_prefill_tokens == 0
    r.first_byte(d)  # again: neither a second sample nor a second release
    assert d.replica.prefill_tokens_per_s == d.queued_at_route / 0.5
    assert d.replica.queued_prefill_tokens == 0


def pool_of(r: PoolRouter) -> Pool:
    return Pool(cfg=None, router=r)  # type: ignore[arg-type]


async def test_the_timer_releases_the_prefill_once_then_the_end_releases_the_request() -> None:
    r = router(prefill_tokens_per_s=1e6)  # due within a millisecond
    d = r.route(chat(DOC))
    rep = d.replica
    timer = _prefill_timer(pool_of(r), d)
    assert timer is not None
    deadline = asyncio.get_running_loop().time() + 5
    while rep.queued_prefill_tokens and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.001)
    assert (rep.in_flight, rep.queued_prefill_tokens) == (1, 0)  # success path: the timer released it
    timer.cancel()  # attempt_once's finally
    r.release(d)
    assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)


async def test_a_request_that_ends_first_cancels_the_timer_and_releases_once() -> None:
    """The error and the cancel paths: the request ends before the predicted prefill end."""
    r = router(prefill_tokens_per_s=1.0)  # due in minutes
    d = r.route(chat(DOC))
    rep = d.replica
    timer = _prefill_timer(pool_of(r), d)
    assert timer is not None and rep.queued_prefill_tokens == d.uncached_tokens
    timer.cancel()
    r.release(d)
    assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)
    await asyncio.sleep(0)
    assert rep.queued_prefill_tokens == 0  # a cancelled timer never runs
    assert _prefill_timer(pool_of(r), d) is None  # nothing left to release: no timer


async def test_cancelled_while_waiting_the_finally_releases_it() -> None:
    """A client that goes away cancels the handler: the finally cancels the timer and releases."""
    r = router(prefill_tokens_per_s=1.0)
    d = r.route(chat(DOC))
    rep = d.replica

    async def attempt() -> None:
        timer = _prefill_timer(pool_of(r), d)
        try:
            await asyncio.sleep(3600)  # the replica's answer
        finally:
            if timer is not None:
                timer.cancel()
            r.release(d)

    task = asyncio.ensure_future(attempt())
    await asyncio.sleep(0)
    assert rep.queued_prefill_tokens == d.uncached_tokens
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)


def test_release_at_the_end_when_configured() -> None:
    r = router(nonstream_prefill_release="end")
    d = r.route(chat(DOC))
    assert _prefill_timer(pool_of(r), d) is None
