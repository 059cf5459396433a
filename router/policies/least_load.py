"""Least-load: the healthy replica with the fewest requests in flight, ties broken at random."""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.policies.base import PickContext
from router.replica import ReplicaState


def least_loaded(candidates: Sequence[ReplicaState], rng: random.Random) -> ReplicaState:
    """Lowest ``load / weight``; a seeded random choice among ties."""
    best = min(r.load() / r.weight for r in candidates)
    tied = [r for r in candidates if r.load() / r.weight == best]
    return tied[0] if len(tied) == 1 else rng.choice(tied)


class LeastLoad:
    name = "least_load"
    needs_prefix = False

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        return least_loaded(ctx.candidates, self._rng), "least_load"
