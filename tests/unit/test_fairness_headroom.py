"""The highest class's headroom derived from its measured concurrency (router.fairness.headroom) and the
gateway's use of it (fairness.auto_headroom): pure, no sockets."""

from __future__ import annotations

from config.fairness import FairnessConfig
from config.policy import LimitsConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.process.fair_admission import FairAdmission, _PoolQueue, auto_headroom
from router.fairness.headroom import (
    WARM_ARRIVALS,
    AutoHeadroom,
    TopConcurrency,
    derived_slots,
    poisson_quantile,
)
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
    cfg = FairnessConfig(
        enabled=True, slots_per_replica=10, auto_headroom=True, auto_headroom_model="observed"
    )
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


# -- the Poisson model (issue 28, round 6) ----------------------------------------------------------------
def test_the_poisson_quantile_is_the_least_count_whose_cdf_reaches_q():
    # Poisson(5): P(N <= 4) 0.440, <= 5 0.616, <= 8 0.932, <= 9 0.968, <= 10 0.986, <= 11 0.995
    assert [poisson_quantile(5.0, q) for q in (0.5, 0.9, 0.95, 0.99)] == [5, 8, 9, 11]
    assert poisson_quantile(0.0, 0.99) == 0  # never seen: nothing to keep
    assert poisson_quantile(5.0, 1.0, most=40) == 40  # the whole tail: the cap
    assert poisson_quantile(50.0, 0.999, most=20) == 20
    assert 1_000 <= poisson_quantile(1_000.0, 0.5) <= 1_001  # no underflow at a large mean (e^-1000)


def _steady(top: TopConcurrency, rate: float, hold: float, until: float, start: float = 0.0) -> list[float]:
    """Arrivals every 1 / ``rate`` s from ``start`` to ``until``, each ending ``hold`` s later: the ends
    after ``until`` are returned, not applied."""
    ends: list[float] = []
    t = start
    while t < until:
        while ends and ends[0] <= t:
            top.ended(ends.pop(0))
        top.started(t)
        ends.append(t + hold)
        t += 1 / rate
    return ends


def test_the_load_is_littles_law_over_the_window():
    top = TopConcurrency(window_s=10.0)
    left = _steady(top, rate=4.0, hold=1.5, until=40.0)
    got = top.load(40.0)
    assert got.seconds == 10.0 and abs(got.rate_per_s - 4.0) < 0.11
    assert abs(got.service_s - 1.5) < 0.1 and abs(got.concurrency - 6.0) < 0.2  # L = lambda x W
    for end in left:
        top.ended(end)
    _steady(top, rate=1.0, hold=0.5, until=80.0, start=42.0)  # the load falls: the window follows it
    got = top.load(80.0)
    assert abs(got.rate_per_s - 1.0) < 0.11 and abs(got.concurrency - 0.5) < 0.1


def test_the_poisson_model_keeps_room_for_a_burst_the_window_never_showed():
    # arrivals evenly 0.2 s apart, held 0.99 s: every arrival makes a count of 5 (the observed quantile
    # sees no burst at all); five independent arrivals a second, held 0.99 s, are 9 at once 5 % of the time
    top = TopConcurrency(window_s=30.0)
    _steady(top, rate=5.0, hold=0.99, until=60.0)
    observed = AutoHeadroom(max_slots=5, quantile=0.95, model="observed")
    poisson = AutoHeadroom(max_slots=5, quantile=0.95, model="poisson")
    assert top.needed(60.0, observed, prior=10.0) == 5.0
    assert top.needed(60.0, poisson, prior=10.0) == 9.0
    # with 4 open now, 2 replicas of 10 slots: the observed model keeps the floor, the model (9 - 4) / 2
    assert derived_slots(5.0, 4, 2, 10, observed) == 1
    assert derived_slots(9.0, 4, 2, 10, poisson) == 3


def test_the_poisson_model_keeps_the_bound_until_its_rate_is_measured_then_the_floor_when_idle():
    auto = AutoHeadroom(max_slots=5, quantile=0.95)
    top = TopConcurrency(window_s=30.0, since=0.0)
    assert top.needed(0.0, auto, prior=10.0) == 10.0  # nothing seen: the bound
    for k in range(WARM_ARRIVALS - 1):
        top.started(k * 0.1)
        top.ended(k * 0.1 + 0.05)
    assert top.needed(1.0, auto, prior=10.0) == 10.0  # too few arrivals in the first window
    top.started(1.0)
    top.ended(1.05)
    assert top.needed(1.1, auto, prior=10.0) < 10.0  # measured
    assert top.needed(200.0, auto, prior=10.0) == 0.0  # idle past the window: none kept (the floor's)
    assert derived_slots(0.0, 0, 2, 10, auto) == 1


def test_the_gateway_derives_the_headroom_from_the_poisson_model_by_default():
    cfg = FairnessConfig(enabled=True, slots_per_replica=10, auto_headroom=True)
    assert (cfg.auto_headroom_model, cfg.auto_headroom_quantile) == ("poisson", 0.95)
    assert auto_headroom(cfg, LimitsConfig()) == AutoHeadroom(5, 1, 0.95, 30.0, "poisson")
    router = _Router()
    pq = _PoolQueue(4, cfg, LimitsConfig(), router)  # type: ignore[arg-type]
    ends: list[float] = []
    for k in range(300):  # 5 a second, each held 1 s, over 60 s
        router.now = k / 5
        while ends and ends[0] <= router.now:
            pq.top.ended(ends.pop(0))
        pq.top.started(router.now)
        ends.append(router.now + 1.0)
    assert pq.top.count == 5
    # L = 5: room for 9 at once; 5 open now: (9 - 5) / 2 replicas = 2 a replica
    assert pq.sat_limits().reserved == 2


def test_the_gateway_exports_the_load_the_headroom_is_derived_from():
    cfg = FairnessConfig(enabled=True, slots_per_replica=10, auto_headroom=True)
    router = _Router()
    admission = FairAdmission(GatewayMetrics())
    pq = admission._pool("m", cfg, LimitsConfig(), router)  # type: ignore[arg-type]
    for k in range(100):  # 4 a second, each held 0.2 s, over 25 s
        router.now = k / 4
        pq.top.started(router.now)
        router.now += 0.2
        pq.top.ended(router.now)
    router.now = 25.0
    pq.sat_limits()
    admission._gauge_headroom("m", pq)
    reg = admission.metrics.registry

    def term(name: str) -> float | None:
        return reg.get_sample_value("prefix_gateway_fair_headroom_model", {"pool": "m", "term": name})

    assert abs(term("arrival_rate_per_s") - 4.0) < 0.01  # type: ignore[operator]
    assert abs(term("service_s") - 0.2) < 0.01  # type: ignore[operator]
    assert abs(term("concurrency") - 0.8) < 0.02  # type: ignore[operator]
    assert term("needed") == 2.0  # Poisson(0.8): P(N <= 1) 0.809, P(N <= 2) 0.953
    assert reg.get_sample_value("prefix_gateway_fair_headroom_slots", {"pool": "m"}) == 1.0  # 2 over 2
