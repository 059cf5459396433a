"""The online reserve of a running batch (``batch.online_replicas``): which replicas, the router's
preference for them, and the batch staying off them."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from config.batch import BatchConfig
from config.routing import RoutingConfig
from gateway.batch.runner import Slot, SlotPool
from router.batch_plan import reserved_for_online
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import OnlineReserve, RouteRequest

ids = st.lists(st.text("abcdefgh0123456789", min_size=1, max_size=6), min_size=1, max_size=12, unique=True)


@given(ids, st.integers(0, 15), st.data())
def test_the_reserve_is_a_stable_choice_that_always_leaves_the_batch_a_replica(
    replicas: list[str], n: int, data: st.DataObject
) -> None:
    reserve = reserved_for_online(replicas, n, "m")
    assert len(reserve) == max(0, min(n, len(replicas) - 1)) and reserve <= set(replicas)
    assert reserved_for_online(list(reversed(replicas)), n, "m") == reserve  # order does not matter
    # A replica outside the reserve leaving (or one joining that ranks below it) moves nothing.
    others = [r for r in replicas if r not in reserve]
    if len(others) > 1:
        gone = data.draw(st.sampled_from(others))
        assert reserved_for_online([r for r in replicas if r != gone], n, "m") == reserve
    # The reserve grows by one when asked for one more: every process agrees on the order.
    assert reserve <= reserved_for_online(replicas, n + 1, "m")


def test_pools_reserve_different_replicas() -> None:
    replicas = [f"r{i}" for i in range(8)]
    assert len({reserved_for_online(replicas, 1, f"model-{k}") for k in range(40)}) > 3


def fleet(n: int) -> list[ReplicaState]:
    return [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n)]


def online(text: str, reserve: frozenset[str] = frozenset(), slots: int = 16) -> RouteRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": f"{text} " * 80}]}
    return RouteRequest(
        "chat", "m", body, "t", online_reserve=OnlineReserve(reserve, slots) if reserve else None
    )


def pick(router: PoolRouter, req: RouteRequest) -> str:
    """Route and release at once: only the load set by the test counts."""
    d = router.route(req)
    router.release(d)
    return d.replica.id


def test_online_requests_prefer_the_reserve_until_it_holds_its_slots() -> None:
    replicas = fleet(4)
    router = PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=1))
    spread = {pick(router, online(f"app {i}")) for i in range(40)}
    assert len(spread) >= 3  # no batch: the policy spreads distinct prompts
    for r in replicas:
        r.in_flight = 8  # a batch's share on r0-r2, online traffic as much on r3
    assert len({pick(router, online(f"app {i}")) for i in range(40)}) >= 3  # no reserve: still spread
    reserve = frozenset({"r3"})
    assert {pick(router, online(f"app {i}", reserve)) for i in range(40)} == {"r3"}
    # Busier than the batch's replicas, but below its 16 slots: still the reserve (the bound is its own).
    replicas[3].in_flight = 15
    assert {pick(router, online(f"app {i}", reserve)) for i in range(40)} == {"r3"}
    # Full: the overflow spreads over every replica.
    replicas[3].in_flight = 16
    assert {pick(router, online(f"app {i}", reserve)) for i in range(40)} - {"r3"}


def test_a_reserve_of_several_stays_balanced() -> None:
    replicas = fleet(4)
    router = PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=1))
    reserve = frozenset({"r2", "r3"})
    assert {pick(router, online(f"app {i}", reserve)) for i in range(40)} == {"r2", "r3"}
    replicas[2].in_flight = 10  # bound among the reserve: ceil(1.25 x 11 / 2) = 7
    assert {pick(router, online(f"app {i}", reserve)) for i in range(40)} == {"r3"}


def test_a_batch_line_is_not_drawn_to_the_reserve_and_may_not_move_there() -> None:
    replicas = fleet(3)
    router = PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=1))
    reserve = frozenset({"r2"})
    params = BatchConfig(share=0.5, replica_slots=8).pool("m")
    slots = SlotPool()

    def room(r: str) -> bool:  # the runner's rule (tests/unit/test_batch_runner.py): never the reserve
        return r not in reserve and slots.used(r) < params.slots

    for i in range(6):
        assert slots.take("r0", params.slots)
        slot = Slot(slots, "r0", room)
        req = online(f"line {i}", reserve)
        req.placement = slot
        replicas[0].in_flight = 400  # the planned replica overloaded: the line moves, but not to r2
        d = router.route(req)
        assert d.replica.id == "r1" and slot.replica == "r1"
        slots.give(slot.replica)
