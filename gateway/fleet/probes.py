"""The active health checker of replicas: ``GET /health`` on each, every ``interval_s``.

It receives what it uses of the process: the current pools and upstream session (getters: a reload
swaps both) and the fleet's health, which its verdicts feed.
"""

from __future__ import annotations

import asyncio

import aiohttp

from gateway.fleet.pools import CurrentPools, CurrentSession
from gateway.upstream.health import FleetHealth


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    try:
        async with session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def health_loop(
    pools: CurrentPools,
    session: CurrentSession,
    fleet: FleetHealth,
    interval_s: float,
    timeout_s: float,
    fails_to_eject: int = 2,
) -> None:
    """Probe every replica's /health; its active verdict turns false after ``fails_to_eject`` failures
    in a row and true again at the first success. The verdict goes to ``FleetHealth``, which combines
    it with the breaker and drains into ``ReplicaState.healthy``: this loop never writes that flag."""
    failures: dict[str, int] = {}
    while True:
        urls = sorted({r.url for pool in pools().values() for r in pool.router.replicas})
        client = session()
        results = await asyncio.gather(
            *(probe(client, url, timeout_s) for url in urls), return_exceptions=True
        )
        for url, ok in zip(urls, results, strict=True):
            if ok is True:
                failures[url] = 0
                fleet.set_active(url, True)
            else:
                failures[url] = failures.get(url, 0) + 1
                if failures[url] >= fails_to_eject:
                    fleet.set_active(url, False)
        for gone in set(failures) - set(urls):
            del failures[gone]
        await asyncio.sleep(interval_s)
