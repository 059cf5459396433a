"""Plain consistent hashing of the route key: sticky, no load bound (for comparison)."""

from __future__ import annotations

from router.policies.base import PickContext
from router.policies.ring import HashRing
from router.replica import ReplicaState


class ConsistentHash:
    name = "consistent_hash"
    needs_prefix = True

    def __init__(self, virtual_nodes: int = 160) -> None:
        self.ring = HashRing(virtual_nodes)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        rid = self.ring.owner(ctx.route_key, ctx.candidates)
        return next(r for r in ctx.candidates if r.id == rid), "consistent_hash"
