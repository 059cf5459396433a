"""Tenant-fair admission across real processes: a simulator process, a ``prefix-gateway serve``
process with a fairness policy file, the real ``openai`` client. The order the replica received
requests in (its ``/sim/requests``) and the gateway's own ``/metrics`` are what is asserted."""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from bench.procs import Proc, running, start_gateway, start_sim

KEYS = {"flood": "sk-flood-proc", "calm": "sk-calm-proc"}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Proc, str]]:
    # one replica, ~0.5 s a request of 5 tokens: the flood's requests hold its one slot in turn
    sim, urls = start_sim(1, extra=["--mode", "simple", "--speed", "1", "--decode-s-per-token", "0.1"])
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0], "id": "r0"}]}],
        "tenancy": {
            "allow_anonymous": False,
            "tenants": [
                {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
            ],
        },
        "fairness": {
            "enabled": True,
            "slots_per_replica": 1,
            "tenants": [
                {"id": "flood", "max_priority": "standard"},
                {"id": "calm", "max_priority": "interactive"},
            ],
        },
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    with running(sim):
        gw = start_gateway(["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "fair-secret-0123456789"})
        with running(gw):
            yield gw, urls[0]


def _depth(gw: Proc) -> float:
    assert gw.metrics_url is not None
    text = httpx.get(gw.metrics_url + "/metrics", timeout=5).text
    return sum(float(v) for v in re.findall(r"^prefix_gateway_fair_queue_depth\{[^}]*\} (\S+)$", text, re.M))


async def _until(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await asyncio.to_thread(cond):
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.01)


async def test_across_processes_a_flood_does_not_starve_calm_and_objectives_and_caps_hold(stack) -> None:
    gw, sim_url = stack
    flood = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=KEYS["flood"], max_retries=0)
    calm = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=KEYS["calm"], max_retries=0)

    def ask(client, text: str, **kw):
        return client.chat.completions.with_raw_response.create(
            model="sim-llama", messages=[{"role": "user", "content": text}], max_tokens=5, **kw
        )

    try:
        floods = [
            asyncio.create_task(ask(flood, f"flood {i}", extra_headers={"x-gateway-priority": "interactive"}))
            for i in range(10)
        ]
        await _until(lambda: _depth(gw) >= 6)
        with pytest.raises(openai.RateLimitError) as err:  # impossible objective: at once, never queued
            await ask(calm, "too soon", extra_headers={"x-gateway-ttft-ms": "1"})
        assert int(err.value.response.headers["retry-after"]) >= 1
        assert err.value.response.json()["error"]["code"] == "ttft_objective_unattainable"
        queued = await asyncio.to_thread(_depth, gw)  # the flood's waiters calm arrives behind
        answer = await ask(calm, "calm")
        assert answer.headers["x-gateway-priority"] == "standard"  # calm named none: the default class
        done = await asyncio.gather(*floods)
        assert {r.headers["x-gateway-priority"] for r in done} == {"standard"}  # capped at its ceiling
    finally:
        await flood.close()
        await calm.close()
    bodies = httpx.get(sim_url + "/sim/requests", timeout=5).json()
    order = [b["messages"][0]["content"] for b in bodies]
    assert "too soon" not in order and len(order) == 11
    # calm arrived behind `queued` waiting flood requests and was released within two slots: most of
    # them reached the replica after it (a FIFO, the feature off, sends it after every one of them)
    after = len(order) - 1 - order.index("calm")
    assert queued >= 4 and after >= queued - 3, (queued, order)
