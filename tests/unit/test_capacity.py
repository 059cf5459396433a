"""router.capacity: each replica's KV capacity learned from its answers' cached_tokens (issue 24)."""

from __future__ import annotations

import argparse
import random

import pytest

from config.routing import RoutingConfig
from router import capacity
from router.capacity import (
    GROW,
    MAX_FACTOR,
    PUBLISHED_FACTOR,
    UNPUBLISHED_GROW,
    UNPUBLISHED_LOW,
    CapacityLearner,
    CounterWindow,
    DepthTally,
    Evidence,
)
from router.index import PrefixIndex
from router.policies import prefix_affinity
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


@pytest.fixture
def at_the_default(monkeypatch):
    """An unpublished estimate that starts at the default (as before round 7), for the tests of how
    evidence moves it from there."""
    monkeypatch.setattr(capacity, "UNPUBLISHED_START", 1.0)


def test_the_estimate_moves_both_ways_and_stays_within_its_bounds(at_the_default):
    learner = CapacityLearner(16)
    learner.start("r", 1000)
    grown = learner.observe("r", learner.evidence(0, 160, (3, 5, 7, 9, 11, 13, 15, 17, 19, 21)))
    assert grown == 1000 + UNPUBLISHED_GROW * 21  # a bound 21 blocks larger would have kept all ten
    grown = learner.observe("r", learner.evidence(0, 160, (2,)))
    assert grown == 1000 + UNPUBLISHED_GROW * 23  # each ghost hit says the bound was that much short
    shrunk = learner.observe("r", learner.evidence(16 * 500, 0))
    assert shrunk is not None and shrunk < grown
    for _ in range(1000):
        learner.observe("r", learner.evidence(0, 16 * 1000, tuple(range(1, 1001))))
    assert learner.estimate("r").bound == 1000 * MAX_FACTOR
    for _ in range(1000):
        learner.observe("r", learner.evidence(16 * 5000, 0))
    assert learner.estimate("r").bound == round(1000 / UNPUBLISHED_LOW)
    assert learner.observe("gone", learner.evidence(0, 160, (1,))) is None


def test_an_unpublished_estimate_starts_at_its_ceiling_and_its_first_miss_takes_it_to_the_evidence():
    """Round 7: the default is a guess, 0.46 x the engine on the issue's cell and 2-25 x it on the small
    engines of the matrix. The estimate starts where the index forgets nothing (the ceiling); the first
    predicted hit that missed proves the replica holds less than the index listed then, so it goes there
    (round 8: below the default too, down to the default / ``UNPUBLISHED_LOW``), and only the usual
    shrink after that."""
    learner = CapacityLearner(16)
    assert learner.start("big", 1000) == 1000 * MAX_FACTOR
    first = learner.observe("big", learner.evidence(16 * 11, 0), held=3000)  # 10 blocks missing
    assert first == 3000 - 10  # a large engine: what the index listed, less the miss
    assert learner.observe("big", learner.evidence(16 * 11, 0), held=100) == 3000 - 20  # no jump again
    learner.start("small", 1000)
    assert learner.observe("small", learner.evidence(16 * 11, 0), held=400) == 400 - 10  # the evidence
    learner.start("tiny", 1000)
    assert learner.observe("tiny", learner.evidence(16 * 11, 0), held=5) == round(1000 / UNPUBLISHED_LOW)
    learner.start("p", 1000, published=True)
    assert learner.observe("p", learner.evidence(16 * 11, 0), held=400) == 1000 - 10  # published: evidence


def test_an_unpublished_replica_is_remembered_until_it_misses():
    """The default bound (8 blocks here) is below what a large replica keeps: before round 7 the index
    forgot "a" once "b" was sent (a match of 2 of its 6 blocks), and "a"'s next turn could go anywhere.
    Now it is matched in full until the replica reports a miss; then the bound comes down to what the
    index listed (12 blocks), less the miss."""
    router = one(default_kv_capacity_blocks=8)
    for tag in "ab":
        router.release(router.route(chat(text(tag, 6))))
    again = router.route(chat(text("a", 6) + "?"))
    assert again.matched_tokens == 6 * 16
    router.release(again)
    assert router.capacity_bound("r0") == 8 * MAX_FACTOR
    router.observe_usage(again, 16)  # the replica held one block of it: a small engine
    assert router.capacity_bound("r0") < 12 and router.index.size("r0") <= router.capacity_bound("r0")


