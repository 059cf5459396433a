"""The highest class's headroom derived from its measured concurrency (router.fairness.headroom) and the
gateway's use of it (fairness.auto_headroom): pure, no sockets."""

from __future__ import annotations

from config.fairness import FairnessConfig
from config.policy import LimitsConfig
from gateway.process.fair_admission import _PoolQueue, auto_headroom
from router.fairness.headroom import AutoHeadroom, TopConcurrency, derived_slots
from router.replica import ReplicaState


def test_the_quantile_is_of_the_counts_its_arrivals_made_in_the_window():
    top = TopConcurrency(window_s=10.0)
    for k in range(20):  # 20 arrivals, each ended at once: each made a count of 1
        top.started(float(k) / 10)
        top.ended(float(k) / 10)
    for _ in range(5):  # then five at once: counts 1..5
        top.started(3.0)
    assert top.count == 5
    assert top.quantile(3.0, 0.5) == 1.0  # 21 of the 25 arrivals made a count of 1
    assert top.quantile(3.0, 0.9) == 3.0  # nearest rank: the 23rd of 25 sorted
    assert top.quantile(3.0, 1.0) == 5.0


def test_old_arrivals_leave_the_window_but_the_newest_stays():
    top = TopConcurrency(window_s=10.0)
    for _ in range(5):
        top.started(0.0)  # counts 1..5 at t=0
    for _ in range(5):
        top.ended(0.0)
    for k in range(30):  # a count of 1 an arrival after the window is over
        top.started(11.0 + k / 10)
        top.ended(11.0 + k / 10)
    assert top.quantile(14.0, 1.0) == 1.0  # the burst at t=0 is out of the window
    assert top.quantile(1_000.0, 0.9) == 1.0  # long idle: the newest arrival still counts


def test_a_cold_start_counts_the_arrivals_it_has_not_seen_at_the_bound():
    top = TopConcurrency(window_s=30.0, since=0.0)
    assert top.quantile(0.0, 0.9, prior=10.0) == 10.0  # nothing seen yet: the bound, before a flood fills
    top.started(0.1)
    top.ended(0.2)
    assert top.quantile(0.2, 0.9, prior=10.0) == 10.0  # 1 arrival of the 10 a 0.9 quantile needs
    for k in range(12):
        top.started(1.0 + k / 10)
        top.ended(1.0 + k / 10)
    assert top.quantile(3.0, 0.9, prior=10.0) == 1.0  # 13 arrivals: measured
    lone = TopConcurrency(window_s=30.0, since=0.0)
    assert lone.quantile(31.0, 0.9, prior=10.0) == 0.0  # past the first window, never seen: nothing kept
    lone.started(31.0)
    assert lone.quantile(31.0, 0.9, prior=10.0) == 1.0  # one arrival, measured


def test_derived_slots_keep_the_part_of_the_quantile_the_class_does_not_hold_now():
    auto = AutoHeadroom(max_slots=5, min_slots=1)
    assert derived_slots(9.0, 5, 2, 10, auto) == 2  # 4 free for it over 2 replicas
    assert derived_slots(9.0, 4, 2, 10, auto) == 3  # 5 over 2, rounded up
    assert derived_slots(9.0, 9, 2, 10, auto) == 1  # it holds its quantile: the floor
    assert derived_slots(30.0, 0, 2, 10, auto) == 5  # the policy's bound
    assert derived_slots(30.0, 0, 2, 4, AutoHeadroom(max_slots=8)) == 3  # a lower class keeps one slot
    assert derived_slots(9.0, 0, 0, 10, auto) == 0  # no healthy replica: nothing to keep


class _Router:
    def __init__(self) -> None:
        self.replicas = [ReplicaState(id=f"r{k}", url=f"http://127.0.0.1:{k + 1}") for k in range(2)]
        self.now = 0.0

    def clock(self) -> float:
        return self.now


def test_the_gateway_keeps_the_derived_headroom_for_the_highest_class_and_an_explicit_one_wins():
    cfg = FairnessConfig(enabled=True, slots_per_replica=10, auto_headroom=True)
    router = _Router()
    pq = _PoolQueue(4, cfg, LimitsConfig(), router)  # type: ignore[arg-type]
    assert pq.sat_limits().reserved == 5  # a cold start: the bound (half the slots) until it is measured
    for k in range(40):  # interactive requests over 4 s: four stay open, each later one makes 5 and ends
        router.now = k / 10
        pq.top.started(router.now)
        if pq.top.count > 4:
            pq.top.ended(router.now)
    router.now = 4.2
    assert pq.top.count == 4
    lim = pq.sat_limits()
    assert lim.slots == 10 and lim.headroom == 0
    assert pq.top.quantile(router.now, 0.9) == 5.0
    # 4 of its 5 held now: 1 over 2 replicas, rounded up; lower classes see 10 - 1, the highest all 10
    assert lim.reserved == 1 and lim.for_band(1).slots == 9 and lim.for_band(0).slots == 10
    for _ in range(4):
        pq.top.ended(router.now)
    router.now = 4.4  # none open: the 5 of its quantile are kept, 3 a replica
    assert pq.sat_limits().reserved == 3
    explicit = FairnessConfig(enabled=True, slots_per_replica=8, headroom_slots=2, auto_headroom=True)
    assert auto_headroom(explicit, LimitsConfig()) is None
    fixed = _PoolQueue(4, explicit, LimitsConfig(), router)  # type: ignore[arg-type]
    assert (fixed.sat_limits().reserved, fixed.sat_limits().headroom) == (0, 2)
