"""Model pools at run time: the replicas of each model and the router that picks among them."""

from __future__ import annotations

from dataclasses import dataclass

from config.policy import ModelPoolConfig, Policy
from router.pool import PoolRouter
from router.replica import ReplicaState


@dataclass(slots=True)
class Pool:
    cfg: ModelPoolConfig
    router: PoolRouter

    @property
    def name(self) -> str:
        return self.cfg.name

    @property
    def sends_cache_salt(self) -> bool:
        """vLLM and SGLang isolate prefix-cache blocks by ``cache_salt``; an OpenAI backend rejects it."""
        return self.cfg.backend in ("vllm", "sglang")


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


def build_pools(policy: Policy) -> dict[str, Pool]:
    slots = policy.limits.max_concurrent_per_replica
    return {
        m.name: Pool(cfg=m, router=PoolRouter(replica_states(m), m.routing, slot_limit=slots))
        for m in policy.models
    }
