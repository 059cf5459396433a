"""Single-flight coalescing: in one process, and across two coalescers sharing a real Redis."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cache.coalesce import Coalescer, FlightFailed
from cache.entry import make_entry
from cache.store_redis import RedisStore, connect
from tests.fault.support import wait_for


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
    }


async def serve(
    coalescer: Coalescer, key: str, upstream_calls: list[int], release: asyncio.Event
) -> dict[str, Any]:
    """What the gateway does on a miss: lead (call the 'fleet') or follow."""
    async with coalescer.acquire(key) as flight:
        if flight.role == "leader":
            upstream_calls.append(1)
            await release.wait()
            result = answer("generated once")
            await flight.finish(result)
            return result
        return await flight.result()


async def test_concurrent_identical_requests_make_one_upstream_call() -> None:
    c = Coalescer()
    calls: list[int] = []
    release = asyncio.Event()
    tasks = [asyncio.create_task(serve(c, "k", calls, release)) for _ in range(50)]
    await asyncio.sleep(0.05)
    assert c.in_flight() == 1 and c.stats.leaders == 1 and c.stats.followers == 49
    release.set()
    results = await asyncio.gather(*tasks)
    assert calls == [1]
    assert all(r == answer("generated once") for r in results)
    assert c.in_flight() == 0
    # the next miss (after the flight) leads again
    release2 = asyncio.Event()
    release2.set()
    await serve(c, "k", calls, release2)
    assert calls == [1, 1]


async def test_different_keys_do_not_coalesce() -> None:
    c = Coalescer()
    calls: list[int] = []
    release = asyncio.Event()
    release.set()
    await asyncio.gather(serve(c, "a", calls, release), serve(c, "b", calls, release))
    assert calls == [1, 1]


async def test_streaming_followers_see_every_chunk_in_order() -> None:
    c = Coalescer()
    step = asyncio.Event()
    seen: dict[str, list[int]] = {}

    async def leader() -> None:
        async with c.acquire("s") as flight:
            assert flight.role == "leader"
            for i in range(20):
                flight.publish(i)
                if i == 5:
                    step.set()  # a late follower joins mid-stream
                await asyncio.sleep(0)
            await flight.finish(answer("done"))

    async def follower(name: str, late: bool) -> None:
        if late:
            await step.wait()
        async with c.acquire("s") as flight:
            assert flight.role == "follower"
            seen[name] = [chunk async for chunk in flight.chunks()]
            assert await flight.result() == answer("done")

    async def early(name: str) -> None:
        await follower(name, late=False)

    lead = asyncio.create_task(leader())
    await asyncio.sleep(0)
    await asyncio.gather(lead, early("f1"), early("f2"), follower("late", late=True))
    assert seen == {"f1": list(range(20)), "f2": list(range(20)), "late": list(range(20))}


async def test_leader_failure_does_not_poison_followers() -> None:
    c = Coalescer()
    go = asyncio.Event()
    outcomes: list[str] = []

    async def leader() -> None:
        with pytest.raises(RuntimeError):
            async with c.acquire("f") as flight:
                assert flight.role == "leader"
                flight.publish("partial")
                await go.wait()
                raise RuntimeError("replica died")

    async def follower() -> None:
        async with c.acquire("f") as flight:
            assert flight.role == "follower"
            try:
                await flight.result()
            except FlightFailed as exc:
                outcomes.append(exc.reason)
        # told to go upstream: the first to come back leads a fresh flight
        async with c.acquire("f") as flight:
            outcomes.append(flight.role)
            if flight.role == "leader":
                await asyncio.sleep(0.01)
                await flight.finish(answer("second try"))
            else:
                assert await flight.result() == answer("second try")

    lead = asyncio.create_task(leader())
    await asyncio.sleep(0)
    followers = [asyncio.create_task(follower()) for _ in range(3)]
    await asyncio.sleep(0.01)
    go.set()
    await asyncio.gather(lead, *followers)
    assert outcomes.count("leader_error") == 3
    assert outcomes.count("leader") == 1 and outcomes.count("follower") == 2


async def test_streaming_follower_sees_failure_after_partial_chunks() -> None:
    c = Coalescer()
    got: list[Any] = []

    async def leader() -> None:
        async with c.acquire("p") as flight:
            flight.publish("a")
            flight.publish("b")
            await asyncio.sleep(0.01)
            await flight.fail("upstream_error")

    async def follower() -> str:
        async with c.acquire("p") as flight:
            try:
                async for chunk in flight.chunks():
                    got.append(chunk)
            except FlightFailed as exc:
                return exc.reason
        return "no failure"

    lead = asyncio.create_task(leader())
    await asyncio.sleep(0)
    reason = await follower()
    await lead
    assert got == ["a", "b"] and reason == "upstream_error"


async def test_follower_times_out_when_leader_hangs() -> None:
    c = Coalescer(follower_timeout_s=0.1)
    hang = asyncio.Event()

    async def leader() -> None:
        async with c.acquire("h"):
            await hang.wait()

    lead = asyncio.create_task(leader())
    await asyncio.sleep(0)
    async with c.acquire("h") as flight:
        with pytest.raises(FlightFailed) as exc:
            await flight.result()
        assert exc.value.reason == "timeout"
        with pytest.raises(FlightFailed):
            async for _ in flight.chunks():
                pass
    hang.set()
    await lead


async def test_cancelled_leader_releases_followers() -> None:
    c = Coalescer()
    entered = asyncio.Event()

    async def leader() -> None:
        async with c.acquire("c"):
            entered.set()
            await asyncio.sleep(10)

    lead = asyncio.create_task(leader())
    await entered.wait()
    async with c.acquire("c") as flight:
        lead.cancel()
        with pytest.raises(FlightFailed):
            await flight.result()
    assert c.in_flight() == 0


# --- across processes: two coalescers sharing one real Redis ------------------------------------------


@pytest.fixture
async def pods(redis_url: str):
    clients = [connect(redis_url), connect(redis_url)]
    stores = [RedisStore(client=cl) for cl in clients]
    coalescers = [
        Coalescer(redis=cl, store=st, lease_ms=1000, follower_timeout_s=5.0, poll_max_s=0.5)
        for cl, st in zip(clients, stores, strict=True)
    ]
    yield coalescers, stores
    for co in coalescers:
        await co.close()
    for cl in clients:
        await cl.aclose()


async def test_only_one_leader_across_two_pods(pods) -> None:
    (pod_a, pod_b), (store_a, _store_b) = pods
    calls: list[str] = []
    release = asyncio.Event()
    key = "v1:abc:def"

    async def request(pod: Coalescer, name: str) -> dict[str, Any]:
        async with pod.acquire(key) as flight:
            if flight.role == "leader":
                calls.append(name)
                await release.wait()
                result = answer("from the leader pod")
                await (store_a if pod is pod_a else _store_b).set(key, make_entry(result), ttl_s=30)
                await flight.finish(result)
                return result
            return await flight.result()

    tasks = [asyncio.create_task(request(pod_a if i % 2 else pod_b, f"r{i}")) for i in range(20)]
    stats = [pod_a.stats, pod_b.stats]
    # Every request has taken its role (the leader is held by ``release``): then the split is asserted.
    await wait_for(lambda: sum(s.leaders + s.remote_followers + s.followers for s in stats) == 20)
    assert sum(s.leaders for s in stats) == 1
    assert sum(s.remote_followers for s in stats) == 1  # the other pod waits once, its requests follow it
    assert sum(s.followers for s in stats) == 18
    release.set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert len(calls) == 1
    assert all(r["choices"][0]["message"]["content"] == "from the leader pod" for r in results)


async def test_remote_followers_are_released_when_the_leader_pod_fails(pods) -> None:
    (pod_a, pod_b), _ = pods
    key = "v1:abc:fail"
    entered = asyncio.Event()
    go = asyncio.Event()

    async def leader() -> None:
        with pytest.raises(RuntimeError):
            async with pod_a.acquire(key) as flight:
                assert flight.role == "leader"
                entered.set()
                await go.wait()
                raise RuntimeError("boom")

    lead = asyncio.create_task(leader())
    await entered.wait()
    loop = asyncio.get_running_loop()
    async with pod_b.acquire(key) as flight:
        assert flight.role == "remote_follower"
        t0 = loop.time()
        go.set()
        with pytest.raises(FlightFailed) as exc:
            await flight.result()
        assert exc.value.reason in ("leader_failed", "no_entry")
        assert loop.time() - t0 < 4.0  # woken by the failure, not by the 5 s follower timeout
    await lead
    async with pod_b.acquire(key) as flight:  # the lease is free again: pod b may lead
        assert flight.role == "leader"
        await flight.fail()


async def test_lease_is_renewed_while_the_leader_runs(redis_url: str) -> None:
    # Condition-based: the lease's expiry must move later while the leader runs (its PTTL rises, which
    # only a renewal does), and the other pod must then still find it held. A 3 s lease (renewed every
    # 1 s) leaves 2 s of slack for a starved renewal task; no fixed sleep past the lease.
    clients = [connect(redis_url), connect(redis_url)]
    pod_a, pod_b = (
        Coalescer(
            redis=cl, store=RedisStore(client=cl), lease_ms=3000, follower_timeout_s=5.0, poll_max_s=0.5
        )
        for cl in clients
    )
    key = "v1:abc:slow"
    try:
        async with pod_a.acquire(key) as flight:
            assert flight.role == "leader"
            lease = pod_a.lease_key(key)
            lowest = await clients[0].pttl(lease)
            assert 0 < lowest <= 3000
            deadline = asyncio.get_running_loop().time() + 30.0
            while True:
                left = await clients[0].pttl(lease)
                assert left > 0, "the lease expired while its leader ran"
                if left > lowest + 100:
                    break  # renewed: the expiry moved later than it was
                lowest = min(lowest, left)
                assert asyncio.get_running_loop().time() < deadline, "the lease was never renewed"
                await asyncio.sleep(0.05)
            assert pod_a.stats.lease_lost == 0
            async with pod_b.acquire(key) as other:
                assert other.role == "remote_follower"
            await flight.fail()
        assert await clients[0].exists(lease) == 0  # released on exit
    finally:
        for co in (pod_a, pod_b):
            await co.close()
        for cl in clients:
            await cl.aclose()


async def test_remote_follower_times_out_and_goes_upstream(redis_url: str) -> None:
    client = connect(redis_url)
    store = RedisStore(client=client)
    pod = Coalescer(redis=client, store=store, follower_timeout_s=0.3, lease_ms=5000)
    try:
        await client.set(pod.lease_key("v1:x:y"), b"someone-else", px=5000)  # a stuck leader elsewhere
        async with pod.acquire("v1:x:y") as flight:
            assert flight.role == "remote_follower"
            with pytest.raises(FlightFailed) as exc:
                await flight.result()
            assert exc.value.reason == "timeout"
    finally:
        await pod.close()
        await client.aclose()
