"""Model pools at run time: the replicas of each model and the router that picks among them.

``CurrentPools`` and ``CurrentSession`` are how the fleet's loops (probes, scrape, discovery, adapters,
KV events) read the process's current pools and upstream session: a getter each, called afresh on every
pass, because a reload swaps both. The loops receive these, not the ``Process``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import aiohttp

from config.policy import ModelPoolConfig
from router.pool import PoolRouter
from router.replica import ReplicaState


@dataclass(slots=True)
class Pool:
    cfg: ModelPoolConfig
    router: PoolRouter

    @property
    def name(self) -> str:
        return self.cfg.name

    def adapters(self) -> set[str]:
        """LoRA adapters of this model: those the policy names, then those its replicas list (in name
        order), ``lora.max_adapters`` in all, so that metric labels stay bounded."""
        lora = self.cfg.lora
        named = {a.name for a in lora.adapters}
        listed = set().union(*(r.adapters for r in self.router.replicas)) - named
        room = max(0, lora.max_adapters - len(named))
        return named | set(sorted(listed)[:room])

    @property
    def sends_cache_salt(self) -> bool:
        """vLLM and SGLang isolate prefix-cache blocks by ``cache_salt``; an OpenAI backend rejects it."""
        return self.cfg.backend in ("vllm", "sglang")


CurrentPools = Callable[[], Mapping[str, Pool]]
CurrentSession = Callable[[], aiohttp.ClientSession]


def find_pool(pools: dict[str, Pool], model: str) -> tuple[Pool | None, str | None]:
    """The pool serving ``model`` and the adapter it names: (the pool, None) for a base model."""
    pool = pools.get(model)
    if pool is not None:
        return pool, None
    for pool in pools.values():
        if model in pool.adapters():
            return pool, model
    return None, None


def replica_states(cfg: ModelPoolConfig) -> list[ReplicaState]:
    return [
        ReplicaState(
            id=r.replica_id,
            url=r.base_url,
            kind=cfg.backend,
            weight=r.weight,
            kv_capacity_blocks=r.kv_capacity_blocks,
        )
        for r in cfg.replicas
    ]
