"""Liveness and readiness endpoints, and the active health checker of replicas."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import orjson
from aiohttp import web

from gateway.state import GatewayState, current_state

log = logging.getLogger("prefix_gateway")


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
    """Probe every replica's /health; eject after ``fails_to_eject`` failures in a row, readmit on success."""
    failures: dict[str, int] = {}
    while True:
        state: GatewayState = current_state(app)
        replicas = [r for pool in state.pools.values() for r in pool.router.replicas]
        results = await asyncio.gather(
            *(probe(state.upstream.session, r.url, timeout_s) for r in replicas), return_exceptions=True
        )
        for replica, ok in zip(replicas, results, strict=True):
            if ok is True:
                failures[replica.id] = 0
                if not replica.healthy:
                    log.info("replica healthy again", extra={"event": "replica_up", "replica": replica.id})
                replica.healthy = True
            else:
                failures[replica.id] = failures.get(replica.id, 0) + 1
                if replica.healthy and failures[replica.id] >= fails_to_eject:
                    log.warning("replica ejected", extra={"event": "replica_down", "replica": replica.id})
                    replica.healthy = False
            state.metrics.replica_healthy.labels(replica.id).set(1 if replica.healthy else 0)
        await asyncio.sleep(interval_s)


async def stop_task(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
