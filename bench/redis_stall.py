"""A stalled Redis under load: the gateway's latency before, during and after a SIGSTOP of its Redis.

    python -m bench.redis_stall                           # 5 s / 10 s stopped / 5 s, writes docs/operations.md
    python -m bench.redis_stall --baseline /path/to/old-checkout --no-write   # the same, side by side

One real ``redis-server`` (the response cache, coalescing, buckets, explicit registry and the billing
ledger all in it), simulated replicas and the gateway as processes on loopback. Closed-loop load at
``--concurrency``: half the requests cacheable (``temperature 0``, drawn from ``--keys`` distinct
prompts, so hits, misses and coalescing all happen), half not (sampled). Redis is stopped with
SIGSTOP (a partition, not a crash: its sockets stay open and nothing answers) for ``--stall-s`` and
resumed with SIGCONT. Per phase and kind: completed requests, p50 and p99 latency, failures; after the
run, the ledger rows against the requests answered 200 (refused rows wait in the gateway's queue and
are written once Redis answers). With ``--baseline`` another checkout's gateway (e.g. main before the
Redis breaker) runs the same scenario right after, on a fresh Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import redis.asyncio as aioredis
import yaml

from bench.procs import running, start_gateway, start_sim
from bench.redis_server import RedisServer
from bench.report import percentile, table, write_section
from cache.billing.ledger_redis import RedisLedger

JSON = {"Content-Type": "application/json"}
PHASES = ("before", "stalled", "after")
KINDS = ("cacheable", "uncacheable")


@dataclass
class Sample:
    started: float
    latency_s: float
    kind: str
    status: int
    cache: str | None


@dataclass
class StallResult:
    label: str
    stall_s: float
    samples: list[Sample] = field(default_factory=list)
    marks: dict[str, float] = field(default_factory=dict)  # phase -> start time
    ledger_rows: int = 0
    ledger_wait_s: float = 0.0
    metrics: str = ""  # the gateway's /metrics after the run (when it has a metrics listener)

    def phase_of(self, t: float) -> str:
        if t < self.marks["stalled"]:
            return "before"
        return "stalled" if t < self.marks["after"] else "after"

    def select(self, phase: str, kind: str) -> list[Sample]:
        return [s for s in self.samples if s.kind == kind and self.phase_of(s.started) == phase]

    def failures(self) -> int:
        return sum(1 for s in self.samples if s.status != 200)

    def answered(self) -> int:
        return sum(1 for s in self.samples if s.status == 200)

    def p50_ms(self, phase: str, kind: str) -> float:
        done = [s.latency_s for s in self.select(phase, kind) if s.status == 200]
        return percentile(done, 50) * 1000 if done else float("nan")

    def rows(self) -> list[list[object]]:
        out: list[list[object]] = []
        for phase in PHASES:
            for kind in KINDS:
                picked = self.select(phase, kind)
                done = [s.latency_s * 1000 for s in picked if s.status == 200]
                hits = sum(1 for s in picked if s.cache == "hit")
                out.append(
                    [
                        self.label,
                        phase,
                        kind,
                        len(done),
                        f"{percentile(done, 50):.1f}" if done else "-",
                        f"{percentile(done, 99):.1f}" if done else "-",
                        len(picked) - len(done),
                        hits if kind == "cacheable" else "",
                    ]
                )
        return out


def policy_yaml(urls: list[str], redis_url: str) -> str:
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False, "log_level": "error"},
        "health": {"interval_s": 1.0},
        "redis": {"url": redis_url},
        "cache": {"enabled": True},
        "billing": {"ledger": {"kind": "redis"}},
        "models": [
            {
                "name": "sim-llama",
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "prefix_affinity"},
            }
        ],
    }
    return yaml.safe_dump(policy)


async def _load(
    url: str, result: StallResult, stop_at: float, concurrency: int, keys: int, seed: int
) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    counter = iter(range(10**9))

    async def worker(w: int) -> None:
        for i in counter:
            if time.perf_counter() >= stop_at:
                return
            cacheable = (i + w) % 2 == 0
            body: dict[str, object] = {"model": "sim-llama", "max_tokens": 8}
            if cacheable:
                body["temperature"] = 0
                body["messages"] = [{"role": "user", "content": f"question {(i * 7919 + seed) % keys}"}]
            else:
                body["messages"] = [{"role": "user", "content": f"worker {w} request {i}"}]
            t0 = time.perf_counter()
            status, cache = 0, None
            try:
                async with session.post(
                    url + "/v1/chat/completions", data=orjson.dumps(body), headers=JSON
                ) as r:
                    await r.read()
                    status, cache = r.status, r.headers.get("x-cache")
            except (TimeoutError, aiohttp.ClientError):
                status = -1
            result.samples.append(
                Sample(
                    t0, time.perf_counter() - t0, "cacheable" if cacheable else "uncacheable", status, cache
                )
            )

    try:
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
    finally:
        await session.close()


async def _ledger_rows(redis_url: str) -> int:
    client = aioredis.from_url(redis_url)
    try:
        rows = await RedisLedger(client).query(group_by=())
        return rows[0].requests if rows else 0
    finally:
        await client.aclose()


async def scenario(
    label: str,
    *,
    before_s: float,
    stall_s: float,
    after_s: float,
    concurrency: int,
    keys: int,
    checkout: str | None = None,
    ledger_wait_s: float = 30.0,
) -> StallResult:
    """One gateway (this checkout's, or ``checkout``'s) on a fresh Redis: load, SIGSTOP, SIGCONT."""
    server = RedisServer()
    server.start()
    result = StallResult(label, stall_s)
    try:
        sim, urls = start_sim(2, extra=["--speed", "0"])
        with running(sim), tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "policy.yaml"
            path.write_text(policy_yaml(urls, server.url))
            gw = start_gateway(
                ["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "stall"}, checkout=checkout
            )
            with running(gw):
                assert server.proc is not None
                t0 = time.perf_counter()
                result.marks = {"before": t0, "stalled": t0 + before_s, "after": t0 + before_s + stall_s}
                end = t0 + before_s + stall_s + after_s
                load = asyncio.create_task(_load(gw.url, result, end, concurrency, keys, seed=7))
                await asyncio.sleep(result.marks["stalled"] - time.perf_counter())
                os.kill(server.proc.pid, signal.SIGSTOP)
                try:
                    await asyncio.sleep(result.marks["after"] - time.perf_counter())
                finally:
                    os.kill(server.proc.pid, signal.SIGCONT)
                await load
                # Rows refused while Redis was stopped wait in the gateway's queue: wait for them.
                waited = time.perf_counter()
                while True:
                    result.ledger_rows = await _ledger_rows(server.url)
                    if (
                        result.ledger_rows >= result.answered()
                        or time.perf_counter() - waited > ledger_wait_s
                    ):
                        break
                    await asyncio.sleep(0.25)
                result.ledger_wait_s = time.perf_counter() - waited
                if gw.metrics_url is not None:
                    async with aiohttp.ClientSession() as s, s.get(gw.metrics_url + "/metrics") as r:
                        result.metrics = await r.text()
    finally:
        if server.proc is not None and server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)
        server.stop()
    return result


def render(results: list[StallResult], command: str, concurrency: int, keys: int) -> str:
    rows = [row for r in results for row in r.rows()]
    lines = [
        f"`{command}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores), "
        f"{time.strftime('%Y-%m-%d')}: concurrency {concurrency}, {keys} distinct cacheable prompts, "
        f"Redis SIGSTOPped for {results[0].stall_s:g} s.",
        "",
        table(
            ["gateway", "phase", "requests", "completed", "p50 ms", "p99 ms", "failed", "cache hits"],
            rows,
        ),
        "",
    ]
    for r in results:
        lines.append(
            f"- {r.label}: {r.answered()} answered 200, {r.failures()} failed; ledger rows "
            f"{r.ledger_rows} ({r.ledger_wait_s:.1f} s after the load to catch up)."
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--before-s", type=float, default=5.0)
    p.add_argument("--stall-s", type=float, default=10.0)
    p.add_argument("--after-s", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--keys", type=int, default=50)
    p.add_argument("--baseline", help="another checkout (e.g. a worktree of main) to run the same way")
    p.add_argument("--no-write", action="store_true", help="print only; do not update docs/operations.md")
    args = p.parse_args(argv)
    common = {
        "before_s": args.before_s,
        "stall_s": args.stall_s,
        "after_s": args.after_s,
        "concurrency": args.concurrency,
        "keys": args.keys,
    }
    results = [asyncio.run(scenario("this checkout", **common))]
    if args.baseline:
        results.append(asyncio.run(scenario("baseline", checkout=args.baseline, **common)))
    command = "python -m bench.redis_stall " + " ".join(argv if argv is not None else sys.argv[1:])
    md = render(results, command.strip(), args.concurrency, args.keys)
    print(md)
    if not args.no_write:
        write_section("redis-stall", md, Path(__file__).resolve().parent.parent / "docs" / "operations.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
