"""The files one chat request's data visits, in call order, and how often it comes back to a file it
had left (issue 27: "a walk of one request visits 28 files with 50 returns").

    python scripts/request_walk.py [--list]

Run from the checkout to measure, with it on ``PYTHONPATH`` (an earlier commit: its exported tree as
the working directory and on ``PYTHONPATH``, this script by its path). Two simulated replicas and a
gateway in this process (as ``tests.support.stack`` starts them, which tooling may not import: the
response cache on, the ledger in memory, health checks far apart so that no background loop runs
during a request); one warm-up request
of each kind, then one non-streamed and one streamed chat request (a cache miss each), each under
``sys.setprofile``. Every Python ``call`` event whose code lives under ``gateway/`` is one step (a
coroutine resumed after an ``await`` is a ``call`` too: each frame of the awaiting stack re-enters); the
walk is the steps' files with repeats of the file just before merged. A file is *visited* once however
often; a *return* is a step into a file the walk had already left. ``--list`` prints the walk.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

import gateway
from config.policy import Policy
from gateway.server.app import create_app, runner_for
from sim.config import SimConfig
from sim.fleet import start_replicas

GATEWAY = Path(gateway.__file__).resolve().parent
ROOT = GATEWAY.parent
CONTEXT = "gateway/pipeline/context.py"  # the record's properties (derived fields) are calls too


def _walk(files: list[str]) -> tuple[list[str], int]:
    merged: list[str] = []
    for f in files:
        if not merged or merged[-1] != f:
            merged.append(f)
    seen: set[str] = set()
    returns = 0
    for f in merged:
        if f in seen:
            returns += 1
        seen.add(f)
    return merged, returns


async def _one(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> list[str]:
    steps: list[str] = []
    cache: dict[str, str | None] = {}

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event != "call":
            return
        name = frame.f_code.co_filename
        rel = cache.get(name, "")
        if rel == "":
            rel = str(Path(name).resolve().relative_to(ROOT)) if name.startswith(str(GATEWAY)) else None
            cache[name] = rel
        if rel is not None:
            steps.append(rel)

    sys.setprofile(profile)
    try:
        async with session.post(url + "/v1/chat/completions", json=body) as r:
            await r.read()
            assert r.status == 200, r.status
        await asyncio.sleep(0.05)  # the ledger row is written in a task of its own: let it finish
    finally:
        sys.setprofile(None)
    return steps


async def main(show: bool) -> None:
    fleet = await start_replicas([SimConfig(speed=0.0, mode="simple") for _ in range(2)], base_port=0)
    policy = Policy.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
            "health": {"interval_s": 3600, "timeout_s": 5, "fails_to_eject": 2},
            "retries": {"backoff_base_s": 0.0},
            "models": [
                {
                    "name": "sim-llama",
                    "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(fleet.urls)],
                    "routing": {"policy": "round_robin"},
                }
            ],
            "billing": {"ledger": {"path": ":memory:"}},
        }
    )
    app = create_app(policy, secret=b"walk-secret")
    runner = runner_for(app, policy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        async with aiohttp.ClientSession() as session:
            for n, stream in enumerate((False, True, False, True)):
                body = {
                    "model": "sim-llama",
                    "messages": [{"role": "user", "content": f"walk {n}: say something"}],
                    "max_tokens": 8,
                    "stream": stream,
                }
                steps = await _one(session, url, body)
                if n < 2:
                    continue  # warm-up: first calls import and build what later ones reuse
                merged, returns = _walk(steps)
                kind = "streamed" if stream else "non-streamed"
                inside = [f for f in merged if f != CONTEXT]
                print(
                    f"{kind}: {len(set(merged))} files visited, {returns} returns to a file already left "
                    f"({_walk(inside)[1]} without the record's own accessors in {CONTEXT})"
                )
                if show:
                    print(
                        "    "
                        + " > ".join(
                            Path(f).with_suffix("").as_posix().removeprefix("gateway/") for f in merged
                        )
                    )
    finally:
        await runner.cleanup()
        await fleet.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--list", action="store_true", help="print the walk")
    asyncio.run(main(parser.parse_args().list))
