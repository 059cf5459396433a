"""The drain in-process: requests in flight finish, then the shutdown hooks run (in order, a failing
one does not stop the next) while the upstream session is still open; /ready says 503 when draining."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web

from gateway.process.process import PROCESS, add_shutdown_hook
from gateway.server.app import create_app, runner_for
from tests.fault.support import chat
from tests.support.stack import TEST_SECRET, policy_for, sim_fleet

SLOW = {"speed": 1.0, "decode_s_per_token": 0.05, "overhead_s": 0.0, "prefill_s_per_token": 0.0}


async def test_hooks_run_after_the_drain_in_order() -> None:
    async with sim_fleet(1, **SLOW) as fleet:
        policy = policy_for(
            fleet.urls, server={"host": "127.0.0.1", "port": 0, "access_log": False, "drain_timeout_s": 10}
        )
        app = create_app(policy, secret=TEST_SECRET)
        events: list[str] = []

        async def first(app: web.Application) -> None:
            events.append("first")
            raise RuntimeError("a broken hook")

        async def second(app: web.Application) -> None:
            events.append(f"second session_closed={app[PROCESS].state.upstream.session.closed}")

        add_shutdown_hook(app, first)
        add_shutdown_hook(app, second)
        runner = runner_for(app, policy)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as s:

            async def request() -> int:
                async with s.post(url + "/v1/chat/completions", json=chat("drain", max_tokens=16)) as r:
                    await r.read()
                    events.append("request done")
                    return r.status

            task = asyncio.create_task(request())
            while fleet.replicas[0].counters.requests < 1:  # in flight (it takes about 0.8 s)
                assert not task.done(), "the request ended before it reached the replica"
                await asyncio.sleep(0.005)
            app[PROCESS].draining = True
            async with s.get(url + "/ready") as r:
                assert r.status == 503 and await r.json() == {"ready": False}
            await runner.cleanup()
            assert await task == 200
        assert events == ["request done", "first", "second session_closed=False"]
