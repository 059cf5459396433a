"""One suite for both response stores (memory, real Redis), plus the memory store's LRU and byte bound."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from cache.entry import Entry
from cache.keys import cache_key, tenant_tag
from cache.store import MemoryStore, ResponseStore
from cache.store_redis import RedisStore

CHAT = "/v1/chat/completions"


def response(text: str) -> dict[str, Any]:
    return {
        "id": "r",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


def key(n: int, salt: bytes = b"salt-a") -> str:
    return cache_key(CHAT, {"model": "m", "messages": [{"role": "user", "content": f"q{n}"}]}, salt)


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ResponseStore]:
    if request.param == "memory":
        s: ResponseStore = MemoryStore(max_bytes=10_000_000, max_entry_bytes=4096)
    else:
        s = RedisStore(request.getfixturevalue("redis_url"), key_prefix="t", max_entry_bytes=4096)
    yield s
    await s.close()


async def test_set_get_delete(store: ResponseStore) -> None:
    assert await store.get(key(1)) is None
    entry = Entry(response(" answer é "), created_at=123.5, meta={"source": "upstream"})
    assert await store.set(key(1), entry, ttl_s=60)
    got = await store.get(key(1))
    assert (
        got is not None
        and got.response == entry.response
        and got.created_at == 123.5
        and got.meta == entry.meta
    )
    got.response["choices"] = []  # a hit is the caller's own copy
    again = await store.get(key(1))
    assert again is not None and again.response == entry.response
    await store.delete(key(1))
    assert await store.get(key(1)) is None
    assert store.stats.hits == 2 and store.stats.misses == 2 and store.stats.sets == 1


async def test_overwrite(store: ResponseStore) -> None:
    await store.set(key(1), Entry(response("old")), ttl_s=60)
    await store.set(key(1), Entry(response("new")), ttl_s=60)
    got = await store.get(key(1))
    assert got is not None and got.response["choices"][0]["message"]["content"] == "new"


async def test_ttl_expires(store: ResponseStore) -> None:
    # The short TTL outlasts the two calls between its set and its first get on a loaded machine (at
    # 0.15 s, a test worker descheduled that long, a few scheduler turns at load 15, read it as expired).
    await store.set(key(1), Entry(response("short")), ttl_s=0.5)
    await store.set(key(2), Entry(response("long")), ttl_s=60)
    assert await store.get(key(1)) is not None
    await asyncio.sleep(0.7)
    assert await store.get(key(1)) is None
    assert await store.get(key(2)) is not None


async def test_entry_too_big_is_not_stored(store: ResponseStore) -> None:
    assert not await store.set(key(1), Entry(response("x" * 5000)), ttl_s=60)
    assert await store.get(key(1)) is None
    assert store.stats.rejected_too_big == 1


async def test_purge_tenant_only_touches_that_tenant(store: ResponseStore) -> None:
    for n in range(5):
        await store.set(key(n, b"salt-a"), Entry(response("a")), ttl_s=60)
        await store.set(key(n, b"salt-b"), Entry(response("b")), ttl_s=60)
    assert await store.purge_tenant(tenant_tag(b"salt-a")) == 5
    for n in range(5):
        assert await store.get(key(n, b"salt-a")) is None
        assert await store.get(key(n, b"salt-b")) is not None


async def test_redis_layout_is_namespaced_hash_tagged_and_has_native_ttl(redis_url: str) -> None:
    s = RedisStore(redis_url, key_prefix="pgw")
    k = key(7)
    await s.set(k, Entry(response("hello")), ttl_s=30)
    raw = aioredis.Redis.from_url(redis_url)
    try:
        keys = await raw.keys("*")
        assert keys == [f"pgw:rc:{{{k}}}".encode()]
        assert 0 < await raw.pttl(keys[0]) <= 30_000
        assert b"q7" not in keys[0]
    finally:
        await raw.aclose()
        await s.close()


async def test_two_redis_store_instances_share_entries(redis_url: str) -> None:
    a, b = RedisStore(redis_url), RedisStore(redis_url)
    try:
        await a.set(key(1), Entry(response("shared")), ttl_s=30)
        got = await b.get(key(1))
        assert got is not None and got.response["choices"][0]["message"]["content"] == "shared"
    finally:
        await a.close()
        await b.close()


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


async def test_memory_lru_eviction_and_byte_bound() -> None:
    size = len(Entry(response("v"), created_at=0).to_bytes()) + len(key(0))
    s = MemoryStore(max_bytes=3 * size, max_entry_bytes=10_000)
    for n in range(3):
        assert await s.set(key(n), Entry(response("v"), created_at=0), ttl_s=60)
    assert len(s) == 3 and s.bytes == 3 * size
    assert await s.get(key(0)) is not None  # 0 is now the most recently used
    await s.set(key(3), Entry(response("v"), created_at=0), ttl_s=60)
    assert len(s) == 3 and s.bytes <= s.max_bytes
    assert await s.get(key(1)) is None  # the least recently used went first
    assert await s.get(key(0)) is not None and await s.get(key(3)) is not None
    assert s.stats.evictions == 1
    big = Entry(response("x" * (2 * size)), created_at=0)
    await s.set(key(9), big, ttl_s=60)  # needs two slots: evicts until it fits
    assert s.bytes <= s.max_bytes and await s.get(key(9)) is not None


async def test_memory_ttl_with_controlled_clock() -> None:
    clock = FakeClock()
    s = MemoryStore(clock=clock)
    await s.set(key(1), Entry(response("v")), ttl_s=10)
    clock.t += 9.9
    assert await s.get(key(1)) is not None
    clock.t += 0.2
    assert await s.get(key(1)) is None
    assert len(s) == 0 and s.bytes == 0
