"""A bounded closed-loop load generator: ``concurrency`` workers share ``requests`` requests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson


@dataclass
class LoadResult:
    latencies: list[float] = field(default_factory=list)
    ttfts: list[float] = field(default_factory=list)
    errors: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    wall_s: float = 0.0
    replicas: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> int:
        return len(self.latencies)

    @property
    def rps(self) -> float:
        return self.ok / self.wall_s if self.wall_s else 0.0


async def run_load(
    url: str,
    make_body: Callable[[int], dict[str, Any]],
    *,
    requests: int,
    concurrency: int,
    stream: bool = False,
    headers: dict[str, str] | None = None,
    max_seconds: float = 120.0,
    session: aiohttp.ClientSession | None = None,
) -> LoadResult:
    """Send ``requests`` requests with ``concurrency`` in flight; stop early after ``max_seconds``."""
    result = LoadResult()
    counter = iter(range(requests))
    own = session is None
    if session is None:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            json_serialize=lambda o: orjson.dumps(o).decode(),
        )
    client = session
    deadline = time.perf_counter() + max_seconds

    async def worker() -> None:
        for i in counter:
            if time.perf_counter() > deadline:
                return
            body = make_body(i)
            if stream:
                body["stream"] = True
            start = time.perf_counter()
            try:
                async with client.post(
                    url,
                    data=orjson.dumps(body),
                    headers={"Content-Type": "application/json", **(headers or {})},
                ) as r:
                    first = None
                    async for _ in r.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                    result.statuses[r.status] = result.statuses.get(r.status, 0) + 1
                    if r.status != 200:
                        result.errors += 1
                        continue
                    rep = r.headers.get("x-gateway-replica")
                    if rep:
                        result.replicas[rep] = result.replicas.get(rep, 0) + 1
            except (TimeoutError, aiohttp.ClientError):
                result.errors += 1
                continue
            end = time.perf_counter()
            result.latencies.append(end - start)
            result.ttfts.append((first or end) - start)

    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        result.wall_s = time.perf_counter() - t0
        if own:
            await client.close()
    return result
