"""The shared approximate index over a real Redis and over the workers' Unix sockets."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import redis.asyncio as aioredis

from config.policy import Policy
from config.routing import RoutingConfig
from gateway.fleet.sharing import SharedIndex, open_shared_index
from gateway.fleet.sharing.redis_stream import stream_key
from gateway.observability.metrics import GatewayMetrics
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest
from tests.support.redis_server import RedisServer
from tests.support.stack import policy_for

PROMPT = "Plan a Zanzibar itinerary for a family of four travelling in the rainy season. " * 20


def body(question: str = "First day?") -> dict:
    return {
        "model": "sim-llama",
        "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": question}],
    }


def make_router() -> PoolRouter:
    replicas = [ReplicaState(id=f"r{i}", url=f"http://r{i}", kv_capacity_blocks=4096) for i in range(4)]
    return PoolRouter(replicas, RoutingConfig(policy="prefix_affinity"))


def shared_policy(**shared: object) -> Policy:
    return policy_for(
        ["http://127.0.0.1:1"], shared_index={"enabled": True, "flush_interval_s": 0.02, **shared}
    )


@asynccontextmanager
async def process(policy: Policy) -> AsyncIterator[tuple[SharedIndex, PoolRouter]]:
    router = make_router()
    shared = await open_shared_index(policy, GatewayMetrics(), {"sim-llama": router}.get)
    assert shared is not None
    try:
        yield shared, router
    finally:
        await shared.close()


def place(
    shared: SharedIndex, router: PoolRouter, question: str = "First day?"
) -> tuple[str, tuple[int, ...]]:
    """A decision of this process, shared as the first byte would share it."""
    d = router.route(RouteRequest("chat", "sim-llama", body(question)))
    shared.offer("sim-llama", d.replica.id, d.block_hashes)
    return d.replica.id, d.block_hashes


async def until(check, limit_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    for _ in range(int(limit_s / 0.02)):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not met in time")


async def test_a_placement_reaches_the_other_process_through_redis(redis_url: str) -> None:
    policy = shared_policy()
    policy.redis.url = redis_url
    async with process(policy) as (a, ra), process(policy) as (b, rb):
        rid, hashes = place(a, ra)
        await until(lambda: rb.index.match(hashes).get(rid) == len(hashes))
        assert rb.index.match(hashes) == {rid: len(hashes)}  # only where A sent it
        # B's own next decision for the follow-up turn goes there, by affinity.
        d = rb.route(RouteRequest("chat", "sim-llama", body("Second day?")))
        assert (d.replica.id, d.reason) == (rid, "affinity")
        # A ignores its own batches: its entries are its decision's, not doubled or refreshed.
        assert a.metrics.shared_placements.labels("applied")._value.get() == 0
        assert b.metrics.shared_placements.labels("applied")._value.get() == 1


async def test_redis_holds_one_bounded_expiring_stream_of_hashes_and_no_prompt_text(redis_url: str) -> None:
    policy = shared_policy(stream_max_len=10, max_batch_bytes=1024)
    policy.redis.url = redis_url
    policy.redis.key_prefix = "tenant-a"
    async with process(policy) as (a, ra):
        for k in range(40):
            place(a, ra, f"question {k}")
            await a.flush()
    client = aioredis.from_url(redis_url)
    try:
        keys = await client.keys("*")
        assert keys == [stream_key("tenant-a").encode()]
        assert stream_key("tenant-a").startswith("tenant-a:")
        assert await client.xlen(keys[0]) < 40  # MAXLEN ~ trims whole macro nodes: bounded, not exact
        assert 0 < await client.ttl(keys[0]) <= policy.shared_index.stream_ttl_s
        dump = b"".join(f for _, fields in await client.xrange(keys[0]) for f in fields.values())
        for word in (b"Zanzibar", b"itinerary", b"question", b"rainy"):
            assert word not in dump
    finally:
        await client.aclose()


async def test_redis_killed_mid_run_then_back_the_picture_recovers() -> None:
    server = RedisServer()
    server.start()
    try:
        policy = shared_policy(retry_s=0.1, read_block_ms=100)
        policy.redis.url = server.url
        policy.redis.socket_timeout_s = 0.2
        async with process(policy) as (a, ra), process(policy) as (b, rb):
            rid, hashes = place(a, ra, "before")
            await until(lambda: rb.index.match(hashes).get(rid) == len(hashes))
            server.stop()
            # Down: decisions go on, placements are dropped and counted, nothing raises.
            for k in range(5):
                place(a, ra, f"during {k}")
            await until(lambda: not a.up and not b.up)
            await until(lambda: a.metrics.shared_placements.labels("dropped")._value.get() >= 5)
            server.start()  # an empty Redis on the same port
            await until(lambda: b.up)
            rid2, hashes2 = place(a, ra, "after")
            await until(lambda: rb.index.match(hashes2).get(rid2) == len(hashes2))
    finally:
        server.stop()


async def test_the_first_placement_after_a_redis_restart_is_sent_not_dropped() -> None:
    """A writer that had nothing to send while Redis restarted still holds the old connection; its
    next flush must reopen it and send, not drop the batch (it did: the shared index's client took
    redis-py's synchronous Retry, which an asyncio connection never runs, and 0 retries)."""
    server = RedisServer()
    server.start()
    try:
        policy = shared_policy(retry_s=0.1, read_block_ms=100)
        policy.redis.url = server.url
        async with process(policy) as (a, ra), process(policy) as (_b, rb):
            rid, hashes = place(a, ra, "before")
            await until(lambda: rb.index.match(hashes).get(rid) == len(hashes))
            server.stop()
            server.start()  # back, empty, on the same port; A sent nothing meanwhile
            rid2, hashes2 = place(a, ra, "after")
            await until(lambda: a.metrics.shared_placements.labels("sent")._value.get() == 2)
            assert a.metrics.shared_placements.labels("dropped")._value.get() == 0
            await until(lambda: rb.index.match(hashes2).get(rid2) == len(hashes2))
    finally:
        server.stop()


async def test_a_new_process_joins_with_the_streams_recent_placements(redis_url: str) -> None:
    policy = shared_policy()
    policy.redis.url = redis_url
    async with process(policy) as (a, ra):
        rid, hashes = place(a, ra)
        await a.flush()
        async with process(policy) as (_late, rl):
            await until(lambda: rl.index.match(hashes).get(rid) == len(hashes))


async def test_a_full_queue_drops_placements_instead_of_growing(redis_url: str) -> None:
    policy = shared_policy(max_pending=3, flush_interval_s=10)
    policy.redis.url = redis_url
    async with process(policy) as (a, ra):
        for k in range(5):
            place(a, ra, f"q{k}")
        assert len(a.pending) == 3
        assert a.metrics.shared_placements.labels("dropped")._value.get() == 2


async def test_workers_of_one_host_share_through_unix_sockets(tmp_path: Path) -> None:
    policy = shared_policy(transport="local", local_dir=str(tmp_path))
    async with process(policy) as (a, ra), process(policy) as (_b, rb), process(policy) as (c, rc):
        rid, hashes = place(a, ra)
        await until(lambda: all(r.index.match(hashes).get(rid) == len(hashes) for r in (rb, rc)))
        rid2, hashes2 = place(c, rc, "from c")
        await until(lambda: ra.index.match(hashes2).get(rid2) == len(hashes2))
    assert list(tmp_path.iterdir()) == []  # each removed its socket


async def test_a_single_process_without_redis_shares_nothing(tmp_path: Path) -> None:
    policy = shared_policy()  # transport auto, no Redis, no workers' directory
    assert await open_shared_index(policy, GatewayMetrics(), lambda _p: None) is None


async def test_a_transport_that_cannot_open_leaves_the_process_on_its_own_view(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    policy = shared_policy(transport="local", local_dir=str(blocked / "sockets"))
    assert await open_shared_index(policy, GatewayMetrics(), lambda _p: None) is None
