"""Simulated replicas and a gateway, both on real loopback sockets, inside the test's event loop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from config.policy import Policy
from gateway.process.process import PROCESS, Process
from gateway.process.state import State
from gateway.server.app import create_app, runner_for
from sim.config import SimConfig
from sim.fleet import Fleet, start_replicas

TEST_SECRET = b"test-secret"


@asynccontextmanager
async def sim_fleet(n: int = 2, **cfg: Any) -> AsyncIterator[Fleet]:
    cfg.setdefault("speed", 0.0)
    cfg.setdefault("mode", "simple")  # the fast model: gateway tests do not exercise the engine
    fleet = await start_replicas([SimConfig(**cfg) for _ in range(n)], base_port=0)
    try:
        yield fleet
    finally:
        await fleet.stop()


def policy_for(
    urls: list[str],
    *,
    model: str = "sim-llama",
    routing: dict[str, Any] | None = None,
    backend: str = "vllm",
    **sections: Any,
) -> Policy:
    """A policy in front of ``urls``; ``sections`` override top-level sections (dicts).

    The response cache is off unless a test passes ``cache=...``: proxy tests repeat identical
    deterministic requests and mean every one of them to reach a replica. ``server=...`` is merged
    into the default server section: the metrics listener stays on a port of the kernel's choosing
    (the policy's default, 29000, is one port for the four workers of the suite)."""
    raw: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
        # A probe's timeout past what a loaded machine takes to answer one: the replicas answer on the
        # test's own event loop, and a late probe ejects a live replica and drops its prefix index (one
        # 0.5 s probe did so in test_failover under load 11). No test's replica is found down by a
        # timeout: a stopped one refuses at once, and the simulator's faults never hold /health.
        "health": {"interval_s": 0.2, "timeout_s": 5.0, "fails_to_eject": 2},
        "retries": {"backoff_base_s": 0.0},
        "models": [
            {
                "name": model,
                "backend": backend,
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": routing or {"policy": "round_robin"},
            }
        ],
    }
    raw["cache"] = {"enabled": False}
    raw["billing"] = {"ledger": {"path": ":memory:"}}
    raw["server"].update(sections.pop("server", {}))
    raw.update(sections)
    return Policy.model_validate(raw)


@dataclass
class Gateway:
    url: str
    app: web.Application
    runner: web.AppRunner

    @property
    def process(self) -> Process:
        return self.app[PROCESS]

    @property
    def state(self) -> State:
        return self.app[PROCESS].state

    @property
    def metrics_url(self) -> str:
        """The process's /metrics listener (``server.metrics_port``)."""
        url = self.app[PROCESS].metrics_url
        assert url is not None, "this gateway's policy has no metrics listener"
        return url


@asynccontextmanager
async def gateway(
    policy: Policy,
    secret: bytes = TEST_SECRET,
    *,
    policy_path: str | None = None,
    resolver: Any = None,
    span_exporter: Any = None,
) -> AsyncIterator[Gateway]:
    """A gateway on a free loopback port; ``resolver`` replaces DNS for discovery tests,
    ``span_exporter`` OTLP for tracing tests."""
    app = create_app(policy, secret=secret, policy_path=policy_path, span_exporter=span_exporter)
    if resolver is not None:
        app[PROCESS].resolver = resolver
    runner = runner_for(app, policy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield Gateway(f"http://127.0.0.1:{port}", app, runner)
    finally:
        await runner.cleanup()


async def sim_requests(url: str) -> list[dict[str, Any]]:
    """Bodies the simulator at ``url`` received."""
    async with aiohttp.ClientSession() as s, s.get(url + "/sim/requests") as r:
        return await r.json()


async def sim_generations(url: str) -> list[dict[str, Any]]:
    """The generations the simulator at ``url`` started: request id, tokens, how each ended."""
    async with aiohttp.ClientSession() as s, s.get(url + "/sim/generations") as r:
        return await r.json()


async def sim_stats(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s, s.get(url + "/sim/stats") as r:
        return await r.json()


async def sim_faults(url: str, faults: dict[str, Any]) -> None:
    async with aiohttp.ClientSession() as s, s.post(url + "/sim/faults", json=faults) as r:
        assert r.status == 200, await r.text()
