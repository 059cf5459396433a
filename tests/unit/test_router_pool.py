"""PoolRouter: the gateway's contract (route / release_prefill / release), load reports, discovery."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from config.routing import RoutingConfig, TokenizerConfig
from router.pool import PoolRouter
from router.prompt import render_prompt
from router.replica import ReplicaState
from router.types import NoReplicaAvailable, RouteRequest


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def fleet(n: int, capacity: int | None = None) -> list[ReplicaState]:
    return [
        ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}", kv_capacity_blocks=capacity)
        for i in range(n)
    ]


def chat(text: str, salt: str = "t") -> RouteRequest:
    return RouteRequest(
        "chat", "m", {"model": "m", "messages": [{"role": "user", "content": text}]}, tenant_salt=salt
    )


DOC = "the same long document " * 100  # 2300 bytes: 575 approx tokens, 35 full blocks


def test_decision_fields_and_release_paths():
    router = PoolRouter(fleet(3), RoutingConfig(seed=1))
    first = router.route(chat(DOC))
    assert first.policy == "prefix_affinity"
    assert first.prompt_tokens > 575 and first.matched_tokens == 0
    assert first.uncached_tokens == first.prompt_tokens
    assert len(first.block_hashes) == first.prompt_tokens // 16
    r = first.replica
    assert (r.in_flight, r.queued_prefill_tokens) == (1, first.uncached_tokens)
    router.release_prefill(first)
    router.release_prefill(first)
    assert (r.in_flight, r.queued_prefill_tokens) == (1, 0)
    router.release(first)
    router.release(first)
    assert (r.in_flight, r.queued_prefill_tokens) == (0, 0)

    second = router.route(chat(DOC + " question two"))
    assert second.replica is r and second.reason == "affinity"
    assert second.matched_tokens == len(first.block_hashes) * 16
    assert second.uncached_tokens == second.prompt_tokens - second.matched_tokens
    assert r.queued_prefill_tokens == second.uncached_tokens
    router.release(second)  # release without release_prefill still releases both
    assert (r.in_flight, r.queued_prefill_tokens) == (0, 0)


def test_tenants_never_match_each_others_prefixes():
    router = PoolRouter(fleet(3), RoutingConfig(seed=1))
    router.release(router.route(chat(DOC, salt="tenant-a")))
    other = router.route(chat(DOC, salt="tenant-b"))
    assert other.matched_tokens == 0 and other.reason == "cold"


def test_exclude_and_health():
    router = PoolRouter(fleet(3), RoutingConfig(seed=1))
    home = router.route(chat(DOC))
    router.release(home)
    retry = router.route(chat(DOC), exclude={home.replica.id})
    assert retry.replica is not home.replica
    router.replicas[0].healthy = False
    assert all(router.route(chat(f"p{i}")).replica.id != "r0" for i in range(20))
    with pytest.raises(NoReplicaAvailable):
        router.route(chat(DOC), exclude={"r1", "r2"})


def test_two_routers_without_shared_state_place_cold_prompts_alike():
    cfg = RoutingConfig(policy="prefix_affinity")  # no seed: only the tie break is random
    a, b = PoolRouter(fleet(5), cfg), PoolRouter(list(reversed(fleet(5))), cfg)
    placed = set()
    for i in range(60):
        req = chat(f"cold conversation {i} " * 30)
        da, db = a.route(req), b.route(req)
        assert da.reason == db.reason == "cold"
        assert da.replica.id == db.replica.id
        placed.add(da.replica.id)
        a.release(da)
        b.release(db)
    assert len(placed) >= 4


def test_reported_load_counts_until_stale():
    clock = Clock()
    router = PoolRouter(fleet(2), RoutingConfig(policy="least_load", report_stale_s=5.0), clock=clock)
    assert router.update_reported("r0", running=8, waiting=4, kv_usage=0.9)
    assert not router.update_reported("nope", 1, 1)
    assert router.replica("r0").load() == 12
    assert router.route(chat("x")).replica.id == "r1"
    clock.t += 6  # the report is now stale: ignored, r0 counts only our own in-flight (0)
    router.replica("r1").in_flight = 3
    assert router.route(chat("x")).replica.id == "r0"
    assert router.replica("r0").reported_running is None


def test_set_replicas_keeps_staying_replicas_and_their_index():
    router = PoolRouter(fleet(3, capacity=1000), RoutingConfig(seed=1))
    d = router.route(chat(DOC))
    home = d.replica
    kept = next(r for r in router.replicas if r is not home)
    new = [ReplicaState(id=home.id, url="http://127.0.0.1:9999", kv_capacity_blocks=10)]
    new.append(ReplicaState(id="r9", url="http://127.0.0.1:9009"))
    router.set_replicas(new)
    assert [r.id for r in router.replicas] == [home.id, "r9"]
    assert router.replicas[0] is home  # same object: the in-flight decision still releases it
    assert home.url == "http://127.0.0.1:9999" and home.in_flight == 1
    stats = router.stats().index
    assert set(stats.per_replica) == {home.id, "r9"} and kept.id not in stats.per_replica
    assert stats.per_replica[home.id] == 10  # shrunk to the new capacity
    router.release(d)
    again = router.route(chat(DOC))
    assert again.replica is home and again.matched_tokens == 160
    with pytest.raises(ValueError, match="unique"):
        router.set_replicas([ReplicaState(id="x", url=""), ReplicaState(id="x", url="")])


def test_index_ttl_through_the_router():
    clock = Clock()
    router = PoolRouter(fleet(3), RoutingConfig(seed=1, index_ttl_s=30), clock=clock)
    router.release(router.route(chat(DOC)))
    clock.t += 10
    assert router.route(chat(DOC)).matched_tokens > 0
    clock.t += 31
    assert router.route(chat(DOC + "!")).matched_tokens == 0


def test_token_id_completions_and_observed_usage():
    router = PoolRouter(fleet(2), RoutingConfig(seed=1))
    req = RouteRequest("completions", "m", {"model": "m", "prompt": list(range(100))})
    first = router.route(req)
    assert first.prompt_tokens == 100 and len(first.block_hashes) == 6
    router.release(first)
    second = router.route(req)
    assert second.matched_tokens == 96
    router.observe_usage(second, 80)
    stats = router.stats()
    assert (stats.decisions, stats.predicted_cached_tokens, stats.observed_cached_tokens) == (2, 96, 80)


def test_hf_tokenizer_through_the_router(tmp_path):
    tok = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(
        ["the same long document question"], trainers.WordLevelTrainer(special_tokens=["[UNK]"])
    )
    tok.save(str(tmp_path / "tokenizer.json"))
    cfg = RoutingConfig(seed=1, tokenizer=TokenizerConfig(kind="hf", path=str(tmp_path / "tokenizer.json")))
    router = PoolRouter(fleet(3), cfg)
    first = router.route(chat(DOC))
    rendered = render_prompt("chat", chat(DOC).body)
    assert first.prompt_tokens == len(tok.encode(rendered, add_special_tokens=False).ids) > 400
    router.release(first)
    second = router.route(chat(DOC + " question"))
    assert second.replica is first.replica and second.matched_tokens == first.prompt_tokens // 16 * 16


def test_forget_failed_unlearns_only_what_the_decision_added():
    router = PoolRouter(fleet(2), RoutingConfig(seed=1))
    first = router.route(chat(DOC))
    router.release(first)
    longer = router.route(chat(DOC + " and a much longer follow-up question " * 10))
    assert longer.replica is first.replica and longer.matched_tokens > 0
    router.forget_failed(longer)  # say the upstream refused the connection
    router.release(longer)
    again = router.route(chat(DOC + " and a much longer follow-up question " * 10))
    assert again.matched_tokens == longer.matched_tokens  # the shared part is still known, the rest is not


def test_set_capacity_rebounds_the_index():
    router = PoolRouter(fleet(2), RoutingConfig(seed=1))
    d = router.route(chat(DOC))
    assert router.stats().index.per_replica[d.replica.id] == len(d.block_hashes)
    assert router.set_capacity(d.replica.id, 4)
    assert not router.set_capacity("nope", 4) and not router.set_capacity(d.replica.id, 0)
    assert router.stats().index.per_replica[d.replica.id] == 4
    assert d.replica.kv_capacity_blocks == 4


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(["chat", "completions", "embeddings"]),
    st.dictionaries(
        st.sampled_from(["messages", "tools", "prompt", "input", "model"]), json_values, max_size=4
    ),
)
def test_any_json_body_routes_without_raising(endpoint, body):
    router = PoolRouter(fleet(3), RoutingConfig(seed=1))
    d = router.route(RouteRequest(endpoint, "m", body))
    assert d.prompt_tokens >= d.matched_tokens >= 0
    router.release(d)


def test_explicit_pin_wins_until_the_pinned_replica_is_saturated() -> None:
    from config.routing import RoutingConfig
    from router.pool import PoolRouter
    from router.replica import ReplicaState
    from router.types import RouteRequest

    replicas = [ReplicaState(id=f"r{i}", url=f"http://r{i}") for i in range(3)]
    router = PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=1))
    body = {"messages": [{"role": "user", "content": "pinned prompt " * 50}]}
    req = RouteRequest("chat", "m", body, "salt", pinned_replica="r2")
    first = router.route(req)
    assert (first.replica.id, first.reason) == ("r2", "explicit_pin")
    # Load r2 beyond the CHWBL bound: the pin yields to the policy, which leaves r2 too once its load
    # costs more than the prefix it holds is worth (500 x 64 tokens against 21 x ~170).
    replicas[2].in_flight = 500
    spilled = router.route(req)
    assert spilled.replica.id != "r2" and spilled.reason != "explicit_pin"
    # An unknown or unhealthy pinned replica is ignored.
    replicas[2].in_flight = 0
    replicas[2].healthy = False
    assert router.route(req).replica.id != "r2"


def test_load_adds_only_other_pods_share_of_a_report() -> None:
    from router.replica import ReplicaState

    r = ReplicaState(id="r", url="http://r")
    r.in_flight = 3
    assert r.load() == 3  # no report: our own count
    r.reported_running, r.reported_waiting, r.in_flight_at_report = 5.0, 2.0, 3
    assert r.load() == 3 + 4  # 7 reported, 3 of them ours at the time: 4 belong to other pods
    r.in_flight = 1  # two of ours finished since the report: they no longer count
    assert r.load() == 1 + 4
    r.reported_running, r.reported_waiting = 2.0, 0.0  # report below our own count: no one else
    assert r.load() == 1


def test_a_batch_lines_plan_is_a_soft_pin_within_the_share() -> None:
    """The planned replica takes the line within the bounded load; beyond it the policy picks among
    replicas whose share has room, and the line's slot moves there; no room anywhere waits."""
    from gateway.batch.runner import Slot, SlotPool
    from router.types import ReplicasBusy

    replicas = fleet(3)
    router = PoolRouter(replicas, RoutingConfig(policy="prefix_affinity", seed=1))
    slots, allowed = SlotPool(), {"r0": 2, "r1": 2, "r2": 2}

    def line(planned: str) -> tuple[RouteRequest, Slot]:
        assert slots.take(planned, allowed[planned])
        slot = Slot(slots, planned, lambda r: slots.used(r) < allowed[r])
        return RouteRequest("chat", "m", chat(DOC).body, "t", placement=slot), slot

    req, slot = line("r1")
    d = router.route(req)
    assert (d.replica.id, d.reason, slot.replica, slots.used("r1")) == ("r1", "batch_plan", "r1", 1)
    # r1 loaded beyond the bound (online traffic), by more than its cached prefix is worth to the policy
    # (64 a request in flight against 21 a matched token of a private prefix): the line goes where the
    # share has room, slot and all.
    replicas[1].in_flight = 400
    req, slot = line("r1")
    d = router.route(req)
    assert d.replica.id != "r1" and d.reason != "batch_plan" and slot.replica == d.replica.id
    assert slots.used("r1") == 1 and slots.used(d.replica.id) == 1
    # The other replicas' shares full: only the planned replica has room for the line, which holds a slot.
    allowed.update(r0=slots.used("r0"), r2=slots.used("r2"))
    req, slot = line("r1")
    assert router.route(req).replica.id == "r1" and slot.replica == "r1"
    # The planned replica unhealthy and no room elsewhere: the line waits for a slot.
    replicas[1].healthy = False
    with pytest.raises(ReplicasBusy):
        router.route(req)
    assert sum(slots.in_use().values()) == 3  # three lines, one slot each, wherever they went


