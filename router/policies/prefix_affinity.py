"""Prefix affinity: sticky to the replicas holding the prompt's prefix until they are saturated.

1. The affinity set: candidates whose match is at least ``affinity_ratio`` of the best match, when the
   best match covers at least ``min_match_fraction`` of the hashed prompt.
2. Within it, the lowest load that is not saturated (ties at random, seeded). Saturated means: taking
   this request would put its load above ``ceil(load_factor * (total + 1) / n)`` (the CHWBL bound), or
   its queued uncached prefill tokens already exceed ``max_queued_prefill_tokens``.
3. Every member saturated: spill to the unsaturated candidates holding the longest useful part of the
   prefix (else to all unsaturated ones), the first of them along the ring from the route key, so a
   hot prefix grows onto the same second replica from every gateway process.
4. No useful match anywhere: CHWBL placement of the route key (deterministic for equal loads).
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.policies.base import PickContext
from router.policies.least_load import least_loaded
from router.policies.ring import HashRing, chwbl_pick, load_bound
from router.replica import ReplicaState


class PrefixAffinity:
    name = "prefix_affinity"
    needs_prefix = True

    def __init__(
        self,
        *,
        virtual_nodes: int = 160,
        load_factor: float = 1.25,
        min_match_fraction: float = 0.1,
        affinity_ratio: float = 0.9,
        max_queued_prefill_tokens: int = 65536,
        seed: int | None = None,
    ) -> None:
        self.ring = HashRing(virtual_nodes)
        self.load_factor = load_factor
        self.min_match_fraction = min_match_fraction
        self.affinity_ratio = affinity_ratio
        self.max_queued_prefill_tokens = max_queued_prefill_tokens
        self._rng = random.Random(seed)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        cands = ctx.candidates
        matched = ctx.matched_blocks
        best = max((matched.get(r.id, 0) for r in cands), default=0)
        best_tokens = min(best * ctx.block_size, ctx.hashed_tokens)
        if best == 0 or best_tokens < self.min_match_fraction * ctx.hashed_tokens:
            return self._place(ctx, cands, "cold_chwbl")

        bound = load_bound(sum(r.load() for r in cands), len(cands), self.load_factor)
        cap = self.max_queued_prefill_tokens

        def fits(r: ReplicaState) -> bool:
            return r.load() + 1 <= bound and r.queued_prefill_tokens <= cap

        floor = self.affinity_ratio * best
        members = [r for r in cands if matched.get(r.id, 0) >= floor and fits(r)]
        if members:
            low = min(r.load() for r in members)
            tied = [r for r in members if r.load() == low]
            return (tied[0] if len(tied) == 1 else self._rng.choice(tied)), "affinity"
        allowed = [r for r in cands if fits(r)]
        # Spill where the most of the prefix survives: the unsaturated replicas with the longest useful
        # match (e.g. a shared system prompt), else all of them; the ring order picks among those.
        best_left = max((matched.get(r.id, 0) for r in allowed), default=0)
        if (
            best_left
            and min(best_left * ctx.block_size, ctx.hashed_tokens)
            >= self.min_match_fraction * ctx.hashed_tokens
        ):
            allowed = [r for r in allowed if matched.get(r.id, 0) >= self.affinity_ratio * best_left]
        return self._place(ctx, allowed, "saturated_spill")

    def _place(
        self, ctx: PickContext, allowed: Sequence[ReplicaState], reason: str
    ) -> tuple[ReplicaState, str]:
        """CHWBL from the route key, bounded over all candidates, taking only ``allowed`` ones."""
        replica = None
        if allowed:
            replica = chwbl_pick(self.ring, ctx.route_key, ctx.candidates, self.load_factor, allowed)
        if replica is None:  # everyone saturated: the least loaded still keeps within c x mean
            return least_loaded(ctx.candidates, self._rng), "all_saturated"
        return replica, reason
