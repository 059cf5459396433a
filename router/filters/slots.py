"""The per-replica concurrency cap (``limits.max_concurrent_per_replica``): a replica holding that
many requests of this process takes no more until one ends. When every healthy replica is full the
request should wait for a slot (the gateway queues it, bounded) rather than go anywhere:
``ReplicasBusy`` says so."""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
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


# Reads the replicas that serve the request's adapter: a full replica that serves it is busy, not
# absent (``ReplicasBusy``: the request waits for its slot); capped first, it would read as "no replica
# serves the adapter" (``NoReplicaAvailable``). And a request no replica serves is refused at once,
# never left waiting for slots on replicas that cannot take it.
BELOW_SLOT_CAP = Registered("below_slot_cap", below_slot_cap, ("healthy", "serves_adapter"))