def test_a_miss_proves_an_unpublished_estimate_and_its_growth_is_then_the_published_rate():
    """Round 8: the Zipf tight cache unpublished (330 blocks, 1/25 of the default) ended with an estimate
    18 x the engine: the first miss's floor was the default, and every ghost hit grew it by 32 x its
    depth. A miss is evidence as a published capacity is: from the first one the estimate is proven
    (the eviction term may read it) and grows by ``GROW`` (tune split: 0.896 -> 0.973 of the pooled
    bound, learned capacity 0.99 x the engine)."""
    learner = CapacityLearner(16)
    learner.start("r", 1000)
    assert not learner.estimate("r").proven
    assert learner.observe("r", learner.evidence(0, 16, (5,))) is None  # at its ceiling still
    learner.observe("r", learner.evidence(16 * 11, 0), held=300)
    assert learner.estimate("r").proven and learner.estimate("r").bound == 290
    assert learner.observe("r", learner.evidence(0, 16, (5,))) == 290 + GROW * 5
    assert learner.proven([ReplicaState(id=i, url="") for i in ("r", "other")]) == {"r"}
    learner.start("p", 1000, published=True)
    assert learner.estimate("p").proven  # a published capacity is evidence from the start


def test_a_published_capacity_is_trusted_within_a_narrower_band():
    learner = CapacityLearner(16)
    learner.start("p", 1000, published=True)
    assert learner.observe("p", learner.evidence(0, 160, (5,) * 10)) == 1000 + GROW * 5  # trusted more
    for _ in range(100):
        learner.observe("p", learner.evidence(0, 16 * 1000, tuple(range(1, 1001))))
    assert learner.estimate("p").bound == 1000 * PUBLISHED_FACTOR
    for _ in range(1000):
        learner.observe("p", learner.evidence(16 * 5000, 0))
    assert learner.estimate("p").bound == 1000 // PUBLISHED_FACTOR


def test_a_hit_on_blocks_the_index_never_evicted_does_not_grow_the_estimate():
    """The regression of the last round: the index's LRU order is not the engine's, and answers hold
    blocks the index never listed (decode tokens, another gateway's requests). Growing on every surplus
    while the index was at its bound drifted a right published capacity up to 2-4x (Zipf tight cache:
    busy imbalance 1.37). Only a ghost (what the bound made the index forget) is evidence."""
    learner = CapacityLearner(16)
    learner.start("r", 1000, published=True)
    assert learner.evidence(0, 160).surplus == 10
    assert learner.observe("r", learner.evidence(0, 160)) is None
    assert learner.estimate("r").bound == 1000


def test_a_right_published_capacity_stays_when_the_replica_holds_what_the_index_never_sent():
    router = one(capacity=24)
    for tag in "ab":  # the index at its bound: 24 blocks
        router.release(router.route(chat(text(tag, 12))))
    assert router.index.size("r0") == 24
    d = router.route(chat(text("c", 6)))  # another gateway had sent "c" there: the replica holds it
    assert d.matched_tokens == 0 and d.ghost_depths == ()
    router.observe_usage(d, 6 * 16)
    assert router.capacity_bound("r0") == 24


def test_an_unpredicted_hit_grows_the_index_bound_so_the_replica_is_remembered(at_the_default):
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
    router.capacity.observe("r0", router.capacity.evidence(0, 16 * 50, tuple(range(1, 51))))
    learned = router.capacity_bound("r0")
    assert learned > 400
    router.set_replicas([ReplicaState(id="r0", url="u2", kv_capacity_blocks=400)])
    assert router.capacity_bound("r0") == learned


