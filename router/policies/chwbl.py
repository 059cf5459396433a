"""Consistent hashing with bounded loads on the route key: sticky while within c x mean load."""

from __future__ import annotations

import random

from router.policies.base import PickContext
from router.policies.least_load import least_loaded
from router.policies.ring import HashRing, chwbl_pick
from router.replica import ReplicaState


class CHWBL:
    name = "chwbl"
    needs_prefix = True

    def __init__(self, virtual_nodes: int = 160, load_factor: float = 1.25, seed: int | None = None) -> None:
        self.ring = HashRing(virtual_nodes)
        self.load_factor = load_factor
        self._rng = random.Random(seed)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        replica = chwbl_pick(self.ring, ctx.route_key, ctx.candidates, self.load_factor)
        if replica is None:  # only with fractional scraped loads; never for in-flight counts
            return least_loaded(ctx.candidates, self._rng), "chwbl_least_load"
        return replica, "chwbl"
