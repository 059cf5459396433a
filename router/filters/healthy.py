"""Healthy and not yet tried: the routing set. ``ReplicaState.healthy`` combines the active check,
the circuit breaker and drains (``gateway.upstream.health`` is its one writer)."""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
from router.replica import ReplicaState
from router.types import NoReplicaAvailable


def healthy(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    out = [r for r in candidates if r.healthy and r.id not in ctx.exclude]
    if not out:
        raise NoReplicaAvailable(f"no healthy replica for model {ctx.request.model!r}")
    return out


# The routing set: reads no other filter's output; every other filter narrows what it leaves.
HEALTHY = Registered("healthy", healthy, ())
