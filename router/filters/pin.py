"""The explicit pin: a request whose ``cache_control`` prefix has a live entry goes to the replica
that holds it (billing read it from the explicit-cache registry), as long as that replica is a
candidate and taking the request keeps it within the bounded load and the prefill-queue cap. Beyond
that the pin yields to the policy: a pinned prefix must not drown its replica.

``soft_pin`` is that rule for any preferred replica (the batch plan's is another, ``planned``)."""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
from router.load import bound_of, fits
from router.replica import ReplicaState


def soft_pin(
    candidates: list[ReplicaState], replica_id: str | None, ctx: FilterContext, reason: str
) -> list[ReplicaState]:
    """Only ``replica_id`` when it is a candidate within the bounded load (and no earlier filter
    decided), deciding for ``reason``; else the candidates unchanged."""
    if replica_id is None or ctx.decided_by is not None:
        return candidates
    replica = next((r for r in candidates if r.id == replica_id), None)
    if replica is None:
        return candidates
    bound = bound_of(candidates, ctx.cfg.load_factor)
    if not fits(replica, bound, ctx.cfg.max_queued_prefill_tokens):
        return candidates
    ctx.decided_by = reason
    return [replica]


def explicit_pin(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    return soft_pin(candidates, ctx.request.pinned_replica, ctx, "explicit_pin")


# Reads the candidates below the slot cap, and ``decided_by``: a batch line's plan decides before the pin.
EXPLICIT_PIN = Registered("explicit_pin", explicit_pin, ("below_slot_cap", "planned"))
