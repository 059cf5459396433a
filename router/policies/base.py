"""The small interface every routing policy implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from router.replica import ReplicaState
from router.types import RouteRequest


class RoutingPolicy(Protocol):
    """Pick one replica among healthy candidates (never empty) and say why.

    A policy may keep its own state (a counter, a ring, a random generator); it does no I/O.
    """

    name: str

    def pick(self, request: RouteRequest, candidates: Sequence[ReplicaState]) -> tuple[ReplicaState, str]: ...
