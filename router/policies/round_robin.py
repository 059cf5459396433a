"""Round-robin: each request to the next healthy replica in turn."""

from __future__ import annotations

from router.policies.base import PickContext
from router.replica import ReplicaState


class RoundRobin:
    name = "round_robin"
    needs_prefix = False

    def __init__(self) -> None:
        self._next = 0

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        replica = ctx.candidates[self._next % len(ctx.candidates)]
        self._next += 1
        return replica, "round_robin"
