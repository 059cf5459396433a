"""Explicit-entry registry on real Redis (and the memory one through the same contract)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from cache.billing.explicit import MemoryExplicitRegistry, RedisExplicitRegistry


@pytest.fixture
async def clients(redis_url: str) -> AsyncIterator[list[aioredis.Redis]]:
    """Two independent connections: two gateway pods."""
    cs = [aioredis.from_url(redis_url), aioredis.from_url(redis_url)]
    yield cs
    for c in cs:
        await c.aclose()


@pytest.fixture(params=["memory", "redis"])
async def registry(request, clients):
    if request.param == "memory":
        return MemoryExplicitRegistry(ttl_s=300)
    return RedisExplicitRegistry(clients[0], ttl_s=300, key_prefix="t1")


async def test_contract_create_then_hit(registry):
    kind, e = await registry.lookup_or_create("ten", "m", 123, 2000, "r1")
    assert kind == "created" and (e.replica_id, e.prefix_tokens) == ("r1", 2000)
    assert abs(e.created_at - time.time()) < 5
    kind, e2 = await registry.lookup_or_create("ten", "m", 123, 2000, "r9")
    assert kind == "hit" and e2 == e
    assert await registry.get("ten", "m", 123) == e
    assert await registry.get("other", "m", 123) is None
    s = await registry.stats()
    assert (s.live, s.created, s.hits) == (1, 1, 1)


async def test_contract_concurrent_first_requests_create_once(registry):
    results = await asyncio.gather(
        *[registry.lookup_or_create("ten", "m", "h", 1024, f"r{i}") for i in range(50)]
    )
    kinds = [k for k, _ in results]
    assert kinds.count("created") == 1 and kinds.count("hit") == 49
    replicas = {e.replica_id for _, e in results}
    assert len(replicas) == 1  # everyone is pinned to the creator's replica


async def test_two_pods_race_one_creation(clients):
    pods = [RedisExplicitRegistry(c, ttl_s=300, key_prefix="t2") for c in clients]
    results = await asyncio.gather(
        *[pods[i % 2].lookup_or_create("ten", "m", 9, 4096, f"pod{i % 2}") for i in range(40)]
    )
    assert [k for k, _ in results].count("created") == 1
    s = await pods[1].stats()
    assert (s.created, s.hits, s.live) == (1, 39, 1)


async def test_redis_hit_renews_native_ttl(clients):
    reg = RedisExplicitRegistry(clients[0], ttl_s=30, key_prefix="t3")
    await reg.lookup_or_create("ten", "m", 1, 1024, "r")
    key = reg._key("ten", "m", 1)
    await clients[0].pexpire(key, 5000)  # pretend 25 s have passed
    assert 0 < await clients[0].pttl(key) <= 5000
    kind, _ = await reg.lookup_or_create("ten", "m", 1, 1024, "r")
    assert kind == "hit"
    assert await clients[0].pttl(key) > 25_000  # renewed to the full ttl
    # get() reads without renewing
    await clients[0].pexpire(key, 5000)
    await reg.get("ten", "m", 1)
    assert await clients[0].pttl(key) <= 5000


async def test_redis_expiry_is_counted(clients):
    reg = RedisExplicitRegistry(clients[0], ttl_s=0.1, key_prefix="t4")
    await reg.lookup_or_create("ten", "m", 1, 1024, "r")
    await reg.lookup_or_create("ten", "m", 2, 1024, "r")
    deadline = time.monotonic() + 3.0
    while await reg.get("ten", "m", 1) is not None and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.05)
    assert await reg.get("ten", "m", 1) is None
    s = await reg.stats()
    assert (s.live, s.created, s.expired) == (0, 2, 2)
    kind, _ = await reg.lookup_or_create("ten", "m", 1, 1024, "r")
    assert kind == "created"


async def test_redis_keys_hold_no_prompt_text(clients):
    reg = RedisExplicitRegistry(clients[0], ttl_s=30, key_prefix="t5")
    await reg.lookup_or_create("ten:ant", "m", 0xDEADBEEF, 1024, "r")
    keys = sorted(k.decode() for k in await clients[0].keys("*"))
    assert keys == ["{t5:xc}:e:7.ten:ant:1.m:3735928559", "{t5:xc}:live", "{t5:xc}:stats"]


async def test_redis_per_call_ttl(clients):
    reg = RedisExplicitRegistry(clients[0], ttl_s=300, key_prefix="t6")
    await reg.lookup_or_create("ten", "m", 1, 1024, "r", ttl_s=20)
    assert 10_000 < await clients[0].pttl(reg._key("ten", "m", 1)) <= 20_000
