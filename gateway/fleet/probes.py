"""Liveness and readiness endpoints, and the active health checker of replicas."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import orjson
from aiohttp import web

from gateway.process.state import GatewayState, current_state


async def health(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about replicas (that is /ready)."""
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


def readiness(state: GatewayState) -> tuple[bool, dict[str, object]]:
    models = {}
    ready = not state.draining
    for name, pool in state.pools.items():
        healthy = [r.id for r in pool.router.replicas if r.healthy]
        models[name] = {"healthy_replicas": healthy, "replicas": len(pool.router.replicas)}
        ready = ready and bool(healthy)
    return ready, {"ready": ready, "draining": state.draining, "models": models}


async def ready(request: web.Request) -> web.Response:
    """Ready: not draining, and a healthy replica exists for every model."""
    ok, detail = readiness(current_state(request.app))
    return web.Response(status=200 if ok else 503, body=orjson.dumps(detail), content_type="application/json")


async def probe(session: aiohttp.ClientSession, url: str, timeout_s: float) -> bool:
    try:
        async with session.get(url + "/health", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            await resp.read()
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False


async def health_loop(
    app: web.Application, interval_s: float, timeout_s: float, fails_to_eject: int = 2
) -> None:
    """Probe every replica's /health; its active verdict turns false after ``fails_to_eject`` failures
    in a row and true again at the first success. The verdict goes to ``FleetHealth``, which combines
    it with the breaker and drains into ``ReplicaState.healthy``: this loop never writes that flag."""
    failures: dict[str, int] = {}
    while True:
        state: GatewayState = current_state(app)
        urls = sorted({r.url for pool in state.pools.values() for r in pool.router.replicas})
        results = await asyncio.gather(
            *(probe(state.upstream.session, url, timeout_s) for url in urls), return_exceptions=True
        )
        fleet = state.fleet
        for url, ok in zip(urls, results, strict=True):
            if ok is True:
                failures[url] = 0
                if fleet is not None:
                    fleet.set_active(url, True)
            else:
                failures[url] = failures.get(url, 0) + 1
                if fleet is not None and failures[url] >= fails_to_eject:
                    fleet.set_active(url, False)
        for gone in set(failures) - set(urls):
            del failures[gone]
        await asyncio.sleep(interval_s)


async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
