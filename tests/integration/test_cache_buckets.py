"""Token buckets: the same semantics in memory (controlled clock) and in Redis (server clock, real time)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import pytest

from cache.buckets import Buckets, KeyGate, MemoryBuckets, RedisBuckets, TenantLimiter
from cache.store_redis import connect


@dataclass
class Rig:
    buckets: Buckets
    advance: Callable[[float], Awaitable[None]]
    exact: bool  # the memory clock is exact; Redis' clock moves on its own


class Clock:
    def __init__(self) -> None:
        self.t = 50.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture(params=["memory", "redis"])
async def rig(request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    if request.param == "memory":
        clock = Clock()

        async def advance(dt: float) -> None:
            clock.t += dt

        yield Rig(MemoryBuckets(clock=clock), advance, True)
    else:
        client = connect(request.getfixturevalue("redis_url"))
        yield Rig(RedisBuckets(client, key_prefix="t"), asyncio.sleep, False)
        await client.aclose()


async def test_capacity_then_refusal_with_retry_after(rig: Rig) -> None:
    b = rig.buckets
    # slow refill (0.5/s) so that real time passing between calls on a busy machine does not matter
    for i in range(5):
        r = await b.take("k", 1, 5, 0.5)
        assert r.allowed and r.retry_after_s == 0
        assert r.remaining == pytest.approx(4 - i, abs=0.2)
    r = await b.take("k", 1, 5, 0.5)
    assert not r.allowed
    assert 1.5 < r.retry_after_s <= 2.0 + 1e-9
    r = await b.take("k", 3, 5, 0.5)
    assert not r.allowed and 5.0 < r.retry_after_s <= 6.0 + 1e-9
    assert (await b.take("other", 5, 5, 0.5)).allowed  # buckets are per key


async def test_refill_over_time_is_capped_at_capacity(rig: Rig) -> None:
    b = rig.buckets
    assert (await b.take("k", 4, 4, 5)).allowed
    assert not (await b.take("k", 2, 4, 5)).allowed
    await rig.advance(0.6)  # +3 tokens at 5/s
    r = await b.take("k", 2, 4, 5)
    assert r.allowed
    if rig.exact:
        assert r.remaining == pytest.approx(1.0)
    await rig.advance(1.0)  # more than needed to fill up
    r = await b.take("k", 0, 4, 5)
    assert r.allowed and r.remaining == pytest.approx(4.0)
    assert not (await b.take("k", 4.5, 4, 5)).allowed


async def test_cost_above_capacity_is_never_allowed(rig: Rig) -> None:
    r = await rig.buckets.take("k", 11, 10, 1)
    assert not r.allowed and math.isinf(r.retry_after_s)


async def test_refund_is_capped(rig: Rig) -> None:
    b = rig.buckets
    assert (await b.take("k", 10, 10, 0.001)).allowed
    await b.refund("k", 4, 10)
    assert (await b.take("k", 4, 10, 0.001)).allowed
    assert not (await b.take("k", 1, 10, 0.001)).allowed
    await b.refund("k", 100, 10)
    r = await b.take("k", 10, 10, 0.001)
    assert r.allowed and r.remaining == pytest.approx(0.0, abs=0.01)


async def test_tenant_limiter_reserves_and_refunds_tokens(rig: Rig) -> None:
    lim = TenantLimiter(rig.buckets, requests_per_s=1, request_burst=2, tokens_per_min=1000)
    assert (await lim.check_request("t1")).allowed
    assert (await lim.check_request("t1")).allowed
    assert not (await lim.check_request("t1")).allowed
    assert (await lim.check_request("t2")).allowed
    r, res = await lim.reserve_tokens("t1", 800)  # prompt + max_tokens
    assert r.allowed and res is not None
    r2, res2 = await lim.reserve_tokens("t1", 300)
    assert not r2.allowed and res2 is None and r2.retry_after_s > 0
    await lim.settle(res, used_tokens=200)  # 600 unused come back
    r3, _ = await lim.reserve_tokens("t1", 700)
    assert r3.allowed


async def test_key_gate_and_fill_breaker(rig: Rig) -> None:
    gate = KeyGate(rig.buckets, capacity=2, refill_per_s=0.01, breaker_threshold_per_min=3)
    assert [(await gate.admit("key")).allowed for _ in range(3)] == [True, True, False]
    assert [(await gate.breaker_check("key")).allowed for _ in range(4)] == [True, True, True, False]
    assert (await gate.breaker_check("other")).allowed


async def test_redis_buckets_are_shared_between_clients(redis_url: str) -> None:
    c1, c2 = connect(redis_url), connect(redis_url)
    try:
        b1, b2 = RedisBuckets(c1), RedisBuckets(c2)
        results = await asyncio.gather(*[(b1 if i % 2 else b2).take("hot", 1, 10, 0.001) for i in range(30)])
        assert sum(r.allowed for r in results) == 10
    finally:
        await c1.aclose()
        await c2.aclose()


async def test_memory_buckets_forget_idle_keys_when_full() -> None:
    clock = Clock()
    b = MemoryBuckets(clock=clock, max_keys=10)
    for i in range(9):
        await b.take(f"k{i}", 1, 5, 1)
    await b.take("busy", 5, 5, 0.001)  # drained, and refills slowly: must be kept
    clock.t += 100
    await b.take("new", 1, 5, 1)
    assert set(b._state) == {"busy", "new"}  # the refilled (= forgettable) buckets went
    assert not (await b.take("busy", 1, 5, 0.001)).allowed
