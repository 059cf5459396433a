"""LoRA adapters on the fleet: which replica serves which (read from its ``/v1/models``), and loading
one on a replica through vLLM's ``/v1/load_lora_adapter`` when the policy allows.

vLLM lists each adapter as a model whose ``parent`` is the base model; SGLang's ``/v1/models`` does the
same with ``--lora-paths``. Every ``lora.refresh_s`` the loop reads each replica of a pool that
discovers adapters and writes ``ReplicaState.adapters`` (its one writer besides a load, which adds the
adapter it loaded): at most ``lora.max_adapters`` names a pool, so metric labels stay bounded. A
replica that cannot be read keeps what it had (the health checks judge it, not this loop).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import orjson

from gateway.fleet.pools import CurrentPools, CurrentSession, Pool
from router.replica import ReplicaState

log = logging.getLogger("prefix_gateway")


def adapters_listed(models: Any, parents: set[str], limit: int) -> frozenset[str]:
    """The adapter names of a ``/v1/models`` answer whose parent is one of ``parents``."""
    data = models.get("data") if isinstance(models, dict) else None
    names = [
        m["id"]
        for m in data or ()
        if isinstance(m, dict) and isinstance(m.get("id"), str) and m.get("parent") in parents
    ]
    return frozenset(names[:limit])


async def read_adapters(
    session: aiohttp.ClientSession, pool: Pool, replica: ReplicaState, timeout_s: float
) -> None:
    parents = {pool.name, *([pool.cfg.served_model_name] if pool.cfg.served_model_name else [])}
    try:
        async with session.get(
            replica.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as resp:
            if resp.status != 200:
                return
            models = orjson.loads(await resp.read())
    except (aiohttp.ClientError, TimeoutError, OSError, orjson.JSONDecodeError):
        return
    replica.adapters = adapters_listed(models, parents, pool.cfg.lora.max_adapters)


async def adapters_loop(pools: CurrentPools, session: CurrentSession) -> None:
    """Read every discovering pool's replicas, each pool at its own ``refresh_s`` (the pools and the
    session read afresh each pass: a reload swaps them)."""
    due: dict[str, float] = {}
    loop = asyncio.get_running_loop()
    while True:
        current, client = pools(), session()
        now = loop.time()
        todo = [p for p in current.values() if p.cfg.lora.discover and due.get(p.name, 0.0) <= now]
        reads = [
            read_adapters(client, p, r, min(5.0, p.cfg.lora.refresh_s))
            for p in todo
            for r in p.router.replicas
        ]
        await asyncio.gather(*reads)
        for p in todo:
            due[p.name] = now + p.cfg.lora.refresh_s
        waits = [p.cfg.lora.refresh_s for p in current.values() if p.cfg.lora.discover]
        await asyncio.sleep(min(waits, default=10.0))


class AdapterLoader:
    """Loads an adapter on a replica once, however many requests ask at the same time."""

    def __init__(self) -> None:
        self._loading: dict[tuple[str, str], asyncio.Lock] = {}

    async def ensure(
        self, session: aiohttp.ClientSession, replica: ReplicaState, name: str, path: str, timeout_s: float
    ) -> str:
        """``loaded`` (by this call), ``present`` (it served it already, or a concurrent call loaded it)
        or ``failed``."""
        if name in replica.adapters:
            return "present"
        # One lock per (replica, adapter) the policy lets us load: bounded by the policy's lists.
        async with self._loading.setdefault((replica.url, name), asyncio.Lock()):
            if name in replica.adapters:
                return "present"
            if not await _load(session, replica.url, name, path, timeout_s):
                return "failed"
            replica.adapters = replica.adapters | {name}
            return "loaded"


async def _load(session: aiohttp.ClientSession, url: str, name: str, path: str, timeout_s: float) -> bool:
    body = orjson.dumps({"lora_name": name, "lora_path": path})
    try:
        async with session.post(
            url + "/v1/load_lora_adapter",
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            text = await resp.read()
            if resp.status == 200:
                return True
            # vLLM answers 400 for an adapter it already has: that is a success here.
            if resp.status == 400 and b"already been loaded" in text:
                return True
            log.warning(
                "loading a LoRA adapter failed",
                extra={"event": "adapter_load_failed", "adapter": name, "status": resp.status},
            )
            return False
    except (aiohttp.ClientError, TimeoutError, OSError):
        return False
