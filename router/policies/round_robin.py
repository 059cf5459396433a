"""Round-robin: each request to the next healthy replica in turn."""

from __future__ import annotations

from collections.abc import Sequence

from router.replica import ReplicaState
from router.types import RouteRequest


class RoundRobin:
    name = "round_robin"

    def __init__(self) -> None:
        self._next = 0

    def pick(self, request: RouteRequest, candidates: Sequence[ReplicaState]) -> tuple[ReplicaState, str]:
        replica = candidates[self._next % len(candidates)]
        self._next += 1
        return replica, "round_robin"
