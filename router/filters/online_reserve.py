"""Online requests prefer the replicas a running batch leaves alone (``batch.online_replicas``).

While a batch runs on the pool, ``RouteRequest.online_reserve`` names the replicas its plan does not
use (``router.batch_plan.reserved_for_online``: why they exist). An online request's candidates narrow to
those of them that take it within the bounded load among the reserve (so a reserve of several stays
balanced), below ``slots`` requests in flight each (what a replica runs well at once: beyond it the
engine queues) and under the prefill-queue cap. A full reserve leaves the candidates as they were: the
policy spreads the overflow over every replica, so a burst larger than the reserve is never queued
behind it. The bound is the reserve's own, not the fleet's: the batch's lines load the other replicas
by its share, which says nothing of how much online traffic the reserve can take. The policy still
picks among the reserve (prefix affinity keeps each prompt on one of them). A batch line
(``placement``) is not narrowed: the batch's share keeps it off the reserve.
"""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
from router.load import bound_of, fits
from router.replica import ReplicaState


def online_reserve(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    reserve = ctx.request.online_reserve
    if reserve is None or ctx.request.placement is not None or ctx.decided_by is not None:
        return candidates
    pool = [r for r in candidates if r.id in reserve.replicas]
    if not pool:
        return candidates
    bound = min(bound_of(pool, ctx.cfg.load_factor), reserve.slots)
    kept = [r for r in pool if fits(r, bound, ctx.cfg.max_queued_prefill_tokens)]
    return kept or candidates


# Reads the candidates below the slot cap, and ``decided_by``: it never overrules the plan or the pin.
ONLINE_RESERVE = Registered("online_reserve", online_reserve, ("below_slot_cap", "planned", "explicit_pin"))
