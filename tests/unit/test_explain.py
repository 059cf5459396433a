"""Routing explanations (router.explain) and the decision log (gateway.observability.decisions): the
terms are the policy's, the choice is unchanged, nothing of the prompt is kept, eviction is told apart."""

from __future__ import annotations

import random

import orjson

from config.routing import RoutingConfig
from gateway.observability.decisions import EVICTED_MEMORY, DecisionLog
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest

WORD = "quizzaciousness"  # appears in the prompts only


def fleet(n: int = 4, capacity: int | None = None) -> list[ReplicaState]:
    """``capacity``: each replica's published KV blocks (None: unpublished, the eviction term off)."""
    return [
        ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}", kv_capacity_blocks=capacity)
        for i in range(n)
    ]


def chat(text: str, pinned: str | None = None) -> RouteRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return RouteRequest("chat", "m", body, "t", pinned_replica=pinned)


def prompts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    docs = [f"document {k} about {WORD} and its many chapters " * rng.randint(5, 60) for k in range(6)]
    return [rng.choice(docs) + f" question {i}" for i in range(n)]


def test_the_explained_winner_is_the_policy_s_choice_and_the_lowest_score() -> None:
    # published capacities smaller than the six documents, so placements evict and the term is scored
    plain = PoolRouter(fleet(capacity=96), RoutingConfig(seed=1))
    explained = PoolRouter(fleet(capacity=96), RoutingConfig(seed=1))
    explained.explain = True
    rng = random.Random(5)
    open_a, open_b = [], []
    evicting = 0  # decisions whose scores carried the eviction term
    for text in prompts(300):
        a, b = plain.route(chat(text)), explained.route(chat(text))
        assert (a.replica.id, a.reason, a.matched_tokens) == (b.replica.id, b.reason, b.matched_tokens)
        assert a.explanation is None
        e = b.explanation
        assert e is not None and e.chosen == b.replica.id and e.reason == b.reason
        scores = {c.replica: c.score for c in e.candidates}
        assert all(s is not None for s in scores.values())
        assert scores[e.chosen] == min(scores.values())  # type: ignore[type-var]
        won = next(c for c in e.candidates if c.replica == e.chosen)
        assert won.matched_tokens == b.matched_tokens
        evicting += any(c.evicted for c in e.candidates)
        assert e.available_tokens == max(c.matched_tokens for c in e.candidates) == b.available_tokens
        # the terms are those before this decision counted its own load
        assert won.queued_prefill_tokens == b.replica.queued_prefill_tokens - b.uncached_tokens
        assert won.load == b.replica.load() - 1
        open_a.append(a)
        open_b.append(b)
        while open_a and rng.random() < 0.6:  # requests finish in random order, alike in both
            k = rng.randrange(len(open_a))
            plain.release(open_a.pop(k))
            explained.release(open_b.pop(k))
    reasons = {d.reason for d in open_b}
    assert reasons  # the stream leaves some in flight: scores were not all zero-load ties
    assert evicting  # the recomputed scores include the eviction term where it was scored


def test_a_policy_without_scores_and_a_filter_that_decides_say_so() -> None:
    rr = PoolRouter(fleet(2), RoutingConfig(policy="round_robin"))
    rr.explain = True
    e = rr.route(chat("hello")).explanation
    assert e is not None and all(c.score is None for c in e.candidates)
    assert "does not score" in e.why()
    pa = PoolRouter(fleet(3), RoutingConfig(seed=1))
    pa.explain = True
    d = pa.route(chat("pinned prompt " * 20, pinned="r2"))
    assert d.replica.id == "r2" and d.explanation is not None
    assert d.explanation.decided_by_filter and "filter" in d.explanation.why()


def test_why_names_a_spill_and_the_replica_passed_over() -> None:
    router = PoolRouter(fleet(2), RoutingConfig(seed=1, reuse_weight=0.0, shared_window=0))
    router.explain = True
    doc = "a long shared handbook " * 100
    home = router.route(chat(doc + " q0"))
    router.release_prefill(home)
    home.replica.queued_prefill_tokens += 100_000  # the home is busy with other prefill
    d = router.route(chat(doc + " q1"))
    assert d.reason == "spill" and d.explanation is not None
    assert f"{home.replica.id} held a longer match" in d.explanation.why()


def test_no_prompt_text_in_an_explanation() -> None:
    router = PoolRouter(fleet(), RoutingConfig(seed=1))
    router.explain = True
    log = DecisionLog()
    for i, text in enumerate(prompts(20)):
        d = router.route(chat(text))
        assert d.explanation is not None
        log.record(f"g{i}", f"c{i}", "m", d.explanation, 100)
    dumped = orjson.dumps([r.as_json() for i in range(20) for r in log.find(f"g{i}") or []])
    assert dumped.count(b'"request_id"') == 20
    assert WORD.encode() not in dumped and b"chapters" not in dumped


def test_the_log_keeps_its_limit_and_tells_evicted_from_unknown() -> None:
    router = PoolRouter(fleet(2), RoutingConfig(policy="round_robin"))
    router.explain = True
    log = DecisionLog()
    limit = 3
    for i in range(10):
        e = router.route(chat(f"p{i}")).explanation
        assert e is not None
        log.record(f"g{i}", "same-client" if i % 2 else None, "m", e, limit)
    assert len(log) == limit
    assert [r.request_id for r in log.find("g9") or []] == ["g9"]
    assert log.find("g0") == [] and log.find("g6") == []  # evicted
    assert log.find("never") is None  # unknown
    assert [r.request_id for r in log.find("same-client") or []] == ["g7", "g9"]
    # a retry appends an attempt to the request's record; its outcome is kept
    e = router.route(chat("p9 again")).explanation
    assert e is not None
    log.outcome("g9", "failed: connect")
    log.record("g9", "same-client", "m", e, limit)
    log.reported("g9", 128)
    (rec,) = log.find("g9") or []
    body = rec.as_json()
    assert [a["outcome"] for a in body["attempts"]] == ["failed: connect", "sent"]
    assert body["reported_cached_tokens"] == 128
    # the memory of evicted ids is bounded too
    for i in range(10, 10 + EVICTED_MEMORY * limit + 5):
        log.record(f"g{i}", None, "m", e, limit)
    assert log.find("g0") is None
    log.record("off", None, "m", e, 0)  # explain_decisions: 0 keeps nothing
    assert log.find("off") is None


def test_each_attempt_says_how_it_went_through_the_fair_queue_when_it_took_one() -> None:
    router = PoolRouter(fleet(2), RoutingConfig(policy="round_robin"))
    router.explain = True
    log = DecisionLog()
    first, second = (router.route(chat(f"p{i}")).explanation for i in range(2))
    assert first is not None and second is not None
    log.record("g", None, "m", first, 10, ("standard", 0.25, "end"))
    log.outcome("g", "failed: connect")
    log.record("g", None, "m", second, 10, ("standard", 0.0, "direct"))
    log.record("h", None, "m", first, 10)  # fairness off: nothing said
    (rec,) = log.find("g") or []
    got = [a["fair_queue"] for a in rec.as_json()["attempts"]]
    assert got == [
        {"class": "standard", "waited_s": 0.25, "released_by": "end"},
        {"class": "standard", "waited_s": 0.0, "released_by": "direct"},
    ]
    (plain,) = log.find("h") or []
    assert "fair_queue" not in plain.as_json()["attempts"][0]
