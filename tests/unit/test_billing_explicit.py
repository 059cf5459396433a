"""In-memory explicit-entry registry with an injected clock: TTL, renewal, counters, bounds."""

from __future__ import annotations

import pytest

from cache.billing.explicit import MemoryExplicitRegistry


class Clock:
    def __init__(self, t: float = 1000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


async def test_create_hit_renew_expire():
    clock = Clock()
    reg = MemoryExplicitRegistry(ttl_s=300, clock=clock)
    kind, entry = await reg.lookup_or_create("t", "m", 42, 2048, "r1")
    assert kind == "created" and (entry.replica_id, entry.prefix_tokens, entry.created_at) == (
        "r1",
        2048,
        1000.0,
    )
    clock.t += 299
    kind, entry = await reg.lookup_or_create("t", "m", 42, 2048, "r2")
    assert kind == "hit" and entry.replica_id == "r1"  # the entry keeps the replica that built it
    clock.t += 299  # 598 s after creation, 299 after the renewing hit: still live
    assert (await reg.get("t", "m", 42)) is not None
    clock.t += 1  # exactly ttl after the last hit: gone
    assert (await reg.get("t", "m", 42)) is None
    s = await reg.stats()
    assert (s.live, s.created, s.hits, s.expired) == (0, 1, 1, 1)
    kind, _ = await reg.lookup_or_create("t", "m", 42, 2048, "r3")
    assert kind == "created"


async def test_get_does_not_renew():
    clock = Clock()
    reg = MemoryExplicitRegistry(ttl_s=10, clock=clock)
    await reg.lookup_or_create("t", "m", "h", 1024, "r1")
    clock.t += 9
    assert await reg.get("t", "m", "h") is not None
    clock.t += 1
    assert await reg.get("t", "m", "h") is None


async def test_keys_are_scoped_by_tenant_and_model():
    reg = MemoryExplicitRegistry(clock=Clock())
    assert (await reg.lookup_or_create("a", "m", 1, 1024, "r"))[0] == "created"
    assert (await reg.lookup_or_create("b", "m", 1, 1024, "r"))[0] == "created"
    assert (await reg.lookup_or_create("a", "m2", 1, 1024, "r"))[0] == "created"
    assert (await reg.lookup_or_create("a", "m", 1, 1024, "r"))[0] == "hit"
    assert (await reg.stats()).live == 3


async def test_bounded_size_evicts_soonest_to_expire():
    clock = Clock()
    reg = MemoryExplicitRegistry(ttl_s=100, max_entries=3, clock=clock)
    for i in range(3):
        await reg.lookup_or_create("t", "m", i, 1024, "r")
        clock.t += 1
    await reg.lookup_or_create("t", "m", 0, 1024, "r")  # renew 0: now 1 expires first
    await reg.lookup_or_create("t", "m", 3, 1024, "r")
    assert await reg.get("t", "m", 1) is None
    assert all([await reg.get("t", "m", i) for i in (0, 2, 3)])
    s = await reg.stats()
    assert (s.live, s.evicted, s.expired) == (3, 1, 0)


async def test_heap_stays_bounded_under_renewals():
    clock = Clock()
    reg = MemoryExplicitRegistry(ttl_s=100, clock=clock)
    for _ in range(2000):
        clock.t += 0.01
        await reg.lookup_or_create("t", "m", 7, 1024, "r")
    assert len(reg._heap) <= 4 * 1 + 64 + 1


def test_rejects_bad_settings():
    with pytest.raises(ValueError):
        MemoryExplicitRegistry(ttl_s=0)


async def test_per_call_ttl_overrides_default():
    clock = Clock()
    reg = MemoryExplicitRegistry(ttl_s=300, clock=clock)
    await reg.lookup_or_create("t", "m", 1, 1024, "r", ttl_s=60)
    clock.t += 59
    assert await reg.get("t", "m", 1) is not None
    clock.t += 1
    assert await reg.get("t", "m", 1) is None
