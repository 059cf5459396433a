"""The per-replica concurrency cap (``limits.max_concurrent_per_replica``): a replica holding that
many requests of this process takes no more until one ends. When every healthy replica is full the
request should wait for a slot (the gateway queues it, bounded) rather than go anywhere:
``ReplicasBusy`` says so."""

from __future__ import annotations

from router.filters.base import FilterContext
from router.replica import ReplicaState
from router.types import ReplicasBusy


def below_slot_cap(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    limit = ctx.slot_limit
    if not limit:
        return candidates
    out = [r for r in candidates if r.in_flight < limit]
    if not out:
        raise ReplicasBusy(f"every replica of model {ctx.request.model!r} holds {limit} requests")
    return out
