"""Soak: many requests at high concurrency through a gateway *process* in front of simulated replicas
(speed 0), checking that nothing leaks.

    python -m bench.soak                      # 50,000 requests at concurrency 128, writes docs/benchmarks.md
    python -m bench.soak --requests 5000 --no-write

Figures: errors (any non-200 or incomplete answer), RSS of the gateway after a warm-up and at the end,
asyncio tasks (``GET /admin/debug``) and TCP connections of the gateway process (psutil) at rest after
the warm-up and after the run. Requests mix streams and whole answers, and prompts share prefixes (64
conversations) so routing, the prefix index, the response cache's bypass path and billing all work.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx
import psutil
import yaml

from bench.procs import running, start_gateway, start_sim
from bench.report import percentile, table, write_section

ADMIN_TOKEN = "soak-admin-token"
MB = 1024 * 1024


@dataclass
class Snapshot:
    rss_mb: float
    tasks: int
    connections: int
    client_connections: int


@dataclass
class SoakResult:
    requests: int
    concurrency: int
    warmup: int
    errors: int
    wall_s: float
    replicas: int = 2
    latencies: list[float] = field(default_factory=list)
    warm: Snapshot | None = None
    end: Snapshot | None = None
    peak_rss_mb: float = 0.0
    error_samples: list[str] = field(default_factory=list)

    @property
    def rps(self) -> float:
        return self.requests / self.wall_s if self.wall_s else 0.0

    @property
    def rss_growth_mb(self) -> float:
        assert self.warm and self.end
        return self.end.rss_mb - self.warm.rss_mb


def policy_yaml(urls: list[str], ledger_path: str) -> str:
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False, "log_level": "warning"},
        "health": {"interval_s": 1.0},
        "limits": {"max_concurrent_requests": 1024},
        "billing": {"ledger": {"path": ledger_path}},
        "models": [
            {
                "name": "sim-llama",
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "prefix_affinity"},
            }
        ],
    }
    return yaml.safe_dump(policy)


def body(i: int) -> dict:
    conv = i % 64
    turns = 1 + (i // 64) % 6
    messages = [{"role": "system", "content": f"You are assistant number {conv}. " * 8}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"question {t} of conversation {conv}: tell me more"})
    return {"model": "sim-llama", "messages": messages, "max_tokens": 8, "stream": i % 2 == 0}


def snapshot(url: str, pid: int) -> Snapshot:
    proc = psutil.Process(pid)
    debug = httpx.get(
        url + "/admin/debug", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}, timeout=10
    ).json()
    conns = proc.net_connections(kind="tcp") if hasattr(proc, "net_connections") else proc.connections("tcp")
    established = [c for c in conns if c.status == psutil.CONN_ESTABLISHED]
    return Snapshot(
        rss_mb=proc.memory_info().rss / MB,
        tasks=int(debug["tasks"]),
        connections=len(established),
        client_connections=int(debug["client_connections"] or 0),
    )


async def drive(url: str, start: int, count: int, concurrency: int, result: SoakResult, pid: int) -> None:
    """``count`` requests numbered from ``start`` with ``concurrency`` workers on one client session
    (closed at the end, so its connections leave the gateway's count)."""
    counter = iter(range(start, start + count))
    proc = psutil.Process(pid)
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as s:

        async def worker() -> None:
            for i in counter:
                t0 = time.perf_counter()
                b = body(i)
                try:
                    async with s.post(url + "/v1/chat/completions", json=b) as r:
                        raw = await r.read()
                        status = r.status
                except (aiohttp.ClientError, TimeoutError) as exc:
                    result.errors += 1
                    if len(result.error_samples) < 5:
                        result.error_samples.append(f"{type(exc).__name__}: {exc}")
                    continue
                ok = status == 200 and (
                    raw.rstrip().endswith(b"data: [DONE]") if b["stream"] else b'"finish_reason"' in raw
                )
                if ok:
                    result.latencies.append(time.perf_counter() - t0)
                else:
                    result.errors += 1
                    if len(result.error_samples) < 5:
                        result.error_samples.append(f"{status}: {raw[:200]!r}")

        async def sample_rss() -> None:
            while True:
                result.peak_rss_mb = max(result.peak_rss_mb, proc.memory_info().rss / MB)
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample_rss())
        try:
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        finally:
            sampler.cancel()


