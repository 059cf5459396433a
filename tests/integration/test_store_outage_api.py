"""The Batches API while its Redis job store is down: a 503 in OpenAI's shape with ``Retry-After``, never
a 500, and answers again once Redis is back (a real redis-server, stopped and started on its port)."""

from __future__ import annotations

from pathlib import Path

import aiohttp

from tests.fault.support import wait_for
from tests.support.redis_server import RedisServer
from tests.support.stack import gateway, policy_for, sim_fleet


async def test_the_batches_api_answers_503_while_its_redis_store_is_down(
    tmp_path: Path, own_redis: RedisServer
) -> None:
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls,
            redis={"url": own_redis.url, "key_prefix": "outage"},
            batch={"enabled": True, "dir": str(tmp_path / "files"), "store": "redis"},
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            url = gw.url + "/v1/batches"
            async with s.get(url) as r:
                assert r.status == 200 and (await r.json())["data"] == []

            own_redis.stop()
            async with s.get(url) as r:
                assert r.status == 503, await r.text()
                assert r.headers["Retry-After"] == "1"
                err = (await r.json())["error"]
                assert err["type"] == "service_unavailable" and err["code"] == "store_unavailable"
                assert set(err) == {"message", "type", "param", "code"}
            async with s.get(url + "/batch_missing") as r:
                assert r.status == 503  # a lookup too: the store cannot say whether it exists
            async with s.get(gw.url + "/health") as r:
                assert r.status == 200  # the process serves on

            own_redis.start()  # same port: the breaker's probe closes it and calls are sent again

            async def answers() -> bool:
                async with s.get(url) as r:
                    return r.status == 200

            await wait_for(answers, timeout=30)
