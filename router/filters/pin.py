"""The explicit pin: a request whose ``cache_control`` prefix has a live entry goes to the replica
that holds it (billing read it from the explicit-cache registry), as long as that replica is a
candidate and taking the request keeps it within the bounded load and the prefill-queue cap. Beyond
that the pin yields to the policy: a pinned prefix must not drown its replica."""

from __future__ import annotations

from router.filters.base import FilterContext
from router.load import bound_of, fits
from router.replica import ReplicaState


def explicit_pin(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    pinned = ctx.request.pinned_replica
    if pinned is None:
        return candidates
    replica = next((r for r in candidates if r.id == pinned), None)
    if replica is None:
        return candidates
    bound = bound_of(candidates, ctx.cfg.load_factor)
    if not fits(replica, bound, ctx.cfg.max_queued_prefill_tokens):
        return candidates
    ctx.decided_by = "explicit_pin"
    return [replica]
