"""Routing policies: bounded loads, determinism, prefix affinity behaviour, config validation."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from config.routing import RoutingConfig
from router.load import load_bound
from router.policies import make_policy
from router.policies.base import PickContext
from router.policies.ring import HashRing, chwbl_pick
from router.policies.session import session_key
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest


def fleet(n: int) -> list[ReplicaState]:
    return [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(n)]


def chat(text: str, salt: str = "t", **headers: str) -> RouteRequest:
    body = {"model": "m", "messages": [{"role": "user", "content": text}]}
    return RouteRequest("chat", "m", body, tenant_salt=salt, headers=headers)


def long_text(tag: str, tokens: int = 600) -> str:
    return (tag + " ") * (4 * tokens // (len(tag) + 1))


# -- CHWBL -----------------------------------------------------------------------------------------------
@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=40), min_size=1, max_size=12),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.sampled_from([1.05, 1.25, 1.5, 2.0]),
)
def test_chwbl_never_exceeds_its_bound(loads, key, c):
    replicas = fleet(len(loads))
    for r, load in zip(replicas, loads, strict=True):
        r.in_flight = load
    picked = chwbl_pick(HashRing(40), key, replicas, c)
    assert picked is not None
    bound = math.ceil(c * (sum(loads) + 1) / len(loads))
    assert picked.load() + 1 <= bound


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), min_size=1, max_size=120), st.integers(2, 6))
def test_chwbl_pool_keeps_every_replica_within_bound_under_random_traffic(ops, n):
    router = PoolRouter(fleet(n), RoutingConfig(policy="chwbl", load_factor=1.25, virtual_nodes=20))
    live = []
    for arrive, k in ops:
        if arrive or not live:
            total_before = sum(r.in_flight for r in router.replicas)
            d = router.route(chat(f"hot prefix {k} " * 80))
            assert d.replica.in_flight <= load_bound(total_before, n, 1.25)
            live.append(d)
        else:
            router.release(live.pop(k % len(live)))


def test_hash_ring_is_stable_and_weighted():
    reps = fleet(4)
    a = [HashRing(100).owner(k * 7919 * 2**40, reps) for k in range(200)]
    b = [HashRing(100).owner(k * 7919 * 2**40, list(reversed(reps))) for k in range(200)]
    assert a == b  # same ring whatever the order the replicas are listed in
    reps[0].weight = 3.0
    ring = HashRing(100)
    owners = Counter(ring.owner(random.Random(i).getrandbits(64), reps) for i in range(3000))
    assert owners["r0"] > owners["r1"] and owners["r0"] > owners["r2"]
    assert list(ring.walk(12345, reps)) and len(set(ring.walk(12345, reps))) == 4


# -- prefix affinity -------------------------------------------------------------------------------------
def affinity_router(n: int = 4, **cfg) -> PoolRouter:
    return PoolRouter(fleet(n), RoutingConfig(policy="prefix_affinity", seed=7, **cfg))


def test_second_request_of_a_shared_prefix_goes_to_the_same_replica():
    router = affinity_router()
    first = router.route(chat(long_text("doc")))
    assert first.reason == "cold_chwbl" and first.matched_tokens == 0
    router.release(first)
    follow = chat(long_text("doc") + " and a different question")
    second = router.route(follow)
    assert second.replica is first.replica
    assert second.reason == "affinity"
    assert second.matched_tokens >= 0.9 * first.prompt_tokens // 16 * 16
    assert second.uncached_tokens == second.prompt_tokens - second.matched_tokens


def test_a_saturated_home_spills_to_another_replica_then_both_share():
    router = affinity_router()
    req = chat(long_text("hot"))
    home = router.route(req).replica
    # Others hold a little load: mean ~1, home at 3 -> 3 + 1 > ceil(1.25 * (6 + 1) / 4) = 3
    home.in_flight = 3
    for r in router.replicas:
        if r is not home:
            r.in_flight = 1
    spill = router.route(req)
    assert spill.reason == "saturated_spill" and spill.replica is not home
    assert spill.matched_tokens == 0
    # Now both hold the prefix: the affinity set has two members, the less loaded one wins.
    home.in_flight = 0
    again = router.route(req)
    assert again.reason == "affinity" and again.replica is home


def test_a_spill_prefers_a_replica_holding_part_of_the_prefix():
    router = affinity_router(n=4)
    shared = long_text("system", 300)
    full = chat(shared + long_text("conversation", 300))
    first = router.route(full)
    router.release(first)
    home = first.replica
    # The replica a plain CHWBL spill would take last learns the shared half (the others are excluded).
    order = list(router.policy.ring.walk(first.route_key, router.replicas))
    partial = router.replica(order[-1])
    assert partial is not home
    d = router.route(chat(shared + long_text("other", 300)), exclude=set(order[:-1]))
    assert d.replica is partial
    router.release(d)
    for r in router.replicas:
        r.in_flight = 0
    home.in_flight = 5  # saturated
    d = router.route(full)
    assert d.reason == "saturated_spill" and d.replica is partial
    assert d.matched_tokens >= 300 // 16 * 16


def test_queued_prefill_saturation_spills():
    router = affinity_router(max_queued_prefill_tokens=1000)
    req = chat(long_text("q"))
    first = router.route(req)
    router.release(first)
    home = first.replica
    assert router.route(req).replica is home
    home.in_flight = 0
    home.queued_prefill_tokens = 5000  # a long prefill backlog, whatever the request count
    d = router.route(req)
    assert d.reason == "saturated_spill" and d.replica is not home


def test_a_small_match_counts_as_no_match():
    router = affinity_router(min_match_fraction=0.5)
    first = router.route(chat(long_text("common", 100) + long_text("tail-a", 500)))
    router.release(first)
    d = router.route(chat(long_text("common", 100) + long_text("tail-b", 500)))
    assert d.reason == "cold_chwbl"  # ~100 of ~600 tokens matched is below half


def test_cold_prefixes_spread_over_replicas():
    router = affinity_router(n=4)
    counts = Counter()
    for i in range(400):
        d = router.route(chat(long_text(f"user-{i}", 300)))
        assert d.reason == "cold_chwbl"
        counts[d.replica.id] += 1
        router.release(d)
    assert set(counts) == {"r0", "r1", "r2", "r3"}
    assert min(counts.values()) >= 40 and max(counts.values()) <= 200


def test_one_hot_prefix_never_puts_a_replica_above_the_bound():
    n, c = 4, 1.25
    router = affinity_router(n=n, load_factor=c)
    rng = random.Random(1)
    live = []
    reasons = Counter()
    for step in range(400):
        if step < 60 or rng.random() < 0.55 or not live:
            total_before = sum(r.in_flight for r in router.replicas)
            d = router.route(chat(long_text("hot")))
            reasons[d.reason] += 1
            assert d.replica.in_flight <= math.ceil(c * (total_before + 1) / n)
            live.append(d)
            if step < 60:  # nothing released yet: every replica is within c x mean
                total = sum(r.in_flight for r in router.replicas)
                assert max(r.in_flight for r in router.replicas) <= math.ceil(c * total / n)
        else:
            router.release(live.pop(rng.randrange(len(live))))
    assert reasons["affinity"] > reasons["saturated_spill"] > 0


def test_decisions_are_deterministic_for_a_fixed_seed():
    def run() -> list[tuple[str, str]]:
        router = affinity_router(n=5)
        out, live = [], []
        rng = random.Random(2)
        for i in range(150):
            d = router.route(chat(long_text(f"p{rng.randrange(6)}")))
            out.append((d.replica.id, d.reason))
            live.append(d)
            if i % 3 == 0:
                router.release(live.pop(rng.randrange(len(live))))
        return out

    first = run()
    assert first == run()
    assert len({rid for rid, _ in first}) > 1


# -- other policies --------------------------------------------------------------------------------------
def test_round_robin_and_least_load():
    rr = PoolRouter(fleet(3), RoutingConfig(policy="round_robin"))
    assert [rr.route(chat("x")).replica.id for _ in range(4)] == ["r0", "r1", "r2", "r0"]
    ll = PoolRouter(fleet(3), RoutingConfig(policy="least_load", seed=1))
    ll.replicas[0].in_flight = 2
    ll.replicas[2].in_flight = 1
    d = ll.route(chat("x"))
    assert d.replica.id == "r1" and d.prompt_tokens == 0 and d.block_hashes == ()


def test_consistent_hash_is_sticky_whatever_the_load():
    router = PoolRouter(fleet(4), RoutingConfig(policy="consistent_hash"))
    req = chat(long_text("sticky"))
    first = router.route(req).replica
    first.in_flight = 100
    assert router.route(req).replica is first
    assert router.route(req, exclude={first.id}).replica is not first


def test_session_affinity_by_header_with_bounded_load():
    router = PoolRouter(fleet(4), RoutingConfig(policy="session", session_header="X-Session-Id"))
    a = router.route(chat("turn 1", **{"x-session-id": "s-1"}))
    router.release(a)  # with a in flight, the bound ceil(1.25 * 2 / 4) = 1 would move b elsewhere
    b = router.route(chat("completely different turn 2", **{"X-Session-Id": "s-1"}))
    assert a.reason == b.reason == "session" and a.replica is b.replica
    router.release(b)
    homes = set()
    for i in range(40):
        d = router.route(chat("x", **{"x-session-id": f"s-{i}"}))
        homes.add(d.replica.id)
        router.release(d)
    assert len(homes) == 4
    assert router.route(chat("no header")).reason == "no_session_chwbl"
    # A hammered session spreads once its home passes c x mean.
    for r in router.replicas:
        r.in_flight = 0
    home = router.route(chat("x", **{"x-session-id": "s-1"})).replica
    home.in_flight = 10
    assert router.route(chat("x", **{"x-session-id": "s-1"})).replica is not home
    # Same session id, other tenant: keyed separately (salted).
    assert session_key("tenant-a", "s-1") != session_key("tenant-b", "s-1")


@pytest.mark.parametrize(
    "name", ["round_robin", "least_load", "consistent_hash", "chwbl", "prefix_affinity", "session"]
)
def test_every_policy_is_selectable(name):
    cfg = RoutingConfig(policy=name, seed=1)
    policy = make_policy(cfg)
    assert policy.name == name
    reps = fleet(3)
    ctx = PickContext(request=chat("x"), candidates=reps, route_key=42)
    replica, reason = policy.pick(ctx)
    assert replica in reps and reason
    assert PoolRouter(reps, cfg).route(chat("hello")).policy == name


# -- configuration validation -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"load_factor": 1.0}, "greater than 1"),
        ({"load_factor": 0.5}, "greater than 1"),
        ({"policy": "random"}, "Input should be"),
        ({"block_size": 0}, "greater than or equal to 1"),
        ({"route_key_tokens": 8192}, "route_key_tokens (8192) must not exceed max_prefix_tokens (4096)"),
        ({"max_prefix_tokens": 8, "route_key_tokens": 8}, "must be at least one block"),
        ({"min_match_fraction": 1.5}, "less than or equal to 1"),
        ({"affinity_ratio": 0}, "greater than 0"),
        ({"virtual_nodes": 0}, "greater than or equal to 1"),
        ({"session_header": "x session"}, "must be an HTTP header name"),
        ({"index_ttl_s": 0}, "greater than 0"),
        ({"report_stale_s": -1}, "greater than 0"),
        ({"tokenizer": {"kind": "hf"}}, "needs 'path'"),
        ({"loadfactor": 2}, "Extra inputs are not permitted"),
    ],
)
def test_bad_config_values_are_rejected_with_a_clear_message(fields, message):
    with pytest.raises(ValidationError) as err:
        RoutingConfig(**fields)
    assert message in str(err.value)


def test_session_header_is_normalised_to_lower_case():
    assert RoutingConfig(session_header="X-Conversation").session_header == "x-conversation"


def test_everyone_saturated_falls_back_to_least_load():
    router = affinity_router(n=3, max_queued_prefill_tokens=100)
    req = chat(long_text("busy"))
    router.release(router.route(req))
    for i, r in enumerate(router.replicas):
        r.queued_prefill_tokens = 1000
        r.in_flight = 3 - i  # r2 is the least loaded
    d = router.route(req)
    assert d.reason == "all_saturated" and d.replica.id == "r2"


def _pool(n: int, **cfg):  # type: ignore[no-untyped-def]
    from config.routing import RoutingConfig
    from router.pool import PoolRouter
    from router.replica import ReplicaState

    replicas = [ReplicaState(id=f"r{i}", url=f"http://r{i}") for i in range(n)]
    return PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=3, **cfg)), replicas


def _chat(system: str, user: str) -> dict:
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}]}


def test_a_hot_prefix_replicates_to_every_replica_instead_of_leaving_one_idle() -> None:
    from router.types import RouteRequest

    system = "One very popular system prompt. " * 40

    def spread(hot_window: int) -> tuple[dict[str, int], dict[str, int]]:
        router, replicas = _pool(4, hot_window=hot_window)
        counts = {r.id: 0 for r in replicas}
        reasons: dict[str, int] = {}
        held = []
        for i in range(300):  # one hot prefix, 6 requests in flight
            d = router.route(RouteRequest("chat", "m", _chat(system, f"question {i}"), "s"))
            counts[d.replica.id] += 1
            reasons[d.reason] = reasons.get(d.reason, 0) + 1
            held.append(d)
            if len(held) > 6:
                router.release(held.pop(0))
        return counts, reasons

    plain, _ = spread(0)
    assert min(plain.values()) == 0  # spills walk the ring in one order: the last replica idles
    counts, reasons = spread(64)
    assert reasons.get("hot_replicate", 0) >= 1
    assert max(counts.values()) / (sum(counts.values()) / 4) <= 1.1, counts


def test_hot_window_zero_turns_replication_off() -> None:
    from router.types import RouteRequest

    router, _ = _pool(4, hot_window=0)
    system = "Another hot prompt. " * 40
    reasons = set()
    for i in range(100):
        d = router.route(RouteRequest("chat", "m", _chat(system, f"q{i}"), "s"))
        reasons.add(d.reason)
        router.release(d)
    assert "hot_replicate" not in reasons


def test_min_spill_in_flight_keeps_a_conversation_on_its_replica_at_low_load() -> None:
    from router.types import RouteRequest

    history = "A long conversation so far. " * 80

    def spills(min_spill: int) -> int:
        router, _ = _pool(4, min_spill_in_flight=min_spill, hot_window=0)
        first = router.route(RouteRequest("chat", "m", _chat(history, "turn 0"), "s"))
        home = first.replica
        home.in_flight += 2  # two more requests of its own conversation running there: 3 in flight
        moved = 0
        for i in range(1, 6):
            d = router.route(RouteRequest("chat", "m", _chat(history, f"turn {i}"), "s"))
            moved += d.replica is not home
            router.release(d)
        return moved

    assert spills(0) > 0  # the plain bound (ceil(1.25 x 4 / 4) = 2) pushes it away
    assert spills(4) == 0  # within the batch size of 4 it stays