def test_a_hit_counter_window_reads_its_surplus_as_the_shallowest_ghosts():
    learner = CapacityLearner(16)
    w = CounterWindow()
    assert w.close(learner, 1000.0) is None  # the first reading only sets where the window starts
    w.add(160, ())
    w.add(0, (9, 3, 5))
    w.add(0, (4,))
    ev = w.close(learner, 1000.0 + 160 + 2 * 16)  # two blocks beyond the prediction
    assert ev is not None and (ev.missing, ev.surplus, ev.depth) == (0, 2, 4)  # explained by depths 3, 4
    assert w.predicted == w.prefills == 0 and w.ghosts is None
    w.add(320, (1,))
    assert w.close(learner, 1000.0 + 192 + 16) is None  # a deficit: not evidence (timing, below)
    w.add(0, ())
    ev = w.close(learner, 1000.0 + 208 + 64)
    assert ev is not None and ev.surplus == 4 and ev.depth == 0  # no ghost: nothing for the bound
    w.add(0, (1,))
    assert w.close(learner, 10.0) is None  # the counter went down: the replica restarted


def test_without_cached_tokens_the_hit_counter_grows_the_bound_on_ghosts(at_the_default):
    """A replica whose answers carry no cached_tokens (vLLM without --enable-prompt-tokens-details) and
    publishes no capacity: the default bound (8 here) made the index forget "a"; the replica's prefix
    cache hit counter says it had it."""
    router = one(default_kv_capacity_blocks=8)
    router.observe_hit_counter("r0", 0.0)
    for tag in "ab":
        d = router.route(chat(text(tag, 6)))
        router.release(d)
        router.observe_usage(d, None)  # no cached_tokens in the answer
    again = router.route(chat(text("a", 6) + "?"))
    assert again.matched_tokens < 5 * 16 and again.ghost_depths
    router.release(again)
    router.observe_hit_counter("r0", 5 * 16.0)  # the replica had five blocks of it
    assert router.capacity_bound("r0") > 8
    learned = router.capacity_bound("r0")
    d = router.route(chat(text("c", 6)))
    router.release(d)
    router.observe_usage(d, 0)  # an answer with cached_tokens: from now on those are the evidence
    router.observe_hit_counter("r0", 10_000.0)
    assert router.capacity_bound("r0") == learned


def copied(evict_weight: float, published: bool | str = True, proven: bool = False) -> bool:
    """Two replicas whose caches (24 blocks) are full; a shared prompt homed on one of them, whose queue
    is longer than one re-prefill of the prompt. True when the next request of the prompt goes to the
    other replica (a copy). ``published=False``: the 24 blocks are the policy's default, not the
    replicas' own; ``proven``: learned, and a predicted hit that missed on each replica has taken its
    estimate there (``router.capacity``); ``published="mixed"``: only r0 publishes its 24 blocks."""
    caps = [24 if published else None for _ in range(2)] if published != "mixed" else [24, None]
    replicas = [ReplicaState(id=f"r{i}", url="", kv_capacity_blocks=cap) for i, cap in enumerate(caps)]
    cfg = RoutingConfig(
        seed=1, evict_weight=evict_weight, default_kv_capacity_blocks=24, learn_capacity=proven
    )
    router = PoolRouter(replicas, cfg)
    if proven:
        for r in replicas:
            assert router.capacity is not None
            bound = router.capacity.observe(r.id, Evidence(missing=1, surplus=0), held=25)
            assert bound == 24
            router.index.add_replica(r.id, bound)
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


def test_the_eviction_term_never_reads_an_unpublished_capacity_s_room(monkeypatch: pytest.MonkeyPatch):
    """Without a published capacity the index's free room is a guess (the default, or what the learner
    grew from it 32 x a ghost's depth at a time): on 64-token engine blocks the term reading it cost
    0.015 of the pooled bound on the issue's cell (bench.routing_matrix, tune split), so it is off there
    (``UNKNOWN_ROOM = "off"``, committed) and the placement is the one without the term; where some
    candidates' room is known and others' not, rooms are not compared on one footing and it is off too.
    Round 10's variant ``"full-all"`` (measured, not adopted) takes every cache as full where no room is
    known, so the copy pays for what it evicts as with a published full cache."""
    assert copied(1.0, published=False) and copied(0.0, published=False)
    assert copied(1.0, published="mixed") and copied(0.0, published="mixed")
    monkeypatch.setattr(prefix_affinity, "UNKNOWN_ROOM", "full-all")
    assert not copied(1.0, published=False)
    assert copied(0.0, published=False)
    assert copied(1.0, published="mixed") and copied(0.0, published="mixed")


