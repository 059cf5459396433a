"""Least-load: the healthy replica with the fewest requests in flight, ties broken at random."""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.replica import ReplicaState
from router.types import RouteRequest


class LeastLoad:
    name = "least_load"

    def __init__(self, seed: int | None = None) -> None:
        self._rng = random.Random(seed)

    def pick(self, request: RouteRequest, candidates: Sequence[ReplicaState]) -> tuple[ReplicaState, str]:
        best = min(r.load() / r.weight for r in candidates)
        tied = [r for r in candidates if r.load() / r.weight == best]
        return (tied[0] if len(tied) == 1 else self._rng.choice(tied)), "least_load"
