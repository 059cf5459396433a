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

Two refinements, both measured with ``python -m bench.routing``:
- ``min_spill_in_flight``: a member of the affinity set is saturated only above
  ``max(bound, min_spill_in_flight)``. At low load the bound is 2–3 requests, inside a replica's batch;
  leaving then re-prefills a whole conversation on another replica for nothing. Set it to the replicas'
  batch size (vLLM ``--max-num-seqs``); 0 keeps the plain bound. Not for a hot prefix: it is shared,
  cheap to prefill elsewhere, and keeps the plain bound.
- Hot prefixes replicate: when one prefix (the deepest matched block) carries more than 1/n of the last
  ``hot_window`` affinity decisions and a replica outside its affinity set is less loaded than the
  chosen member, the request goes there (``hot_replicate``), which then learns the prefix. Spills alone
  walk the ring in one order, so the last replica on it idled under a single hot prefix.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Sequence

from router.load import bound_of, fits
from router.policies.base import PickContext
from router.policies.least_load import least_loaded
from router.policies.ring import HashRing, chwbl_pick
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
        min_spill_in_flight: int = 0,
        hot_window: int = 64,
        seed: int | None = None,
    ) -> None:
        self.ring = HashRing(virtual_nodes)
        self.min_spill_in_flight = min_spill_in_flight
        self._recent: deque[int] = deque(maxlen=hot_window) if hot_window > 0 else deque(maxlen=0)
        self._counts: Counter[int] = Counter()
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

        bound = bound_of(cands, self.load_factor)
        cap = self.max_queued_prefill_tokens
        hot = bool(ctx.block_hashes) and self._is_hot(
            ctx.block_hashes[min(best, len(ctx.block_hashes)) - 1], cands
        )
        # A shared hot prefix is cheap to re-prefill elsewhere: only a private one may exceed the bound.
        member_bound = bound if hot else max(bound, self.min_spill_in_flight)

        floor = self.affinity_ratio * best
        members = [r for r in cands if matched.get(r.id, 0) >= floor and fits(r, member_bound, cap)]
        if members:
            low = min(r.load() for r in members)
            tied = [r for r in members if r.load() == low]
            chosen = tied[0] if len(tied) == 1 else self._rng.choice(tied)
            if hot:
                outside = [r for r in cands if matched.get(r.id, 0) < floor and fits(r, bound, cap)]
                if outside:
                    least = min(r.load() for r in outside)
                    if least < chosen.load():
                        return self._rng.choice([r for r in outside if r.load() == least]), "hot_replicate"
            return chosen, "affinity"
        allowed = [r for r in cands if fits(r, bound, cap)]
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

    def _is_hot(self, key: int, cands: Sequence[ReplicaState]) -> bool:
        """Count this affinity decision's prefix; hot when it carries more than 1/n of the window."""
        window = self._recent
        if window.maxlen == 0:
            return False
        if len(window) == window.maxlen:
            old = window[0]
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        window.append(key)
        self._counts[key] += 1
        return len(window) >= len(cands) and self._counts[key] * len(cands) > len(window)

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
