"""Gateway processes sharing one real Redis: coalescing across pods, and Redis going away and back."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import httpx
import yaml

from bench.procs import running, start_gateway, start_sim
from tests.fault.support import wait_for
from tests.support.redis_server import RedisServer
from tests.support.stack import gateway, policy_for, sim_fleet

CHAT = {
    "model": "sim-llama",
    "temperature": 0,
    "max_tokens": 20,
    "messages": [{"role": "user", "content": "Explain coalescing."}],
}


def write_policy(path: Path, sim_urls: list[str], redis_url: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "models": [
                    {
                        "name": "sim-llama",
                        "replicas": [{"url": u} for u in sim_urls],
                        "routing": {"policy": "least_load"},
                    }
                ],
                "redis": {"url": redis_url},
                "cache": {"enabled": True},
            }
        )
    )
    return path


def test_two_gateway_processes_coalesce_through_redis(tmp_path: Path, redis_url: str) -> None:
    sim, urls = start_sim(1, extra=["--mode", "simple", "--decode-s-per-token", "0.03", "--overhead-s", "0"])
    policy = write_policy(tmp_path / "p.yaml", urls, redis_url)
    env = {"PREFIX_GATEWAY_SECRET": "shared"}
    gw1 = start_gateway(["--config", str(policy)], env=env)
    gw2 = start_gateway(["--config", str(policy)], env=env)

    async def burst() -> list[tuple[int, str]]:
        async with aiohttp.ClientSession() as s:

            async def one(i: int) -> tuple[int, str]:
                url = (gw1 if i % 2 else gw2).url
                async with s.post(url + "/v1/chat/completions", json={**CHAT, "stream": i % 3 == 0}) as r:
                    await r.read()
                    return r.status, r.headers.get("x-cache", "")

            return await asyncio.gather(*(one(i) for i in range(40)))

    with running(gw1, gw2, sim):
        results = asyncio.run(burst())
        stats = httpx.get(urls[0] + "/sim/stats").json()
        assert all(st == 200 for st, _ in results), results
        assert stats["requests"] == 1, (stats, results)  # one generation for 40 requests on two pods
        caches = [c for _, c in results]
        assert caches.count("miss") == 1 and caches.count("coalesced") + caches.count("hit") == 39
        # A second wave is served from the shared store by both pods.
        for gw in (gw1, gw2):
            r = httpx.post(gw.url + "/v1/chat/completions", json=CHAT)
            assert r.headers["x-cache"] == "hit"


async def test_redis_down_fails_open_then_recovers() -> None:
    server = RedisServer()
    server.start()
    try:
        async with sim_fleet(1) as fleet:
            policy = policy_for(fleet.urls, cache={"enabled": True}, redis={"url": server.url})
            async with gateway(policy) as gw, aiohttp.ClientSession() as s:

                async def ask() -> tuple[int, str]:
                    async with s.post(gw.url + "/v1/chat/completions", json=CHAT) as r:
                        await r.read()
                        return r.status, r.headers["x-cache"]

                assert await ask() == (200, "miss")
                assert await ask() == (200, "hit")
                server.stop()
                for _ in range(3):  # Redis is gone: requests are proxied, uncached, never failed
                    status, cache = await ask()
                    assert status == 200 and cache == "miss"
                async with s.get(gw.metrics_url + "/metrics") as r:
                    assert 'prefix_gateway_redis_errors_total{component="store"' in await r.text()
                assert gw.process.redis.guard.open  # the breaker: calls now fail at once, not in 0.5 s each
                server.start()
                await wait_for(lambda: not gw.process.redis.guard.open, timeout=5)  # a probe answered
                assert (await ask())[0] == 200  # reconnects by itself; this answer fills the store again
                assert await ask() == (200, "hit")
    finally:
        server.stop()
