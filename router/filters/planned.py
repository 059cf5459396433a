"""An offline batch line's planned replica: a soft pin, within the batch's share of every replica.

The batch planner (``router.batch_plan``) chose a replica for each line so that lines sharing a prefix
run one after another where that prefix is cached, and the line holds a slot of its batch's share
there (``RouteRequest.placement``). The candidates narrow to the replicas where the share has a slot
for it (its planned replica always has: it holds one); the planned replica takes the line while that
keeps it within the bounded load and the prefill-queue cap, as the explicit pin does, so a hot replica
is not drowned by the plan. Otherwise the policy picks among replicas with room, and ``PoolRouter.route``
moves the line's slot to the one picked, in the same step: a batch never holds more than its share of
any replica, wherever its lines are placed. No room anywhere (the planned replica unhealthy or
already tried) is ``ReplicasBusy``: the line waits for a slot like any request at its cap.
"""

from __future__ import annotations

from router.filters.base import FilterContext, Registered
from router.filters.pin import soft_pin
from router.replica import ReplicaState
from router.types import ReplicasBusy


def planned(candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]:
    placement = ctx.request.placement
    if placement is None:
        return candidates
    room = [r for r in candidates if placement.has_room(r.id)]
    if not room:
        raise ReplicasBusy(f"the batch's share of every replica of model {ctx.request.model!r} is taken")
    return soft_pin(room, placement.replica, ctx, "batch_plan")


# Reads the candidates below the slot cap (the bounded load of its soft pin is theirs); decides
# (``decided_by``) for the filters that yield to a decision.
PLANNED = Registered("planned", planned, ("below_slot_cap",))