def run(
    requests: int = 50_000,
    concurrency: int = 128,
    warmup: int = 5_000,
    replicas: int = 2,
    log_path: str | None = None,
) -> SoakResult:
    try:
        import uvloop

        loop_factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover
        loop_factory = None
    with tempfile.TemporaryDirectory() as tmp:
        sim, urls = start_sim(replicas, log_path=log_path)
        with running(sim):
            path = Path(tmp) / "policy.yaml"
            path.write_text(policy_yaml(urls, str(Path(tmp) / "ledger.db")))
            env = {"PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN, "PREFIX_GATEWAY_SECRET": "soak-secret"}
            gw = start_gateway(["--config", str(path)], env=env, log_path=log_path)
            with running(gw):
                result = SoakResult(requests, concurrency, warmup, 0, 0.0, replicas)
                with asyncio.Runner(loop_factory=loop_factory) as runner:
                    runner.run(drive(gw.url, 0, warmup, concurrency, result, gw.pid))
                    time.sleep(1.0)  # let keep-alive closes and finished tasks settle
                    result.warm = snapshot(gw.url, gw.pid)
                    result.latencies.clear()
                    warm_errors, result.errors = result.errors, 0
                    t0 = time.perf_counter()
                    runner.run(drive(gw.url, warmup, requests, concurrency, result, gw.pid))
                    result.wall_s = time.perf_counter() - t0
                    result.errors += warm_errors
                    time.sleep(1.0)
                    result.end = snapshot(gw.url, gw.pid)
                if gw.stop() != 0:
                    result.errors += 1
                    result.error_samples.append("gateway did not exit 0 on SIGTERM")
    return result


def connection_bound(result: SoakResult) -> int:
    """Most TCP connections a leak-free gateway process holds at rest: upstream keep-alive connections
    are pooled per replica, each pool never larger than the requests once in flight to that replica
    (at most the concurrency), plus each replica's health check and scrape, plus the measuring request.
    Whatever the number of requests: a leak of one connection per few hundred requests exceeds it."""
    return result.concurrency * result.replicas + 2 * result.replicas + 2


def check(result: SoakResult, max_rss_growth_mb: float = 50.0) -> list[str]:
    """What is wrong with a soak's figures (empty: it passed)."""
    problems = []
    assert result.warm and result.end
    if result.errors:
        problems.append(f"{result.errors} errors, e.g. {result.error_samples}")
    if len(result.latencies) != result.requests:
        problems.append(f"{len(result.latencies)} of {result.requests} requests completed")
    if result.rss_growth_mb >= max_rss_growth_mb:
        problems.append(f"RSS grew {result.rss_growth_mb:.1f} MB after warm-up")
    if result.end.tasks > result.warm.tasks + 2:
        problems.append(f"asyncio tasks {result.warm.tasks} -> {result.end.tasks}")
    if result.end.client_connections > 1:  # the /admin/debug request itself
        problems.append(f"{result.end.client_connections} client connections left open")
    bound = connection_bound(result)
    if result.end.connections > bound:
        problems.append(f"{result.end.connections} TCP connections at rest (bound {bound})")
    return problems


def markdown(result: SoakResult, command: str) -> str:
    assert result.warm and result.end
    lat = sorted(result.latencies) or [0.0]
    rows: list[list[object]] = [
        ["requests (after warm-up)", f"{result.requests:,}"],
        ["warm-up requests", f"{result.warmup:,}"],
        ["concurrency", result.concurrency],
        ["errors", result.errors],
        ["wall time", f"{result.wall_s:.1f} s"],
        ["throughput", f"{result.rps:,.0f} req/s"],
        ["latency p50 / p99", f"{percentile(lat, 50) * 1000:.1f} / {percentile(lat, 99) * 1000:.1f} ms"],
        [
            "gateway RSS after warm-up / end / peak",
            f"{result.warm.rss_mb:.1f} / {result.end.rss_mb:.1f} / {result.peak_rss_mb:.1f} MB",
        ],
        ["RSS growth after warm-up", f"{result.rss_growth_mb:+.1f} MB (limit 50 MB)"],
        ["asyncio tasks at rest, after warm-up / end", f"{result.warm.tasks} / {result.end.tasks}"],
        [
            "client connections at rest, after warm-up / end",
            f"{result.warm.client_connections} / {result.end.client_connections}",
        ],
        [
            "TCP connections of the process (established, upstream pool included), after warm-up / end",
            f"{result.warm.connections} / {result.end.connections} "
            f"(bound: concurrency x replicas + 2 x replicas + 2 = {connection_bound(result)})",
        ],
    ]
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"
    problems = check(result)
    verdict = "**PASS**" if not problems else "**FAIL**: " + "; ".join(problems)
    return (
        "## Soak\n\n"
        f"`{command}` on {machine}. One gateway process (uvloop) in front of simulated replicas at speed 0, "
        "driven by one client process on the same machine; half the requests stream. Connections and "
        "tasks are counted at rest, one second after each phase, the client session closed.\n\n"
        + table(["figure", "value"], rows)
        + f"\n\n{verdict}\n"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=50_000)
    p.add_argument("--concurrency", type=int, default=128)
    p.add_argument("--warmup", type=int, default=5_000)
    p.add_argument("--replicas", type=int, default=2)
    p.add_argument("--no-write", action="store_true", help="print only; do not update docs/benchmarks.md")
    p.add_argument("--log", help="append the processes' logs to this file")
    args = p.parse_args(argv)
    result = run(args.requests, args.concurrency, args.warmup, args.replicas, args.log)
    command = "python -m bench.soak" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    md = markdown(result, command.strip())
    print(md)
    if not args.no_write:
        write_section("soak", md)
    return 0 if not check(result) else 1


if __name__ == "__main__":
    raise SystemExit(main())
