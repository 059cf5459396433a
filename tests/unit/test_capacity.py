"""router.capacity: each replica's KV capacity learned from its answers' cached_tokens (issue 24)."""

from __future__ import annotations

import argparse

from config.routing import RoutingConfig
from router.capacity import MAX_FACTOR, CapacityLearner
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest
from sim.cli import add_arguments, config_from_args
from sim.metrics import make_registry, render
from sim.state import Replica


def chat(text: str) -> RouteRequest:
    return RouteRequest("chat", "m", {"model": "m", "messages": [{"role": "user", "content": text}]})


def one(capacity: int | None = None, **cfg) -> PoolRouter:
    return PoolRouter(
        [ReplicaState(id="r0", url="", kv_capacity_blocks=capacity)], RoutingConfig(seed=1, **cfg)
    )


def text(tag: str, blocks: int) -> str:
    return (f"<{tag}>" + "x" * 64 * blocks)[: 64 * blocks]  # 16 approx tokens (one block) per 64 bytes


def test_evidence_learns_the_engine_grain_and_tolerates_its_rounding():
    learner = CapacityLearner(16)
    assert learner.evidence(96, 80).missing == 0  # one block short: the engine's last-token rule
    assert learner.evidence(96, 48).missing == 2
    learner = CapacityLearner(16)
    for cached in (128, 192, 64):
        learner.evidence(cached, cached)
    assert learner.grain == 64
    # 112 predicted (7 router blocks), 64 cached: a 64-token engine's rounding, not an eviction.
    assert learner.evidence(112, 64).missing == 0
    assert learner.evidence(320, 64).missing == 12  # 256 short, less one engine block
    assert learner.evidence(64, 320).surplus == 16


def test_the_estimate_moves_both_ways_and_stays_within_its_bounds():
    learner = CapacityLearner(16)
    learner.start("r", 1000)
    grown = learner.observe("r", learner.evidence(0, 160), index_size=1000)  # 10 blocks it had kept
    assert grown is not None and grown > 1000
    assert learner.observe("r", learner.evidence(0, 160), index_size=10) is None  # index not at its bound
    shrunk = learner.observe("r", learner.evidence(16 * 500, 0), index_size=grown)
    assert shrunk is not None and shrunk < grown
    for _ in range(1000):
        learner.observe("r", learner.evidence(0, 16 * 1000), index_size=10**9)
    assert learner.estimate("r").bound == 1000 * MAX_FACTOR
    for _ in range(1000):
        learner.observe("r", learner.evidence(16 * 5000, 0), index_size=10**9)
    assert learner.estimate("r").bound == 1000 // MAX_FACTOR
    assert learner.observe("gone", learner.evidence(0, 160), 10) is None


def test_an_unpredicted_hit_grows_the_index_bound_so_the_replica_is_remembered():
    """The default bound (8 blocks here) is below what the replica keeps: it reports a hit on a prompt
    the index had forgotten. The bound grows, and the next prompts of that size stay matched."""
    router = one(default_kv_capacity_blocks=8)
    d = router.route(chat(text("a", 6)))
    router.release(d)
    router.release(router.route(chat(text("b", 6))))  # the bound of 8 drops most of "a"
    again = router.route(chat(text("a", 6)))
    assert again.matched_tokens < 6 * 16
    router.observe_usage(again, 5 * 16)  # but the replica had it
    assert router.capacity_bound("r0") > 8 and router.index.stats().per_replica[
        "r0"
    ] <= router.capacity_bound("r0")
    router.release(again)
    router.release(router.route(chat(text("c", 6))))
    assert router.route(chat(text("a", 6) + "?")).matched_tokens == 6 * 16


def test_fixed_bound_when_learning_is_off():
    router = one(default_kv_capacity_blocks=8, learn_capacity=False)
    d = router.route(chat(text("a", 6)))
    router.observe_usage(d, 6 * 16 * 10)
    assert router.capacity_bound("r0") == 8


def test_a_64_token_engine_rounding_unlearns_nothing():
    """cached_tokens of a 64-token-block engine are multiples of 64: a prediction of 7 router blocks answered
    with 64 is its rounding. The old fixed one-block tolerance unlearned two entries per such answer."""
    router = one(capacity=10_000)
    for tag in "ab":  # two other prompts, the index's oldest entries
        router.release(router.route(chat(text(tag, 4))))
    for cached in (128, 192):  # answers that teach the grain (gcd 64)
        d = router.route(chat(text("g", 16) + str(cached)))
        router.observe_usage(d, cached)
        router.release(d)
    first = router.route(chat(text("c", 7)))
    router.release(first)
    d = router.route(chat(text("c", 7) + "and more"))
    assert d.matched_tokens == 7 * 16
    router.observe_usage(d, 64)
    assert router.index.stats().unlearned == 0
    assert router.index.match(router.route(chat(text("a", 4))).block_hashes)["r0"] == 4


def test_a_published_capacity_restarts_the_estimate_and_a_staying_replica_keeps_it():
    router = one(capacity=100)
    assert router.capacity_bound("r0") == 100
    router.set_capacity("r0", 400)
    assert router.capacity_bound("r0") == 400
    router.capacity.observe("r0", router.capacity.evidence(0, 16 * 50), index_size=400)
    learned = router.capacity_bound("r0")
    assert learned > 400
    router.set_replicas([ReplicaState(id="r0", url="u2", kv_capacity_blocks=400)])
    assert router.capacity_bound("r0") == learned


def copied(evict_weight: float) -> bool:
    """Two replicas whose caches (24 blocks) are full; a shared prompt homed on one of them, whose queue
    is longer than one re-prefill of the prompt. True when the next request of the prompt goes to the
    other replica (a copy)."""
    replicas = [ReplicaState(id=f"r{i}", url="", kv_capacity_blocks=24) for i in range(2)]
    router = PoolRouter(replicas, RoutingConfig(seed=1, evict_weight=evict_weight))
    prompt = text("shared", 10)
    for q in ("q0", "q1", "q2"):  # q2's match ends where q1's did: the prefix is shared from now on
        d = router.route(chat(prompt + q))
        router.release(d)
    home = d.replica
    other = next(r for r in replicas if r is not home)
    router.index.insert(other.id, [hash(("other", i)) for i in range(24)], 1.0)
    router.index.insert(home.id, [hash(("old", i)) for i in range(24)], 1.0)
    router.index.insert(home.id, d.block_hashes, 2.0)  # the home keeps the prompt, and is full
    assert router.index.headroom(home.id, 3.0)[0] == router.index.headroom(other.id, 3.0)[0] == 0
    home.queued_prefill_tokens = len(d.block_hashes) * 16 + 40
    return router.route(chat(prompt + "q3")).replica is other


def test_a_copy_that_evicts_from_a_full_cache_pays_for_it():
    """Issue 24's tight-cache case: under w = 0 a shared prompt is copied as soon as its home's queue
    exceeds one re-prefill, and the copy evicts another prompt that will be prefilled again."""
    assert copied(0.0)
    assert not copied(1.0)


def test_a_simulator_that_publishes_no_capacity():
    """bench.routing's ``--capacity`` cells other than ``pub`` need replicas whose KV capacity the gateway
    cannot read: the simulator's ``--no-cache-config-info``."""
    for flags, published in (([], True), (["--no-cache-config-info"], False)):
        parser = argparse.ArgumentParser()
        add_arguments(parser)
        cfg = config_from_args(parser.parse_args(flags))
        text = render(make_registry(Replica(cfg))).decode()
        assert ("vllm:cache_config_info" in text) == published
        assert "vllm:num_requests_running" in text
