"""What a filter is: a function that narrows one decision's candidates before the policy picks."""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass
from typing import Protocol

from config.routing import RoutingConfig
from router.replica import ReplicaState
from router.types import RouteRequest


@dataclass(slots=True)
class FilterContext:
    """One decision as the filters see it. ``decided_by`` is set by a filter that chose the replica
    itself (it leaves exactly that one): the policy is then not asked."""

    request: RouteRequest
    exclude: Container[str]  # replicas this request already tried
    cfg: RoutingConfig
    slot_limit: int  # requests in flight a replica may hold at once (0: no limit)
    decided_by: str | None = None


class Filter(Protocol):
    """Return the candidates that may take the request (a subset, in the same order), or raise
    ``NoReplicaAvailable`` (or a subclass) when none may and the caller should know why."""

    def __call__(self, candidates: list[ReplicaState], ctx: FilterContext) -> list[ReplicaState]: ...
