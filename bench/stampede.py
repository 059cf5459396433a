"""A stampede against a cold cache: N identical requests at once, and what reaches the fleet.

    python -m bench.stampede [--requests 1000] [--write]

(a) one gateway process; (b) two gateway processes sharing one Redis (requests alternate between them).
Reports the generations the simulator performed (target: exactly 1 per scenario), the leader's latency,
follower p50/p99 as a ratio of it, and a second wave of the same N requests answered from the cache.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import httpx
import yaml

from bench.procs import running, start_gateway, start_sim
from bench.redis_server import RedisServer
from bench.report import percentile, table, write_section

BODY = {
    "model": "sim-llama",
    "temperature": 0,
    "max_tokens": 16,
    "messages": [{"role": "user", "content": "The question everybody asks at 9:00 sharp."}],
}


async def wave(urls: list[str], n: int) -> list[tuple[float, str, int]]:
    """``n`` identical requests released together; (latency, x-cache, status) each."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=120)) as s:
        gate = asyncio.Event()

        async def one(i: int) -> tuple[float, str, int]:
            await gate.wait()
            t0 = time.perf_counter()
            async with s.post(urls[i % len(urls)] + "/v1/chat/completions", json=BODY) as r:
                await r.read()
                return time.perf_counter() - t0, r.headers.get("x-cache", "?"), r.status

        tasks = [asyncio.create_task(one(i)) for i in range(n)]
        await asyncio.sleep(0.2)
        gate.set()
        return await asyncio.gather(*tasks)


def generations(sim_url: str) -> int:
    return httpx.get(sim_url + "/sim/stats").json()["requests"]


def scenario(name: str, gateways: int, n: int, redis_url: str | None, tmp: Path) -> list[object]:
    sim, urls = start_sim(
        1, extra=["--mode", "simple", "--decode-s-per-token", "0.02", "--overhead-s", "0.01"]
    )
    raw = {
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0]}]}],
        "cache": {"enabled": True, "key_bucket": {"capacity": 10, "refill_per_s": 1}},
        "billing": {"ledger": {"path": ":memory:"}},
    }
    if redis_url:
        raw["redis"] = {"url": redis_url}
    policy = tmp / f"{name}.yaml"
    policy.write_text(yaml.safe_dump(raw))
    env = {"PREFIX_GATEWAY_SECRET": "stampede"}
    gws = [start_gateway(["--config", str(policy)], env=env) for _ in range(gateways)]
    with running(*gws, sim):
        first = asyncio.run(wave([g.url for g in gws], n))
        gen_first = generations(urls[0])
        second = asyncio.run(wave([g.url for g in gws], n))
        gen_total = generations(urls[0])
    assert all(st == 200 for _, _, st in first + second), "every request must succeed"
    leader = [lat for lat, c, _ in first if c == "miss"]
    followers = [lat for lat, c, _ in first if c != "miss"]
    lead = max(leader) if leader else float("nan")
    kinds = {c: sum(1 for _, k, _ in first if k == c) for c in {k for _, k, _ in first}}
    hits2 = sum(1 for _, c, _ in second if c == "hit")
    return [
        name,
        n,
        gen_first,
        ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
        f"{lead * 1000:.0f}",
        f"{percentile(followers, 50) / lead:.2f} / {percentile(followers, 99) / lead:.2f}",
        f"{hits2}/{n}",
        gen_total - gen_first,
        f"{percentile([x for x, _, _ in second], 50) * 1000:.1f}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    redis = RedisServer()
    redis.start()
    try:
        with tempfile.TemporaryDirectory() as d:
            rows = [
                scenario("one gateway, memory store", 1, args.requests, None, Path(d)),
                scenario("two gateways, shared Redis", 2, args.requests, redis.url, Path(d)),
            ]
    finally:
        redis.stop()
    headers = [
        "scenario",
        "requests",
        "generations",
        "first wave x-cache",
        "leader ms",
        "follower p50 / p99 (× leader)",
        "second wave hits",
        "second wave generations",
        "second wave p50 ms",
    ]
    cmd = "python -m bench.stampede " + " ".join(sys.argv[1:])
    md = (
        "## Stampede on a cold cache\n\n"
        f"Command: `{cmd.strip()}` on {platform.machine()}, Python {platform.python_version()}. "
        "One simulated replica (16 output tokens at 20 ms each), identical deterministic requests "
        "released together; with two gateways they alternate between the two.\n\n" + table(headers, rows)
    )
    print(md)
    if args.write:
        write_section("stampede", md)


if __name__ == "__main__":
    main()
