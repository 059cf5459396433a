"""Router filters declare what they read of each other (``Registered.after``) and run in the
topological sort of those declarations: every registration order gives the same run order and the
same decisions, and the order is the one the tuple used to spell out (issue 27, item 2)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest

from config.routing import RoutingConfig
from router.filters import FILTERS, ORDER, REGISTERED, FilterContext, Registered
from router.filters.base import ordered
from router.replica import ReplicaState
from router.types import NoReplicaAvailable, OnlineReserve, RouteRequest

# The tuple router.filters held before the filters declared their order.
BEFORE = ("healthy", "serves_adapter", "below_slot_cap", "planned", "explicit_pin", "online_reserve")


@dataclass
class Slot:
    """A batch line's placement (``router.types.Placement``)."""

    replica: str | None
    room: frozenset[str]
    moved: list[str] = field(default_factory=list)

    def has_room(self, replica_id: str) -> bool:
        return replica_id in self.room

    def move(self, replica_id: str) -> None:
        self.moved.append(replica_id)


def _replicas() -> list[ReplicaState]:
    rs = [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(4)]
    rs[1].healthy = False
    rs[1].adapters = frozenset({"old-lora"})
    rs[2].adapters = frozenset({"sql-lora"})
    rs[2].in_flight = 1
    return rs


def _request(**kw: object) -> RouteRequest:
    return RouteRequest("chat", "m", {"messages": []}, **kw)  # type: ignore[arg-type]


# (request, slot limit): each one's decision depends on the order of two filters.
SCENARIOS = {
    "plain": (_request(), 0),
    # the adapter's only server is full: busy (wait for its slot), not "nobody serves it"
    "adapter_full": (_request(adapter="sql-lora"), 1),
    "adapter_unknown": (_request(adapter="other-lora"), 1),
    # served only by an unhealthy replica, loadable: loaded on a healthy one, not refused
    "adapter_on_an_unhealthy_replica": (_request(adapter="old-lora", load_adapter=True), 0),
    # a batch line planned on a full replica: placed on one with room below the cap, not busy
    "planned_on_a_full_replica": (_request(placement=Slot("r2", frozenset({"r0", "r2"}))), 1),
    # a batch line planned on r0 that also carries a live pin on r3: the plan decides
    "planned_and_pinned": (
        _request(placement=Slot("r0", frozenset({"r0", "r3"})), pinned_replica="r3"),
        0,
    ),
    # an online request pinned to r0 while a batch leaves r3 to online traffic: the pin decides
    "pinned_during_batch": (
        _request(pinned_replica="r0", online_reserve=OnlineReserve(frozenset({"r3"}), 4)),
        0,
    ),
    "reserve_only": (_request(online_reserve=OnlineReserve(frozenset({"r3"}), 4)), 0),
}


def _decide(chain: tuple[Registered, ...], request: RouteRequest, slot_limit: int) -> tuple[object, ...]:
    """What the filters leave: (candidate ids, decided_by), or the error raised."""
    ctx = FilterContext(request, (), RoutingConfig(), slot_limit)
    candidates = _replicas()
    try:
        for f in chain:
            candidates = f.narrow(candidates, ctx)
    except NoReplicaAvailable as exc:  # ReplicasBusy is a subclass: the type tells them apart
        return (type(exc).__name__,)
    return (tuple(r.id for r in candidates), ctx.decided_by)


def _decisions(chain: tuple[Registered, ...]) -> dict[str, tuple[object, ...]]:
    return {name: _decide(chain, req, limit) for name, (req, limit) in SCENARIOS.items()}


def test_the_sorted_order_is_the_one_the_tuple_spelled_out() -> None:
    assert tuple(f.name for f in ORDER) == BEFORE
    assert tuple(f.narrow.__name__ for f in ORDER) == BEFORE
    assert tuple(f.narrow for f in ORDER) == FILTERS


def test_every_registration_order_gives_the_same_order_and_decisions() -> None:
    canonical = _decisions(ORDER)
    assert canonical["adapter_full"] == ("ReplicasBusy",)
    assert canonical["adapter_unknown"] == ("NoReplicaAvailable",)
    assert canonical["adapter_on_an_unhealthy_replica"] == (("r0", "r2", "r3"), None)
    assert canonical["planned_on_a_full_replica"] == (("r0",), None)
    assert canonical["planned_and_pinned"] == (("r0",), "batch_plan")
    assert canonical["pinned_during_batch"] == (("r0",), "explicit_pin")
    assert canonical["reserve_only"] == (("r3",), None)
    raw_differs = 0
    for perm in itertools.permutations(REGISTERED):
        assert tuple(f.name for f in ordered(perm)) == BEFORE
        assert _decisions(ordered(perm)) == canonical
        raw_differs += _decisions(perm) != canonical
    # The scenarios tell orders apart: run as registered, every other permutation decides otherwise.
    assert raw_differs == 719  # every order but the sorted one


def test_each_pair_the_scenarios_depend_on_is_declared() -> None:
    """Swapping two neighbours of the order changes a decision: each adjacent pair is ordered by a
    declaration, not by chance."""
    canonical = _decisions(ORDER)
    for i in range(len(ORDER) - 1):
        swapped = (*ORDER[:i], ORDER[i + 1], ORDER[i], *ORDER[i + 2 :])
        assert _decisions(swapped) != canonical, (ORDER[i].name, ORDER[i + 1].name)
        assert ORDER[i].name in ORDER[i + 1].after


def _f(name: str, *after: str) -> Registered:
    return Registered(name, lambda candidates, ctx: candidates, after)


def test_ties_go_by_name_and_bad_tables_are_refused() -> None:
    assert [f.name for f in ordered([_f("c"), _f("b"), _f("a", "c")])] == ["b", "c", "a"]
    with pytest.raises(ValueError, match="registered twice"):
        ordered([_f("a"), _f("a")])
    with pytest.raises(ValueError, match=r"unknown filters \['missing'\]"):
        ordered([_f("a", "missing")])
    with pytest.raises(ValueError, match="cycle"):
        ordered([_f("a", "b"), _f("b", "a"), _f("c")])