def test_fewer_cached_tokens_than_predicted_unlearn_the_replicas_oldest_entries():
    """The feedback of ``usage.prompt_tokens_details.cached_tokens``: a replica that had evicted a
    prefix the index still listed makes the index drop as many of its least recently sent entries, so
    an older prefix it surely lost no longer attracts requests there."""
    router = PoolRouter(fleet(1, capacity=10_000), RoutingConfig(seed=1))
    old = router.route(chat("an old conversation that was sent first " * 40))
    router.release(old)
    router.release(router.route(chat(DOC)))
    again = router.route(chat(DOC + " more"))
    assert again.matched_tokens >= 16 * 30
    router.observe_usage(again, again.matched_tokens)  # as predicted: nothing to unlearn
    router.observe_usage(again, again.matched_tokens - 16)  # one block short: the engine's last-token rule
    assert router.stats().index.unlearned == 0
    assert router.index.match(old.block_hashes)["r0"] == len(old.block_hashes)
    before = router.index.size("r0")
    router.observe_usage(again, 0)  # the replica had none of it
    missing = again.matched_tokens // 16 - 1  # more than the old conversation's entries
    stats = router.stats()
    assert len(old.block_hashes) < missing
    assert stats.index.unlearned == len(old.block_hashes)  # its own, just computed blocks are kept
    assert router.index.size("r0") == before - len(old.block_hashes)
    assert "r0" not in router.index.match(old.block_hashes)
    assert router.index.match(again.block_hashes)["r0"] == len(again.block_hashes)  # the recent one stays