def test_the_eviction_term_reads_an_unpublished_capacity_a_miss_has_proven():
    """Round 8: once a predicted hit that missed has taken each replica's learned estimate to what it
    holds, its free room is evidence, and the copy pays for what it evicts as with a published one."""
    assert not copied(1.0, published=False, proven=True)
    assert copied(0.0, published=False, proven=True)


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


def test_a_miss_unlearns_only_what_was_sent_before_the_evicted_block():
    """A predicted hit that missed proves the replica evicted the match's blocks, and (LRU) what had been
    sent before them: not the conversations sent since. Unlearning as many of the index's oldest
    entries cost 0.003-0.025 of the pooled bound on 16- and 1-token engine blocks and Zipf (round 5)."""
    t = [0.0]
    router = PoolRouter(
        [ReplicaState(id="r0", url="", kv_capacity_blocks=10_000)], RoutingConfig(seed=1), clock=lambda: t[0]
    )
    assert router.capacity is not None
    router.capacity.evidence(16, 16)  # a 16-token engine (its grain)
    for at, tag, blocks in ((0.0, "g", 1), (1.0, "c", 4), (2.0, "a", 4), (2.0, "b", 4)):
        t[0] = at
        router.release(router.route(chat(text(tag, blocks))))
    t[0] = 3.0
    d = router.route(chat(text("c", 4) + "and more"))
    assert d.matched_tokens == 4 * 16
    router.observe_usage(d, 0)  # three blocks past the one-block tolerance: evicted
    assert router.index.stats().unlearned == 1  # only "g", sent before "c"
    matched = router.index.match(router.route(chat(text("a", 4))).block_hashes)["r0"]
    assert matched == 4


def test_unlearn_older_stops_at_the_first_entry_sent_since():
    index = PrefixIndex()
    index.add_replica("r", 100)
    index.insert("r", (1, 2), 1.0)
    index.insert("r", (3, 4), 2.0)
    index.insert("r", (5,), 3.0)
    assert index.sent_at("r", 3) == 2.0 and index.sent_at("r", 9) is None
    assert index.unlearn_older("r", 10, 3.0, keep=(2,)) == 3  # 1, 3, 4; 2 is kept (just computed)
    assert [h for h in (1, 2, 3, 4, 5) if index.holds("r", h)] == [2, 5]
    assert index.unlearn_older("r", 1, 0.5) == 0


# -- round 9: the depth estimator (router.capacity.DepthTally, CapacityLearner.observe_depths) ----------


def labels(rng, truth: int, top: int, order_errors: float) -> tuple[list[int], list[int]]:
    """One answer's labels from an engine that holds the ``truth`` most recent blocks, read at a depth
    drawn up to ``top``; with probability ``order_errors`` a block shallower than the truth is gone
    anyway (the engine's LRU order is not the index's)."""
    d = rng.randint(1, top)
    if d > truth:
        return [], [d]
    return ([], [d]) if rng.random() < order_errors else ([d], [])


def test_order_errors_at_shallow_depths_keep_the_estimate_at_the_truth():
    """A quarter of the shallow blocks reported gone: a rule that shrinks on every miss ends far below
    the truth (round 8: a published 64-token engine drifted to 0.82 x); the fit stays within a bucket."""
    rng = random.Random(3)
    tally = DepthTally(start=1000, prior=0.0)
    for _ in range(3000):
        tally.add(*labels(rng, 1000, 2000, 0.25))
    fit = tally.fit()
    assert fit is not None and 0.9 * 1000 <= fit <= 1.1 * 1000


def test_a_published_start_at_the_truth_does_not_drift_below_it_under_symmetric_noise():
    """Through the learner: a published capacity of 400 blocks, answers whose held and not-held labels
    straddle it with the same noise on both sides (order errors either way, 15 %)."""
    rng = random.Random(5)
    learner = CapacityLearner(16)
    learner.start("r0", 400, published=True)
    lows = []
    for _ in range(2000):
        d = rng.randint(200, 600)
        held = (d <= 400) != (rng.random() < 0.15)
        ev = Evidence(missing=0 if held else 1, surplus=0)
        # a single matched block at depth d: held (cached 16 tokens) or not (cached 0)
        learner.observe_depths("r0", ev, 16 if held else 0, (1, d, d, 400), ())
        lows.append(learner.estimate("r0").blocks)
    est = learner.estimate("r0")
    assert 0.92 * 400 <= est.blocks <= 1.08 * 400
    assert min(lows[500:]) >= 0.85 * 400  # never wandered far below on the way


