"""CPU a request in one process: an in-process gateway (the default policy: response cache on,
billing ledger in memory, access log off), two simulated replicas and the client in one event loop, so that
the whole cost lands in this process's CPU time whatever else the machine runs.

    cd TREE && PYTHONPATH=TREE python PATH/TO/bench/record_cpu.py N whole|stream

TREE is the checkout measured (an earlier commit's exported tree runs this file by its path). 200
warm-up requests, then three rounds of N at concurrency 32; prints the least CPU ms a request of the
rounds. Under ``python -m cProfile`` the header's function-call count is a measure load does not move.
Written for issue 27's record layout (docs/benchmarks.md, "The request record's cost").
"""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
from aiohttp import web

from config.policy import Policy
from gateway.server.app import create_app, runner_for
from sim.config import SimConfig
from sim.fleet import start_replicas


async def main(n: int, conc: int, stream: bool) -> None:
    fleet = await start_replicas([SimConfig(speed=0.0, mode="simple") for _ in range(2)], base_port=0)
    policy = Policy.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
            "health": {"interval_s": 3600, "timeout_s": 5, "fails_to_eject": 2},
            "models": [
                {
                    "name": "sim-llama",
                    "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(fleet.urls)],
                }
            ],
            "billing": {"ledger": {"path": ":memory:"}},
        }
    )
    app = create_app(policy, secret=b"ab")
    runner = runner_for(app, policy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=conc)) as s:

        async def one(i):
            body = {
                "model": "sim-llama",
                "messages": [{"role": "user", "content": f"q {i % 50}"}],
                "max_tokens": 8,
                "stream": stream,
            }
            async with s.post(url, json=body) as r:
                await r.read()

        await asyncio.gather(*(one(i) for i in range(200)))  # warm-up
        best = None
        for _ in range(3):
            c0 = time.process_time()
            sem = asyncio.Semaphore(conc)

            async def lim(i, sem=sem):
                async with sem:
                    await one(i)

            await asyncio.gather(*(lim(i) for i in range(n)))
            cpu = (time.process_time() - c0) / n * 1000
            best = cpu if best is None else min(best, cpu)
        print(f"{'stream' if stream else 'whole'} cpu_ms_per_req={best:.3f}")
    await runner.cleanup()
    await fleet.stop()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), 32, sys.argv[2] == "stream"))
