"""bench.peer_models.SglangCacheAware: sglang-router 0.3.2's cache_aware decision rule, pure."""

from bench.peer_models import SglangCacheAware, SmgCacheAware
from router.policies.base import PickContext
from router.replica import ReplicaState
from router.types import RouteRequest

REQ = RouteRequest("chat", "m", {})


def fleet(*loads: int) -> list[ReplicaState]:
    return [ReplicaState(id=f"r{i}", url=f"sim://{i}", in_flight=n) for i, n in enumerate(loads)]


def ctx(cands: list[ReplicaState], hashes: list[int], tokens: int) -> PickContext:
    return PickContext(REQ, cands, prompt_tokens=tokens, block_size=16, block_hashes=hashes)


def test_match_above_threshold_sticks_to_the_matching_replica() -> None:
    pol, cands = SglangCacheAware(), fleet(0, 0, 0)
    assert pol.pick(ctx(cands, [1, 2, 3, 4], 64)) == (cands[0], "cold")
    cands[0].in_flight = 5  # busier, but not imbalanced by the thresholds
    assert pol.pick(ctx(cands, [1, 2, 9, 8], 64)) == (cands[0], "affinity")  # 2 of 4 blocks > 0.3


def test_match_at_or_below_threshold_goes_to_the_smallest_tree() -> None:
    pol, cands = SglangCacheAware(), fleet(0, 0)
    pol.pick(ctx(cands, [1, 2, 3, 4, 5, 6, 7], 112))  # r0's tree: 7 blocks
    pol.pick(ctx(cands, [20, 21], 32))  # r1's tree is smaller: 2 blocks
    # 2 of 7 blocks matched on r0 (0.29 <= 0.3): the smallest tree, r1, takes it
    assert pol.pick(ctx(cands, [1, 2, 30, 31, 32, 33, 34], 112)) == (cands[1], "cold")


def test_imbalance_beyond_both_thresholds_picks_the_least_loaded() -> None:
    pol, cands = SglangCacheAware(), fleet(0, 0)
    pol.pick(ctx(cands, [1, 2, 3], 48))
    cands[0].in_flight, cands[1].in_flight = 100, 30  # 70 > 64 and 100 > 1.5 x 30
    assert pol.pick(ctx(cands, [1, 2, 3], 48)) == (cands[1], "balance")
    cands[1].in_flight = 70  # 30 apart: not imbalanced, the match wins again
    assert pol.pick(ctx(cands, [1, 2, 3], 48)) == (cands[0], "affinity")


def reported(cands: list[ReplicaState], *running: float, kv: float = 0.0) -> None:
    for r, n in zip(cands, running, strict=True):
        r.reported_running, r.reported_waiting, r.reported_kv_usage, r.reported_at = n, 0.0, kv, 1.0


def test_smg_sends_a_first_turn_to_the_least_expected_wait_not_the_smallest_tree() -> None:
    pol, cands = SmgCacheAware(), fleet(0, 0)
    reported(cands, 0, 5)  # r1 reports 5 running: its wait is 5 x 1,024 / 2,000 s longer
    assert pol.pick(ctx(cands, [20, 21], 32)) == (cands[0], "expected_wait_fallback")  # r0's tree: 2
    # r0's tree holds 2 blocks, r1's none: sglang-router 0.3.2 would pick r1 (the smallest tree)
    assert pol.pick(ctx(cands, [1, 2, 3, 4, 5, 6, 7], 112)) == (cands[0], "expected_wait_fallback")


def test_smg_counts_its_dispatches_since_the_last_report_and_a_new_report_releases_them() -> None:
    pol, cands = SmgCacheAware(seed=1), fleet(0, 0)
    reported(cands, 0, 0)
    first = pol.pick(ctx(cands, [1], 16))[0]
    other = cands[1] if first is cands[0] else cands[0]
    assert pol.pick(ctx(cands, [2], 16))[0] is other  # the first dispatch is credited to ``first``
    for r in cands:
        r.reported_at = 2.0  # a new report: both credits released, r0 reports less
    cands[0].reported_running = 0.0
    cands[1].reported_running = 1.0
    assert pol.pick(ctx(cands, [3], 16))[0] is cands[0]


def test_smg_picks_among_the_deepest_matches_by_expected_wait_and_spills_a_hot_holder() -> None:
    pol, cands = SmgCacheAware(), fleet(0, 0, 0)
    reported(cands, 0, 0, 0)
    home = pol.pick(ctx(cands, [1, 2, 3, 4], 64))[0]
    home.reported_running = 3.0  # busier than the others, but the only holder of the prefix
    assert pol.pick(ctx(cands, [1, 2, 9, 8], 64)) == (home, "tree_match")
    home.in_flight = 200  # past 1.5 x and 64 above the fleet's mean in flight (73): it spills
    for r in cands:
        if r is not home:
            r.in_flight = 10
    chosen, reason = pol.pick(ctx(cands, [1, 2, 7, 6], 64))
    assert chosen is not home and reason == "spill"


def test_smg_leaves_out_a_replica_its_report_shows_overloaded() -> None:
    pol, cands = SmgCacheAware(), fleet(0, 0)
    reported(cands, 0, 0)
    home = pol.pick(ctx(cands, [1, 2, 3, 4], 64))[0]
    home.reported_kv_usage, home.reported_at = 0.8, 2.0  # a poll at the 0.8 KV ceiling: out while
    # the other is under it
    assert pol.pick(ctx(cands, [1, 2, 3, 5], 64)) == (cands[1] if home is cands[0] else cands[0], "spill")


def test_smg_reads_a_report_only_once_its_poll_interval_has_passed() -> None:
    pol, cands = SmgCacheAware(poll_s=10.0), fleet(0, 0)
    reported(cands, 0, 0)
    home = pol.pick(ctx(cands, [1, 2, 3, 4], 64))[0]
    home.reported_kv_usage, home.reported_at = 0.9, 5.0  # 4 s after its poll: not read yet
    assert pol.pick(ctx(cands, [1, 2, 3, 5], 64)) == (home, "tree_match")
    home.reported_at = 11.0  # 10 s after: read, and over the ceiling
    assert pol.pick(ctx(cands, [1, 2, 3, 6], 64))[0] is not home
