"""Real gateway processes: SIGTERM under load drains without cutting a request and exits 0; SIGHUP
reloads the policy file (an invalid one is refused); ``--workers 2`` shares one port."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import aiohttp
import httpx
import yaml

from bench.procs import free_port, free_ports, running, start_gateway, start_sim
from tests.fault.support import WAIT_S

ADMIN_TOKEN = "lifecycle-token"
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
ENV = {"PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN, "PREFIX_GATEWAY_SECRET": "lifecycle-secret"}


def write_policy(path: Path, urls: list[str], **sections: object) -> None:
    raw: dict[str, object] = {
        "server": {
            "host": "127.0.0.1",
            "port": 0,
            "metrics_port": 0,
            "access_log": False,
            "drain_timeout_s": 15,
        },
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [
            {
                "name": "sim-llama",
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "least_load"},
            }
        ],
    }
    raw.update(sections)
    path.write_text(yaml.safe_dump(raw))


def metric(url: str, needle: str) -> float:
    for line in httpx.get(url + "/metrics", timeout=5).text.splitlines():
        if line.startswith(needle + " "):
            return float(line.split()[-1])
    return 0.0


async def _one(s: aiohttp.ClientSession, url: str, i: int) -> tuple[int, bool]:
    stream = i % 2 == 0
    body = {
        "model": "sim-llama",
        "messages": [{"role": "user", "content": f"drain me {i}"}],
        "max_tokens": 20,
        "stream": stream,
    }
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        raw = await r.read()
    complete = raw.rstrip().endswith(b"data: [DONE]") if stream else b'"finish_reason"' in raw
    return r.status, complete


async def _in_replicas(s: aiohttp.ClientSession, urls: list[str], n: int, limit_s: float) -> None:
    """Until the simulator's replicas received ``n`` requests (its monotonic count), bounded."""
    deadline = time.monotonic() + limit_s
    while True:
        got = 0
        for u in urls:
            async with s.get(u + "/sim/stats") as r:
                got += (await r.json())["requests"]
        if got >= n:
            return
        assert time.monotonic() < deadline, f"{got} of {n} requests reached the replicas"
        await asyncio.sleep(0.02)


async def _refused_within(url: str, limit_s: float) -> bool:
    """Whether a new connection to ``url`` is refused within ``limit_s`` (the listener closed)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        try:
            async with aiohttp.ClientSession() as fresh, fresh.get(url + "/health") as r:
                await r.read()
        except aiohttp.ClientConnectionError:
            return True
        await asyncio.sleep(0.02)
    return False


def test_sigterm_under_load_finishes_every_request_and_exits_0(tmp_path: Path) -> None:
    sim, urls = start_sim(
        2, extra=["--mode", "simple", "--speed", "1", "--decode-s-per-token", "0.05", "--overhead-s", "0"]
    )
    with running(sim):
        path = tmp_path / "policy.yaml"
        write_policy(path, urls)
        gw = start_gateway(["--config", str(path)], env=ENV)
        with running(gw):

            async def scenario() -> tuple[list[tuple[int, bool]], bool, float]:
                async with aiohttp.ClientSession() as s:
                    tasks = [asyncio.create_task(_one(s, gw.url, i)) for i in range(32)]
                    # All 32 reached the replicas (each takes about 1 s) before the signal: a request still
                    # connecting when the listener closes would be refused, which is not what is tested.
                    await _in_replicas(s, urls, 32, limit_s=20)
                    t0 = time.monotonic()
                    gw.popen.send_signal(signal.SIGTERM)
                    refused = await _refused_within(gw.url, limit_s=5)
                    results = await asyncio.gather(*tasks)
                    return results, refused, time.monotonic() - t0

            results, refused, _ = asyncio.run(scenario())
            code = gw.popen.wait(20)
        assert code == 0
        assert refused, "a new connection was accepted after SIGTERM"
        assert [r for r in results if r != (200, True)] == []


def test_sighup_reloads_the_file_and_refuses_a_broken_one(tmp_path: Path) -> None:
    sim, urls = start_sim(2)
    with running(sim):
        path = tmp_path / "policy.yaml"
        write_policy(path, urls[:1])
        gw = start_gateway(["--config", str(path)], env=ENV)
        with running(gw):
            path.write_text("models: [broken")
            gw.popen.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + WAIT_S  # both reloads: a policy's build, seconds when starved
            while metric(gw.metrics_url, 'prefix_gateway_config_reloads_total{result="invalid"}') < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            write_policy(path, urls)
            gw.popen.send_signal(signal.SIGHUP)
            while metric(gw.metrics_url, 'prefix_gateway_config_reloads_total{result="ok"}') < 1:
                assert time.monotonic() < deadline
                time.sleep(0.05)
            rows = httpx.get(gw.url + "/admin/replicas", headers=ADMIN, timeout=5).json()
            assert [r["id"] for r in rows["models"]["sim-llama"]["replicas"]] == ["r0", "r1"]
            assert gw.popen.poll() is None
            assert gw.stop() == 0


def test_two_workers_share_the_port_and_stop_together(tmp_path: Path) -> None:
    sim, urls = start_sim(1)
    with running(sim):
        path = tmp_path / "policy.yaml"
        write_policy(path, urls)
        metrics = free_ports(2)
        args = ["--config", str(path), "--workers", "2", "--metrics-port", str(metrics[0])]
        gw = start_gateway(args, env=ENV, port=free_port())
        with running(gw):
            pids: set[int] = set()
            deadline = time.monotonic() + 60  # a worker's start is seconds of CPU on a loaded machine
            with fresh_connections() as c:  # a new connection each time: the kernel spreads them
                while len(pids) < 2 and time.monotonic() < deadline:
                    r = c.get(gw.url + "/admin/debug", headers=ADMIN, timeout=5)
                    if r.status_code == 200:
                        pids.add(r.json()["pid"])
            assert len(pids) == 2 and gw.pid not in pids
            for port in metrics:  # worker i: its own metrics listener on metrics_port + i
                scraped = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5)
                assert scraped.status_code == 200 and "prefix_gateway_" in scraped.text
            r = httpx.post(
                gw.url + "/v1/chat/completions",
                json={"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}]},
                timeout=10,
            )
            assert r.status_code == 200
            # a worker killed outright is replaced by the supervisor
            victim = next(iter(pids))
            os.kill(victim, signal.SIGKILL)
            deadline = time.monotonic() + 60
            while not (pids - {victim}) < _worker_pids(gw.url) and time.monotonic() < deadline:
                time.sleep(0.05)
            now = _worker_pids(gw.url)
            assert victim not in now and len(now | pids) == 3
            pids |= now
            assert gw.stop() == 0
        for pid in pids:
            deadline = time.monotonic() + 5
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not _alive(pid)


def _worker_pids(url: str, tries: int = 40) -> set[int]:
    """Pids answering on the port over ``tries`` new connections."""
    seen = set()
    with fresh_connections() as c:
        for _ in range(tries):
            try:
                r = c.get(url + "/admin/debug", headers=ADMIN, timeout=2)
                if r.status_code == 200:
                    seen.add(r.json()["pid"])
            except httpx.HTTPError:
                pass
    return seen


def fresh_connections() -> httpx.Client:
    """One client whose every request opens a new connection (no keep-alive): SO_REUSEPORT spreads
    connections, not requests, over the workers. One client, not one per request: building a client
    loads the CA bundle, 0.1 s of CPU each on a loaded machine (40 of them a call here)."""
    return httpx.Client(limits=httpx.Limits(max_keepalive_connections=0))


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False