def test_ghost_hits_deep_past_the_bound_grow_the_estimate():
    """The engine holds 1.6 x the published value: matches are held, and so are the ghosts past the
    match up to that depth (the blocks the bound made the index forget); the ones deeper are not."""
    learner = CapacityLearner(16)
    learner.start("r0", 500, published=True)
    rng = random.Random(7)
    for _ in range(400):
        g = rng.randint(1, 500)  # a ghost's depth past the 500 listed entries
        held = 500 + g <= 800
        # 2 matched blocks (depths 100 and 300), one ghost past them, then the prompt goes on (8 blocks)
        cached = 3 * 16 if held else 2 * 16
        ev = learner.evidence(2 * 16, cached, (g,))
        learner.observe_depths("r0", ev, cached, (2, 100, 300, 500), (g,), 8)
    assert 1.45 * 500 <= learner.estimate("r0").blocks <= 1.75 * 500


def test_the_estimate_tracks_an_engine_that_shrinks_and_its_labels_stay_bounded():
    rng = random.Random(11)
    tally = DepthTally(start=1000, prior=0.0)
    for _ in range(1500):
        tally.add(*labels(rng, 1200, 2500, 0.05))
    for _ in range(3000):  # another tenant takes half of the cache
        tally.add(*labels(rng, 600, 2500, 0.05))
    fit = tally.fit()
    assert fit is not None and 0.9 * 600 <= fit <= 1.1 * 600
    assert (
        len(tally.held)
        == len(tally.gone)
        == capacity.PER_OCTAVE * (capacity.OCTAVES_BELOW + capacity.OCTAVES_ABOVE)
    )
    assert tally.weight < 1e100  # renormalised, not overflowing


def test_without_a_not_held_label_an_unpublished_estimate_stays_at_its_ceiling():
    learner = CapacityLearner(16)
    learner.start("r0", 1000)
    learner.observe_depths("r0", Evidence(0, 0), 64, (4, 10, 900, 5000), ())
    assert learner.estimate("r0").blocks == MAX_FACTOR * 1000 and not learner.estimate("r0").proven
    # a miss at depth 3,000 with hits at 900: the fit moves between them, and it is proven
    learner.observe_depths("r0", Evidence(8, 0), 0, (8, 3000, 3000, 5000), ())
    est = learner.estimate("r0")
    assert 900 <= est.blocks <= 3000 and est.proven


def test_a_ghost_at_the_prompt_end_is_not_read_as_gone():
    """The engine never reports a prompt's last block cached (the last token is recomputed): a ghost
    there, not reported, says nothing."""
    learner = CapacityLearner(16)
    learner.start("r0", 100, published=True)
    ev = learner.evidence(16, 16, (5,))
    assert learner.observe_depths("r0", ev, 16, (1, 3, 3, 100), (5,), 2) is None
    assert learner.estimate("r0").tally.gone == [0.0] * len(learner.estimate("r0").tally.gone)


def test_the_index_reports_recency_depth():
    index = PrefixIndex()
    index.add_replica("r0", 10)
    index.insert("r0", [1, 2, 3])  # chain inserted deepest first: 1 is the most recent
    index.insert("r0", [7, 8])
    assert [index.depth("r0", h) for h in (7, 8, 1, 2, 3, 99)] == [1, 2, 3, 4, 5, 0]


def test_a_decision_carries_the_depths_of_its_match(monkeypatch):
    monkeypatch.setattr(capacity, "ESTIMATOR", "depth")
    router = one(default_kv_capacity_blocks=64)
    router.release(router.route(chat(text("a", 6))))
    router.release(router.route(chat(text("b", 4))))
    d = router.route(chat(text("a", 6) + "?"))
    assert d.listed_depths == (6, 5, 10, 10)  # "a"'s 6 blocks under "b"'s 4: first at 5, deepest at 10
    monkeypatch.setattr(capacity, "ESTIMATOR", "r8")  # the committed rules: no depth scans
    assert router.route(chat(text("b", 4) + "?")).listed_depths == ()
