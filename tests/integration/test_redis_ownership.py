"""Who owns the Redis connections: the client closes its own pool, and the process's one client
outlives a reload that rebuilds the cache (the ledger keeps writing through it)."""

from __future__ import annotations

import asyncio

import aiohttp
import redis.asyncio as aioredis
import yaml

from cache.store_redis import connect
from tests.support.stack import gateway, policy_for, sim_fleet

ADMIN_TOKEN = "admin-secret-token"


async def _clients(url: str) -> int:
    probe = aioredis.Redis.from_url(url)
    try:
        return len(await probe.client_list()) - 1  # every connection but the probe's own
    finally:
        await probe.aclose()


async def test_closing_the_client_closes_its_pooled_connections(redis_url: str) -> None:
    client = connect(redis_url, max_connections=8)
    await asyncio.gather(*(client.ping() for _ in range(4)))  # several pooled connections
    assert await _clients(redis_url) >= 1
    await client.aclose()
    assert await _clients(redis_url) == 0


async def test_the_ledger_keeps_the_client_when_a_reload_rebuilds_the_cache(
    monkeypatch, redis_url: str
) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(1) as fleet:
        sections = {
            "redis": {"url": redis_url},
            "cache": {"store": "redis"},
            "billing": {"ledger": {"kind": "redis"}},
            "admin": {"token_env": "PREFIX_GATEWAY_ADMIN_TOKEN"},
            "server": {
                "host": "127.0.0.1",
                "port": 0,
                "metrics_port": 0,
                "access_log": False,
                "drain_timeout_s": 1,
            },
        }
        policy = policy_for(fleet.urls, **sections)
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:

            async def ask(q: str) -> int:
                body = {"model": "sim-llama", "max_tokens": 3, "messages": [{"role": "user", "content": q}]}
                async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                    await r.read()
                    return r.status

            assert await ask("before") == 200
            old_cache = gw.state.cache
            changed = policy.model_dump(mode="json", exclude_none=True)
            changed["cache"]["ttl_s"] = 123  # a cache change: a new cache runtime, the old one retired
            headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
            async with s.post(gw.url + "/admin/reload", data=yaml.safe_dump(changed), headers=headers) as r:
                assert r.status == 200, await r.text()
            assert gw.state.cache is not old_cache
            await asyncio.sleep(1.5)  # past the drain period: the old cache runtime is closed
            assert [await ask(f"after {i}") for i in range(3)] == [200, 200, 200]
            assert not gw.process.metering._pending  # every row went to Redis at once
            rows = await gw.process.metering.ledger.query(group_by=())
            assert rows[0].requests == 4
