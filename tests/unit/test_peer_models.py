"""bench.peer_models.SglangCacheAware: sglang-router 0.3.2's cache_aware decision rule, pure."""

from bench.peer_models import SglangCacheAware
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
