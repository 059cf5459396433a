"""The Redis client's deadline and breaker (``cache.redis_guard``) against a real redis-server that is
SIGSTOPped (sockets open, nothing answers) and SIGCONTed."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator

import pytest
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from cache.redis_guard import RedisBreaker, RedisGuard, RedisUnavailable
from cache.store_redis import REDIS_ERRORS, connect
from tests.fault.support import wait_for
from tests.support.redis_server import RedisServer


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    if server.proc is not None:
        os.kill(server.proc.pid, signal.SIGCONT)
    server.stop()


def test_the_breaker_opens_after_consecutive_failures_and_only_a_probe_closes_it() -> None:
    b = RedisBreaker(failures_to_open=3)
    assert not b.failure(0.0) and not b.failure(0.1)
    b.success()  # an answer in between: the run starts again
    assert not b.failure(0.2) and not b.failure(0.3)
    assert b.failure(0.4) and b.state == "open"
    assert not b.failure(0.5)  # already open
    b.success()  # a call finishing late changes nothing while open
    assert b.state == "open"
    assert b.close() and b.state == "closed" and not b.close()


async def test_deadline_then_fail_fast_then_recovery(own_redis: RedisServer) -> None:
    # Each time bound sits halfway between what is tested and what it is told from: the 0.4 s deadline
    # against the 5 s socket timeout, and two calls that are not sent against two that would each wait
    # the 0.4 s deadline. With a 50 ms deadline and 50 ms allowed for the two unsent calls, a test
    # worker descheduled for 50 ms (a few scheduler turns at load 15) could fail a correct client.
    states: list[str] = []
    guard = RedisGuard(op_timeout_ms=400, breaker_failures=2, probe_interval_ms=50, on_state=states.append)
    client = connect(own_redis.url, socket_timeout_s=5.0, guard=guard)
    try:
        await client.set("k", "v")
        assert own_redis.proc is not None
        os.kill(own_redis.proc.pid, signal.SIGSTOP)
        for _ in range(2):
            t0 = time.perf_counter()
            with pytest.raises(RedisTimeoutError):
                await client.get("k")
            assert time.perf_counter() - t0 < 2.5  # the 0.4 s deadline, not the 5 s socket timeout
        assert states == ["open"] and guard.open
        t0 = time.perf_counter()
        with pytest.raises(RedisUnavailable):
            await client.get("k")
        with pytest.raises(REDIS_ERRORS):  # what every caller catches to fail open
            await client.evalsha("0" * 40, 0)
        assert time.perf_counter() - t0 < 0.8  # not sent at all (sent, the two would wait 0.8 s)
        await asyncio.sleep(0.3)
        assert guard.open  # the probes found nobody
        os.kill(own_redis.proc.pid, signal.SIGCONT)
        await wait_for(lambda: not guard.open)
        assert states == ["open", "closed"]
        assert await client.get("k") == b"v"
    finally:
        await client.aclose()


async def test_an_error_answer_is_an_answer(own_redis: RedisServer) -> None:
    guard = RedisGuard(op_timeout_ms=200, breaker_failures=1)
    client = connect(own_redis.url, guard=guard)
    try:
        await client.set("s", "text")
        for _ in range(3):
            with pytest.raises(ResponseError):
                await client.lpush("s", "x")  # WRONGTYPE: Redis is there
        assert not guard.open
    finally:
        await client.aclose()


async def test_a_busy_process_is_not_a_stalled_redis(own_redis: RedisServer) -> None:
    """A burst queued for a small pool, and an event loop blocked for longer than the deadline, miss
    the wall-clock deadline while Redis answers every call in well under a millisecond: no call
    fails and the breaker stays closed (a plain deadline made a cold-cache stampede into misses)."""
    # The policy's default deadline (100 ms): a call may wait 30 of them (3 s) while Redis answers
    # others, the pool's own wait included (20 ms deadlines, 0.6 s in all, failed on a loaded machine:
    # the bound measured the test's own CPU, not Redis; then the pool's 2 s wait, shorter than the
    # guard's 3 s, failed calls as "No connection available": connect() now sizes it past the guard).
    guard = RedisGuard(op_timeout_ms=100, breaker_failures=3)
    client = connect(own_redis.url, max_connections=4, guard=guard)
    try:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, time.sleep, 0.5)  # the loop stalls 500 ms: five deadlines
        t0 = loop.time()
        results = await asyncio.gather(*(client.incr("n") for _ in range(300)), return_exceptions=True)
        assert loop.time() - t0 > 0.5  # most calls waited past their 100 ms deadline
        assert [r for r in results if isinstance(r, BaseException)] == []
        assert sorted(results) == list(range(1, 301)) and not guard.open
    finally:
        await client.aclose()
