"""What billing costs per request: pricing, marker handling, explicit registry, ledger writes.

    python -m bench.billing [--records 5000] [--concurrency 64]

Pure functions are timed in a loop (µs per call). Ledgers are timed with ``--concurrency`` writers:
SQLite (a temporary file, synchronous full and normal; group commit) and Redis (a real redis-server
started on a loopback port, as the tests do). Numbers are for this machine at the time of the run;
nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis.asyncio as aioredis

from bench.redis_server import RedisServer
from cache.billing.explicit import MemoryExplicitRegistry, RedisExplicitRegistry
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.markers import find_markers, strip_markers
from cache.billing.pricing import ExplicitOutcome, ModelPrices, RequestUsage, Rules, bill

PRICES = ModelPrices(3_000_000, 15_000_000)


def _item(i: int):
    return bill(
        RequestUsage(3000, 200, 1024, "replica"),
        PRICES,
        Rules(),
        ExplicitOutcome(2048, "hit") if i % 3 == 0 else None,
        "upstream",
        request_id=f"req-{i}",
        tenant=f"tenant-{i % 7}",
        model="llama",
        ts_ms=1_793_000_000_000 + i * 10,
    )


def _body() -> dict:
    return {
        "model": "llama",
        "messages": [
            {
                "role": "system",
                "content": [{"type": "text", "text": "rules " * 400, "cache_control": {"type": "ephemeral"}}],
            },
            *({"role": "user" if k % 2 else "assistant", "content": f"turn {k}"} for k in range(10)),
        ],
    }


def per_call_us(fn: Callable[[], object], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n * 1e6


async def per_await_us(fn: Callable[[], Awaitable[object]], n: int) -> float:
    t0 = time.perf_counter()
    for _ in range(n):
        await fn()
    return (time.perf_counter() - t0) / n * 1e6


async def rate(n: int, concurrency: int, one: Callable[[int], Awaitable[object]]) -> float:
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await one(i)

    t0 = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    return n / (time.perf_counter() - t0)


async def main(records: int, concurrency: int) -> None:
    usage = RequestUsage(3000, 200, 1024, "replica")
    body = _body()
    print(
        f"bill():           {per_call_us(lambda: bill(usage, PRICES, Rules(), None, 'upstream', request_id='r', tenant='t', model='m', ts_ms=0), 20000):7.2f} µs/call"
    )
    print(f"find_markers():   {per_call_us(lambda: find_markers(body), 20000):7.2f} µs/call (11 messages)")
    print(f"strip_markers():  {per_call_us(lambda: strip_markers(body), 20000):7.2f} µs/call")
    reg = MemoryExplicitRegistry()
    print(
        f"memory registry:  {await per_await_us(lambda: reg.lookup_or_create('t', 'm', 1, 2048, 'r'), 50000):7.2f} µs/lookup"
    )

    items = [_item(i) for i in range(records)]
    with tempfile.TemporaryDirectory() as d:
        for sync in ("full", "normal"):
            led = await SqliteLedger.open(str(Path(d) / f"{sync}.db"), synchronous=sync)

            def one(i: int, led: SqliteLedger = led) -> Awaitable[object]:
                return led.record(items[i])

            r = await rate(records, concurrency, one)
            print(
                f"sqlite ledger ({sync:6s}): {r:8.0f} records/s, {records / led.commits:5.1f} records/commit"
            )
            await led.close()

    server = RedisServer()
    server.start()
    try:
        client = aioredis.from_url(server.url, max_connections=concurrency + 8)
        rled = RedisLedger(client, key_prefix="bench")
        print(
            f"redis ledger:           {await rate(records, concurrency, lambda i: rled.record(items[i])):8.0f} records/s"
        )
        rreg = RedisExplicitRegistry(client, key_prefix="bench")
        r = await rate(records, concurrency, lambda i: rreg.lookup_or_create("t", "m", i % 100, 2048, "r"))
        print(f"redis registry:         {r:8.0f} lookups/s")
        await client.aclose()
    finally:
        server.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=5000)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    asyncio.run(main(args.records, args.concurrency))
