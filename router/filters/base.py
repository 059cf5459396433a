"""What a filter is: a function that narrows one decision's candidates before the policy picks, and
what it reads of the filters before it (``Registered.after``).

Filters coordinate: one narrows what the next sees (the slot cap reads the replicas that serve the
adapter), and one that decides leaves ``decided_by`` for the later ones to yield to (a batch line's
plan before the explicit pin, both before the online reserve). That used to be the order of a tuple,
so the tuple's order was semantics nobody could read off a filter. Each filter now names the filters
whose output it reads, and the run order is their topological sort (``ordered``), computed once when
``router.filters`` is imported; ties go by name, so the order never depends on where a filter is
registered (``tests/unit/test_filter_order.py`` registers every permutation).
"""

from __future__ import annotations

from collections.abc import Container, Iterable
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


@dataclass(frozen=True, slots=True)
class Registered:
    """A filter in the table: its name, the function, and the filters whose output it reads (it runs
    after each of them)."""

    name: str
    narrow: Filter
    after: tuple[str, ...] = ()


def ordered(registered: Iterable[Registered]) -> tuple[Registered, ...]:
    """The filters in an order where each runs after every filter it names (Kahn's algorithm; among
    filters free to run, the first by name). ``ValueError`` on a repeated name, an unknown name in
    ``after``, or a cycle."""
    by_name: dict[str, Registered] = {}
    for f in registered:
        if f.name in by_name:
            raise ValueError(f"router filter {f.name!r} is registered twice")
        by_name[f.name] = f
    for f in by_name.values():
        unknown = sorted(set(f.after) - set(by_name))
        if unknown:
            raise ValueError(f"router filter {f.name!r} runs after unknown filters {unknown}")
    waiting = {name: set(f.after) for name, f in by_name.items()}
    out: list[Registered] = []
    while waiting:
        free = sorted(name for name, deps in waiting.items() if not deps)
        if not free:
            raise ValueError(f"router filters wait on each other in a cycle: {sorted(waiting)}")
        name = free[0]
        out.append(by_name[name])
        del waiting[name]
        for deps in waiting.values():
            deps.discard(name)
    return tuple(out)
