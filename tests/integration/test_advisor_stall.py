"""The advice replay does not stall the gateway: /health keeps answering while advice is computed.

A real gateway process (``prefix-gateway serve``, advisor at sample rate 1) in front of the simulator
gets one long conversation (150 turns re-sending a growing history: the ring's most expensive replay,
about 1.3 s in-process on this machine); then ``GET /admin/advice`` asks for its first advice while a
probe requests ``/health`` every 20 ms. Before the replay moved off the event loop the longest gap
between two probe answers was the whole replay (measured 1.7 s); with the replay in a worker thread,
50-68 ms (a process pool: 85 ms, and 1-2 s more to start it). The bound: ``MAX_STALL_S`` above the
probe's own longest gap over 40 answers before the advice (this 2-core machine is shared: up to
112 ms measured with nothing computing).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import aiohttp
import orjson
import pytest
import yaml

from bench.advisor import ADMIN_TOKEN, api_key, policy_dict
from bench.advisor_apps import apps, interleave
from bench.procs import start_gateway, start_sim
from tests.fault.support import wait_for

APP = "long_conversation"
REQUESTS = 150
PROBE_EVERY_S = 0.02
MAX_STALL_S = 0.1  # the longest gap between two /health answers while advice is computed


async def _send_traffic(session: aiohttp.ClientSession, url: str) -> None:
    lays = [a for a in apps(1) if a.name == APP]
    for tenant, body in interleave(lays, REQUESTS, lambda a: "as_is", 1):
        async with session.post(
            url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {api_key(tenant)}"}
        ) as r:
            await r.read()
            assert r.status == 200


async def _probe(session: aiohttp.ClientSession, url: str, answers: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        async with session.get(url + "/health") as r:
            await r.read()
            assert r.status == 200
        answers.append(time.perf_counter())
        await asyncio.sleep(PROBE_EVERY_S)


@pytest.mark.slow
async def test_health_answers_while_advice_is_computed(tmp_path: Path) -> None:
    sim, urls = await asyncio.to_thread(
        start_sim,
        1,
        extra=["--speed", "0", "--kv-capacity-blocks", "65536"],
        log_path=str(tmp_path / "sim.log"),
    )
    gw = None
    try:
        cfg = tmp_path / "gw.yaml"
        cfg.write_text(yaml.safe_dump(policy_dict(urls, [APP], str(tmp_path / "ledger.db"), advisor=True)))
        gw = await asyncio.to_thread(
            start_gateway,
            ["--config", str(cfg)],
            env={"PREFIX_GATEWAY_SECRET": "stall", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
            log_path=str(tmp_path / "gw.log"),
        )
        timeout = aiohttp.ClientTimeout(total=60)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await _send_traffic(session, gw.url)
            answers: list[float] = []
            stop = asyncio.Event()
            probe = asyncio.create_task(_probe(session, gw.url, answers, stop))
            while len(answers) < 40:  # the probe's own longest gap, on this (shared) machine, first
                await asyncio.sleep(PROBE_EVERY_S)
            started = time.perf_counter()
            async with session.get(
                gw.url + "/admin/advice", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ) as r:
                assert r.status == 200
                doc = await r.json(loads=orjson.loads)
            ended = time.perf_counter()
            await wait_for(lambda: answers[-1] > ended)  # one more answer after the advice's
            stop.set()
            await probe
        (tenant,) = doc["advice"]["tenants"]
        (model,) = tenant["models"]
        assert model["observed"]["requests"] == REQUESTS
        assert model["priced"]["requests"] == REQUESTS and not model["priced"]["computing"]  # whole ring
        around = [t for t in answers if t >= started]
        around.insert(0, max(t for t in answers if t < started))
        assert around[-1] > ended, "the probe stopped before the advice was answered"
        stall = max(b - a for a, b in itertools.pairwise(around))
        before = [t for t in answers if t < started]
        noise = max(b - a for a, b in itertools.pairwise(before))
        assert ended - started > 0.2, "the advice was not computed during this request"
        assert stall <= MAX_STALL_S + noise, (
            f"/health waited {stall * 1000:.0f} ms while advice was computed "
            f"(its longest wait before: {noise * 1000:.0f} ms)"
        )
    finally:
        if gw is not None:
            await asyncio.to_thread(gw.stop)
        await asyncio.to_thread(sim.stop)
