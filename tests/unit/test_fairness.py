"""The pure parts of tenant-fair admission (router.fairness): saturation, classes, work, the fair
queue, the TTFT prediction. Deterministic: time is passed in."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from pydantic import ValidationError

from config.checks import policy_warnings
from config.policy import Policy
from config.routing import RoutingConfig
from gateway.process.fair_admission import saturation_limits
from router.fairness.classes import BATCH_BAND, ClassSpec, UnknownClass, batch_band, resolve
from router.fairness.queue import FairQueue, QueueFull, Waiter
from router.fairness.release import queues_for_home, release
from router.fairness.saturation import SaturationLimits, free_slots, pool_saturation
from router.fairness.ttft import ReplicaView, ServiceTime, predict_s, retry_after_s
from router.fairness.work import predicted_work
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest

CLASSES = (
    ClassSpec("interactive", 0, 2.0, 0.5),
    ClassSpec("standard", 1, 10.0),
    ClassSpec("background", 2, 30.0),
)


def _w(flow, band=1, work=100.0, weight=1.0, at=0.0, max_wait=1e9, tag=None):
    return Waiter(flow, band, work, weight, at, max_wait, payload=tag)


# -- saturation --------------------------------------------------------------------------------------
def test_a_pool_is_saturated_when_no_healthy_replica_has_a_free_slot():
    a, b = ReplicaState("a", "u"), ReplicaState("b", "u")
    lim = SaturationLimits(slots=2)
    a.in_flight, b.in_flight = 2, 1
    sat = pool_saturation([a, b], lim, now=0.0)
    assert (sat.free_slots, sat.saturated) == (1, False)
    b.in_flight = 2
    assert pool_saturation([a, b], lim, 0.0).saturated
    b.in_flight, b.healthy = 0, False  # an unhealthy replica's slots are no room
    assert pool_saturation([a, b], lim, 0.0).saturated


def test_fresh_reports_of_kv_usage_or_an_engine_queue_make_a_replica_full():
    r = ReplicaState("a", "u")
    lim = SaturationLimits(slots=4, kv_usage=0.9, max_waiting=2, max_report_age_s=5)
    r.reported_kv_usage, r.reported_waiting, r.reported_at = 0.95, 0, 10.0
    assert free_slots(r, lim, now=11.0) == 0
    assert pool_saturation([r], lim, 11.0).full_by_report == {"a"}
    assert free_slots(r, lim, now=16.0) == 4  # stale: the report says nothing
    r.reported_kv_usage, r.reported_waiting = 0.5, 3
    assert free_slots(r, lim, now=11.0) == 0
    r.reported_waiting = 2
    assert free_slots(r, lim, now=11.0) == 4
    assert free_slots(r, SaturationLimits(slots=4), now=11.0) == 4  # bounds not set: not read


# -- classes -----------------------------------------------------------------------------------------
def test_a_class_above_the_tenants_ceiling_is_capped_and_unknown_names_refused():
    got = resolve("interactive", CLASSES, "standard", ceiling="standard")
    assert (got.spec.name, got.capped) == ("standard", True)
    got = resolve("Background", CLASSES, "standard", ceiling="standard")
    assert (got.spec.name, got.capped) == ("background", False)
    assert resolve(None, CLASSES, "standard", ceiling="interactive").spec.name == "standard"
    assert resolve("interactive", CLASSES, "standard", ceiling="interactive").spec.name == "interactive"
    with pytest.raises(UnknownClass):
        resolve("urgent", CLASSES, "standard", ceiling="interactive")
    band = batch_band(CLASSES, 60.0)
    assert (band.name, band.rank) == (BATCH_BAND, 3)


def test_work_counts_uncached_prefill_and_weighted_decode():
    assert predicted_work(1000, 800, 10, decode_weight=5) == 250
    assert predicted_work(1000, 2000, 0, decode_weight=5) == 1.0  # never free
    assert predicted_work(100, 0, 16, decode_weight=0) == 100


# -- the fair queue ------------------------------------------------------------------------------------
def test_a_flood_queued_first_does_not_delay_another_tenants_requests_behind_its_backlog():
    q = FairQueue(bands=3, max_queued=1000)
    for _ in range(100):
        q.push(_w("flood"), flow_cap=1000)
    for i in range(3):
        q.push(_w("calm", tag=i), flow_cap=1000)
    order = [q.pop(0.0).flow for _ in range(8)]
    # calm's three requests are released within the first six, alternating with the flood's
    assert order.count("calm") == 3 and order.index("calm") <= 1
    assert order[:6].count("calm") == 3


def test_shares_follow_weights_by_work_while_both_tenants_are_backlogged():
    q = FairQueue(bands=1, max_queued=10_000)
    for _ in range(300):
        q.push(Waiter("heavy", 0, 100.0, 3.0, 0.0, 1e9), 10_000)  # weight 3
        q.push(Waiter("light", 0, 100.0, 1.0, 0.0, 1e9), 10_000)
    served = Counter(q.pop(0.0).flow for _ in range(200))
    assert served["heavy"] == pytest.approx(150, abs=2)
    # work, not requests: a tenant with 4x the work per request gets a quarter of the requests
    q = FairQueue(bands=1, max_queued=10_000)
    for _ in range(300):
        q.push(Waiter("big", 0, 400.0, 1.0, 0.0, 1e9), 10_000)
        q.push(Waiter("small", 0, 100.0, 1.0, 0.0, 1e9), 10_000)
    served = Counter(q.pop(0.0).flow for _ in range(100))
    assert served["small"] == pytest.approx(80, abs=2)


def test_a_higher_band_goes_first_and_batch_lines_last():
    q = FairQueue(bands=4, max_queued=100)
    q.push(_w(None, band=3, tag="batch"), 100)
    q.push(_w("t", band=2, tag="background"), 100)
    q.push(_w("t", band=1, tag="standard"), 100)
    q.push(_w("u", band=0, tag="interactive"), 100)
    assert [q.pop(0.0).payload for _ in range(4)] == ["interactive", "standard", "background", "batch"]
    assert q.pop(0.0) is None


def test_a_request_past_its_classes_max_wait_goes_first():
    q = FairQueue(bands=3, max_queued=100)
    old = _w("t", band=2, at=0.0, max_wait=30.0, tag="old-background")
    q.push(old, 100)
    for i in range(5):
        q.push(_w("u", band=0, at=float(i), tag=f"i{i}"), 100)
    assert q.pop(10.0).payload == "i0"  # not due yet: the band order
    assert q.pop(30.0).payload == "old-background"  # waited its 30 s: before the higher band
    assert q.pop(30.0).payload == "i1"


def test_a_full_queue_preempts_the_newest_waiter_of_a_lower_band_only():
    q = FairQueue(bands=3, max_queued=3)
    low1, low2, mid = _w("a", band=2, tag="low1"), _w("a", band=2, tag="low2"), _w("b", band=1)
    for w in (low1, low2, mid):
        q.push(w, 10)
    hi = _w("c", band=0)
    assert q.push(hi, 10) is low2 and not low2.queued
    with pytest.raises(QueueFull) as full:
        q.push(_w("d", band=2), 10)  # nothing below the lowest band
    assert full.value.scope == "queue"
    assert len(q) == 3


def test_a_tenant_over_its_queue_cap_is_refused_and_a_removed_waiter_returns_its_share():
    q = FairQueue(bands=1, max_queued=100)
    a1 = Waiter("a", 0, 100.0, 1.0, 0.0, 1e9)
    q.push(a1, flow_cap=2)
    q.push(Waiter("a", 0, 100.0, 1.0, 0.0, 1e9), flow_cap=2)
    with pytest.raises(QueueFull) as full:
        q.push(Waiter("a", 0, 100.0, 1.0, 0.0, 1e9), flow_cap=2)
    assert full.value.scope == "tenant"
    last = Waiter("b", 0, 100.0, 1.0, 0.0, 1e9)
    q.push(last, 10)
    q.remove(last)  # gave up: b's next request starts where this one did
    again = Waiter("b", 0, 100.0, 1.0, 0.0, 1e9)
    q.push(again, 10)
    assert again.start == last.start
    assert q.depth() == {("a", 0): 2, ("b", 0): 1}


def test_lookahead_prefers_a_waiter_whose_prefix_lives_on_the_freed_replica_within_the_window():
    q = FairQueue(bands=1, max_queued=100)
    for i in range(6):
        q.push(Waiter(f"t{i}", 0, 100.0, 1.0, 0.0, 1e9, payload=("home-b" if i in (2, 5) else "home-a")), 100)
    pick = q.pop(0.0, prefer=lambda w: w.payload == "home-b", lookahead=4)
    assert pick.flow == "t2"
    pick = q.pop(0.0, prefer=lambda w: w.payload == "home-b", lookahead=2)
    assert pick.flow == "t0"  # t5 is beyond the window: fair order
    assert q.ahead(Waiter("x", 0, 1, 1, 0, 1, start=1e9, seq=10**6)) == 4


def test_requeue_keeps_the_waiters_place():
    q = FairQueue(bands=1, max_queued=10)
    a, b = Waiter("a", 0, 10, 1, 0, 1e9), Waiter("b", 0, 10, 1, 0, 1e9)
    q.push(a, 10)
    q.push(b, 10)
    got = q.pop(0.0)
    q.requeue(got)
    assert q.pop(0.0) is got


# -- TTFT --------------------------------------------------------------------------------------------
def test_ttft_prediction_reads_the_replicas_queues_and_the_wait_for_a_slot():
    views = [ReplicaView(15_000, 1000, 15_000.0, True), ReplicaView(0, 3000, 15_000.0, False)]
    # nothing ahead: the best free replica (1 s of queue + its own prefill)
    assert predict_s(views, ahead=0, slots=4, service_s=2.0, overhead_s=0.01) == pytest.approx(
        16_000 / 15_000 + 0.01
    )
    # 7 ahead, 4 slots held 2 s each: 4 s for a slot, then the best replica whatever its slots
    assert predict_s(views, ahead=7, slots=4, service_s=2.0, overhead_s=0.01) == pytest.approx(
        4.0 + 0.2 + 0.01
    )
    assert predict_s([], ahead=0, slots=1, service_s=1, overhead_s=0) == math.inf
    assert retry_after_s(4.3, 0.5) == 4 and retry_after_s(0.6, 0.5) == 1 and retry_after_s(math.inf, 1) == 60


def test_service_time_learns_towards_what_attempts_take():
    s = ServiceTime(1.0, alpha=0.5)
    s.observe(3.0)
    assert s.value == 2.0
    s.observe(-1)  # ignored
    assert s.value == 2.0


# -- release -----------------------------------------------------------------------------------------
class _Held:
    def __init__(self, request, home, matched=None):
        self.request, self.exclude, self.home, self.gone = request, (), home, False
        self.matched = matched or {}


def _prompt(text: str) -> RouteRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text * 200}]}
    return RouteRequest("chat", "m", body)


@pytest.mark.parametrize(("lookahead", "released"), [(4, "p0"), (1, "p1")])
def test_a_freed_replica_gets_the_waiter_whose_prefix_it_holds_within_the_lookahead(lookahead, released):
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u")
    router = PoolRouter([r0, r1], RoutingConfig(policy="prefix_affinity"), clock=lambda: 0.0, slot_limit=1)
    homes = {}
    for name, busy in (("p0", r1), ("p1", r0)):  # each prefix placed where the other replica is full
        busy.in_flight = 1
        d = router.route(_prompt(name))
        homes[name] = d.replica.id
        router.release(d)
        busy.in_flight = 0
    assert homes == {"p0": "r0", "p1": "r1"}
    q = FairQueue(bands=1, max_queued=10)
    for name in ("p1", "p0"):  # p1 first in fair order
        prompt_tokens, matched = router.matches(_prompt(name))
        assert max(matched, key=matched.get) == homes[name] and prompt_tokens > 0
        q.push(Waiter("t", 0, 10, 1, 0, 1e9, payload=_Held(_prompt(name), homes[name])), 10)
    r0.in_flight, r1.in_flight = 0, 1  # r0 frees
    out = list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead))
    assert len(out) == 1  # one slot, one release; the pool is saturated again
    waiter, decision = out[0]
    assert waiter.payload.home == homes[released] and decision.replica.id == "r0"
    assert len(q) == 1 and r0.in_flight == 1


# -- the policy section --------------------------------------------------------------------------------
def _policy(fairness: dict, **limits):
    return Policy.model_validate(
        {
            "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:1"}]}],
            "fairness": fairness,
            "limits": limits,
        }
    )


def test_the_fairness_section_is_off_by_default_and_checked_when_on():
    assert _policy({}).fairness.enabled is False
    assert _policy({"enabled": True}, max_concurrent_per_replica=4).fairness.enabled
    bad = [
        ({"enabled": True}, {}, "slots_per_replica"),  # no slots: nowhere to start queueing
        ({"enabled": True, "slots_per_replica": 2, "reserved_slots": 2}, {}, "reserved_slots"),
        ({"default_class": "gold"}, {}, "default_class"),
        ({"classes": [{"name": "batch"}], "default_class": "batch"}, {}, "batch"),
        ({"tenants": [{"id": "t", "max_priority": "gold"}]}, {}, "max_priority"),
        ({"tenants": [{"id": "t"}, {"id": "t"}]}, {}, "unique"),
        ({"on_objective_miss": "drop"}, {}, "on_objective_miss"),
    ]
    for fairness, limits, word in bad:
        with pytest.raises(ValidationError) as err:
            _policy(fairness, **limits)
        assert word in str(err.value), (fairness, str(err.value))


def test_a_waiter_that_cannot_use_the_free_slot_keeps_its_place_without_holding_the_queue():
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u", in_flight=1)  # r1 full, r0 free
    router = PoolRouter([r0, r1], RoutingConfig(policy="prefix_affinity"), clock=lambda: 0.0, slot_limit=1)
    q = FairQueue(bands=1, max_queued=10)
    tried = _Held(_prompt("a"), "r0")
    tried.exclude = ("r0",)  # a retry: it already failed on the only replica with room
    q.push(Waiter("t", 0, 10, 1, 0, 1e9, payload=tried), 10)
    q.push(Waiter("u", 0, 10, 1, 0, 1e9, payload=_Held(_prompt("b"), None)), 10)
    out = list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4))
    assert [w.flow for w, _ in out] == ["u"] and out[0][1].replica.id == "r0"
    assert len(q) == 1 and q.pop(0.0).payload is tried  # still first in line


def test_check_config_warns_when_the_process_limit_fills_before_the_fair_queue():
    fair = {"enabled": True, "slots_per_replica": 8, "max_queued": 1024}
    warned = [path for path, _ in policy_warnings(_policy(fair))]
    assert "limits.max_concurrent_requests" in warned  # 1024 < 1024 queued + 8 slots
    fine = _policy(fair, max_concurrent_requests=2048)
    assert "limits.max_concurrent_requests" not in [p for p, _ in policy_warnings(fine)]


# -- headroom above the slots (issue 28, round 2) -------------------------------------------------------
def test_headroom_above_the_slots_is_room_for_the_highest_class_only():
    lim = SaturationLimits(slots=2, reserved=1, headroom=1)
    assert (lim.for_band(0).slots, lim.for_band(1).slots, lim.for_band(2).slots) == (3, 1, 1)
    r = ReplicaState("a", "u", in_flight=2)
    assert pool_saturation([r], lim.for_band(1), 0.0).saturated
    assert free_slots(r, lim.for_band(0), 0.0) == 1  # the flood filled the slots; interactive still fits


def test_a_release_gives_the_headroom_to_an_interactive_waiter_and_keeps_the_flood_at_the_slots():
    r0 = ReplicaState("r0", "u", in_flight=2)  # both slots taken by a lower class
    router = PoolRouter([r0], RoutingConfig(policy="prefix_affinity"), clock=lambda: 0.0, slot_limit=3)
    q = FairQueue(bands=2, max_queued=10)
    q.push(Waiter("flood", 1, 10, 1, 0, 1e9, payload=_Held(_prompt("f"), None)), 10)
    q.push(Waiter("calm", 0, 10, 1, 0, 1e9, payload=_Held(_prompt("c"), None)), 10)
    q.push(Waiter("calm", 0, 10, 1, 0, 1e9, payload=_Held(_prompt("d"), None)), 10)
    out = list(release(q, router, SaturationLimits(slots=2, headroom=1), 0.0, lookahead=4))
    assert [w.flow for w, _ in out] == ["calm"] and r0.in_flight == 3  # one headroom slot, used once
    assert len(q) == 2
    r0.in_flight = 0  # all ended: calm's goes first, then the flood's up to the slots, not past them
    out = list(release(q, router, SaturationLimits(slots=2, headroom=1), 0.0, lookahead=4))
    assert [w.flow for w, _ in out] == ["calm", "flood"] and r0.in_flight == 2
    assert not len(q)


def test_a_replica_past_the_queued_prefill_bound_is_full_below_the_highest_class_only():
    lim = SaturationLimits(slots=8, max_prefill_tokens=512)
    r = ReplicaState("a", "u", in_flight=1)
    r.queued_prefill_tokens = 512
    assert free_slots(r, lim.for_band(1), 0.0) == 7  # at the bound: still room
    r.queued_prefill_tokens = 513
    assert free_slots(r, lim.for_band(1), 0.0) == 0
    assert pool_saturation([r], lim.for_band(1), 0.0).saturated
    assert free_slots(r, lim.for_band(0), 0.0) == 7  # an interactive request is not held by it
    assert not pool_saturation([r], lim.for_band(0), 0.0).saturated


def test_the_fairness_section_passes_headroom_and_the_prefill_bound_to_the_queue():
    p = _policy(
        {"enabled": True, "slots_per_replica": 8, "headroom_slots": 2, "max_queued_prefill_tokens": 1024}
    )
    lim = saturation_limits(p.fairness, p.limits)
    assert (lim.for_band(0).slots, lim.for_band(1).slots, lim.for_band(1).max_prefill_tokens) == (10, 8, 1024)
    assert lim.for_band(0).max_prefill_tokens is None


def test_overdue_waiters_of_one_band_keep_the_bands_weighted_order():
    # Found by the Mooncake trace (bench.fairness_trace): under a sustained overload every waiter of the
    # band was past its class's max_wait_s, and the starvation bound, applied inside the band, released
    # them in arrival order: the weights 3:1 gave shares 0.53 / 0.47. The bound is for lower bands.
    q = FairQueue(bands=2, max_queued=100)
    for i in range(20):
        q.push(_w("light", band=1, weight=1.0, at=float(i), max_wait=10.0), 100)
        q.push(_w("heavy", band=1, weight=3.0, at=float(i) + 0.5, max_wait=10.0), 100)
    first = [q.pop(100.0).flow for _ in range(16)]  # all overdue
    assert Counter(first) == {"heavy": 12, "light": 4}, first
    low = _w("old", band=1, at=0.0, max_wait=10.0)
    q2 = FairQueue(bands=2, max_queued=100)
    q2.push(low, 100)
    q2.push(_w("u", band=0, at=50.0), 100)
    assert q2.pop(100.0) is low  # a lower band's overdue waiter still goes before the higher band


def _homed(router, name, home_busy_elsewhere):
    """Place prompt ``name`` on the replica that is not ``home_busy_elsewhere``; its home and matches."""
    home_busy_elsewhere.in_flight = 1
    d = router.route(_prompt(name))
    router.release(d)
    home_busy_elsewhere.in_flight = 0
    _, matched = router.matches(_prompt(name))
    return d.replica.id, matched


def test_a_waiter_waits_for_its_full_home_while_the_prefill_it_saves_outweighs_the_wait():
    # issue 28 round 3: a release sent a conversation to the replica with room when the one holding its
    # prefix was full (the Mooncake trace at 2 x: hit rate 0.093 against no gateway queue's 0.162)
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u")
    cfg = RoutingConfig(policy="prefix_affinity")
    clock = [0.0]
    router = PoolRouter([r0, r1], cfg, clock=lambda: clock[0], slot_limit=1)
    home, matched = _homed(router, "long", r0)
    assert home == "r1" and matched["r1"] > 0 and matched.get("r0", 0) == 0
    bound = (1 + cfg.reuse_weight) * matched["r1"] / cfg.prefill_tokens_per_s  # as the router weighs it
    q = FairQueue(bands=2, max_queued=10)
    q.push(Waiter("t", 1, 10, 1, 0, 1e9, payload=_Held(_prompt("long"), home, matched)), 10)
    q.push(Waiter("u", 1, 10, 1, 0, 1e9, payload=_Held(_prompt("cold"), None)), 10)
    r1.in_flight = 1  # its home is full, r0 frees
    out = list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4))
    assert [w.flow for w, _ in out] == ["u"] and out[0][1].replica.id == "r0"  # the cold one takes r0
    assert len(q) == 1
    r0.in_flight = 0  # r0 frees again, within the bound: it still waits for its home
    clock[0] = bound / 2
    assert list(release(q, router, SaturationLimits(slots=1), clock[0], lookahead=4)) == []
    r1.in_flight = 0  # its home frees: it goes there, its prefix cached
    out = list(release(q, router, SaturationLimits(slots=1), clock[0], lookahead=4))
    assert [d.replica.id for _, d in out] == ["r1"] and out[0][1].matched_tokens == matched["r1"]


def test_a_waiter_held_for_its_home_goes_elsewhere_past_the_bound_and_a_small_prefix_is_not_held():
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u")
    cfg = RoutingConfig(policy="prefix_affinity")
    router = PoolRouter([r0, r1], cfg, clock=lambda: 0.0, slot_limit=1)
    home, matched = _homed(router, "long", r0)
    bound = (1 + cfg.reuse_weight) * matched[home] / cfg.prefill_tokens_per_s
    q = FairQueue(bands=2, max_queued=10)
    w = Waiter("t", 1, 10, 1, 0, 1e9, payload=_Held(_prompt("long"), home, matched))
    q.push(w, 10)
    r1.in_flight = 1
    assert list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4)) == []
    out = list(release(q, router, SaturationLimits(slots=1), bound * 1.01, lookahead=4))
    assert [d.replica.id for _, d in out] == ["r0"]  # waited its bound: the free slot, not its home
    # the same prefix held on the free replica too: nothing saved by waiting, released at once
    r0.in_flight = 0
    q.push(Waiter("t", 1, 10, 1, 0, 1e9, payload=_Held(_prompt("long"), home, {"r1": 100, "r0": 100})), 10)
    out = list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4))
    assert [d.replica.id for _, d in out] == ["r0"]


def test_a_waiter_waits_for_its_home_no_longer_than_its_classes_max_wait():
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u")
    cfg = RoutingConfig(policy="prefix_affinity")
    router = PoolRouter([r0, r1], cfg, clock=lambda: 0.0, slot_limit=1)
    home, matched = _homed(router, "long", r0)
    bound = (1 + cfg.reuse_weight) * matched[home] / cfg.prefill_tokens_per_s
    q = FairQueue(bands=2, max_queued=10)
    q.push(Waiter("t", 1, 10, 1, 0, bound / 4, payload=_Held(_prompt("long"), home, matched)), 10)
    r1.in_flight = 1
    assert list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4)) == []
    out = list(release(q, router, SaturationLimits(slots=1), bound / 2, lookahead=4))
    assert [d.replica.id for _, d in out] == ["r0"]  # past its class's max_wait_s, within the prefill bound


def test_the_highest_class_never_waits_for_its_home():
    r0, r1 = ReplicaState("r0", "u"), ReplicaState("r1", "u")
    router = PoolRouter([r0, r1], RoutingConfig(policy="prefix_affinity"), clock=lambda: 0.0, slot_limit=1)
    home, matched = _homed(router, "long", r0)
    assert queues_for_home(1, router, home, matched, (), {"r0"}, set())
    assert not queues_for_home(0, router, home, matched, (), {"r0"}, set())
    q = FairQueue(bands=2, max_queued=10)
    q.push(Waiter("t", 0, 10, 1, 0, 1e9, payload=_Held(_prompt("long"), home, matched)), 10)
    r1.in_flight = 1
    out = list(release(q, router, SaturationLimits(slots=1), 0.0, lookahead=4))
    assert [d.replica.id for _, d in out] == ["r0"]  # its headroom is there so that it never waits
