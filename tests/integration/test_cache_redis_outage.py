"""Redis stopped and restarted under the cache: every call fails open (counted), then recovers."""

from __future__ import annotations

from typing import Any

from cache.buckets import RedisBuckets, TenantLimiter
from cache.coalesce import Coalescer
from cache.entry import Entry
from cache.store_redis import RedisStore, connect
from tests.fault.support import wait_for
from tests.support.redis_server import RedisServer


def response(text: str) -> dict[str, Any]:
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"content": text}, "finish_reason": "stop"}],
    }


async def test_fail_open_while_down_then_recover(own_redis: RedisServer) -> None:
    errors: list[str] = []
    client = connect(own_redis.url, socket_timeout_s=0.5)

    def hook(op: str, exc: BaseException) -> None:
        errors.append(op)

    store = RedisStore(client=client, on_error=hook)
    open_buckets = RedisBuckets(client, fail_open=True, on_error=hook)
    closed_buckets = RedisBuckets(client, key_prefix="c", fail_open=False, on_error=hook)
    coalescer = Coalescer(redis=client, store=store, on_error=hook)
    try:
        assert await store.set("v1:t:k", Entry(response("before")), ttl_s=60)
        assert (await open_buckets.take("k", 1, 1, 0.001)).allowed
        assert not (await open_buckets.take("k", 1, 1, 0.001)).allowed  # the bucket really is empty

        own_redis.stop()

        assert await store.get("v1:t:k") is None  # a miss, not an exception
        assert not await store.set("v1:t:k2", Entry(response("during")), ttl_s=60)
        await store.delete("v1:t:k")
        assert await store.purge_tenant("t") == -1
        r = await open_buckets.take("k", 1, 1, 0.001)
        assert r.allowed and r.degraded  # fail open: allowed, flagged
        r = await closed_buckets.take("k", 1, 1, 0.001)
        assert not r.allowed and r.degraded and r.retry_after_s > 0  # fail closed
        await open_buckets.refund("k", 1, 1)
        limiter = TenantLimiter(open_buckets, requests_per_s=1)
        assert (await limiter.check_request("tenant")).allowed
        async with coalescer.acquire("v1:t:k") as flight:
            assert flight.role == "leader" and flight.degraded  # leads locally
            await flight.finish(response("local"))
        assert store.stats.errors == 4
        assert open_buckets.errors == 3 and closed_buckets.errors == 1
        assert {"get", "set", "delete", "purge", "take", "refund", "lease"} <= set(errors)

        assert client.guard.open  # the breaker opened: the calls above failed at once, not in 0.5 s each
        own_redis.start()  # same port: redis-py reconnects by itself
        await wait_for(lambda: not client.guard.open, timeout=5)  # the background probe closed it

        assert await store.get("v1:t:k") is None  # data is gone (no persistence), but the call works
        assert await store.set("v1:t:k", Entry(response("after")), ttl_s=60)
        got = await store.get("v1:t:k")
        assert got is not None and got.response == response("after")
        r = await open_buckets.take("k", 1, 1, 0.001)
        assert r.allowed and not r.degraded
        assert not (await open_buckets.take("k", 1, 1, 0.001)).allowed  # Lua scripts re-loaded after restart
        async with coalescer.acquire("v1:t:new") as flight:
            assert flight.role == "leader" and not flight.degraded
            await flight.finish(response("x"))
    finally:
        await coalescer.close()
        await client.aclose()
