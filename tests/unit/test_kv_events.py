"""KV-event decoding, sequence tracking, the exact index and precise routing, on recorded real batches."""

from __future__ import annotations

import base64
import gzip
import json
import shutil
from pathlib import Path

import msgpack
import pytest

from config.routing import RoutingConfig
from router.exact_index import ExactIndex
from router.kv_events import (
    Cleared,
    DecodeError,
    Removed,
    SeqTracker,
    SeqVerdict,
    Stored,
    apply_events,
    decode_batch,
    split_frames,
)
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events"


@pytest.fixture(scope="module")
def recording() -> dict:
    return json.loads((FIXTURES / "tiny_llama_bs32.json").read_text())


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("model")
    with gzip.open(FIXTURES / "tokenizer.json.gz") as src, (d / "tokenizer.json").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURES / "tokenizer_config.json", d / "tokenizer_config.json")
    return d


def batches(recording: dict):
    for f in recording["frames"]:
        yield f["seq"], decode_batch(base64.b64decode(f["payload"]))


# -- decoding ---------------------------------------------------------------------------------------------
def test_recorded_batches_decode_with_stores_and_removals(recording):
    seqs, kinds = [], set()
    for seq, batch in batches(recording):
        seqs.append(seq)
        kinds |= {type(e) for e in batch.events}
        assert batch.ts > 0
    assert seqs == list(range(len(seqs)))  # a contiguous sequence from 0
    assert kinds == {Stored, Removed}


def test_three_frames_and_bytes_hashes_and_cleared():
    digest = bytes(range(32))
    payload = msgpack.packb(
        [
            1.5,
            [
                {
                    "type": "BlockStored",
                    "block_hashes": [digest],
                    "parent_block_hash": None,
                    "token_ids": [1] * 4,
                    "block_size": 4,
                    "lora_name": None,
                    "medium": "GPU",
                    "extra_keys": [["s"]],
                },
                {"type": "AllBlocksCleared"},
                {"type": "SomethingNew", "x": 1},
            ],
            None,
        ]
    )
    topic, seq, body = split_frames([b"r1", (7).to_bytes(8, "big"), payload])
    batch = decode_batch(body)
    assert (topic, seq) == (b"r1", 7)
    stored, cleared = batch.events  # the unknown kind is dropped
    assert isinstance(stored, Stored) and isinstance(cleared, Cleared)
    assert stored.block_hashes == (int.from_bytes(digest[-8:], "big"),) and stored.salted
    with pytest.raises(DecodeError):
        split_frames([b"r1", b"\x00", payload])
    with pytest.raises(DecodeError):
        decode_batch(b"\xc1")
    with pytest.raises(DecodeError):
        decode_batch(msgpack.packb([1.0, "not a list"]))


# -- sequence numbers -------------------------------------------------------------------------------------
def test_seq_tracker_verdicts():
    t = SeqTracker()
    assert t.check(5, ts=100.0) is SeqVerdict.FIRST
    t.advance(5, ts=100.0)
    assert t.check(6, ts=101.0) is SeqVerdict.APPLY
    t.advance(6, ts=101.0)
    assert t.check(9, ts=102.0) is SeqVerdict.GAP and t.gaps == 1
    # Behind the expected number: an old batch (already applied) or a restarted replica (newer).
    assert t.check(3, ts=99.0) is SeqVerdict.DUPLICATE
    assert t.check(0, ts=101.0) is SeqVerdict.DUPLICATE
    assert t.check(0, ts=200.0) is SeqVerdict.RESTART and t.restarts == 1
    assert t.check(2, ts=200.0) is SeqVerdict.RESTART  # its batches 0 and 1 were lost


# -- the exact index --------------------------------------------------------------------------------------
def test_replaying_the_recording_leaves_stored_minus_removed(recording):
    idx = ExactIndex()
    stored, removed = set(), set()
    for _, batch in batches(recording):
        apply_events(idx, "r0", batch.events, engine_block_size=32)
        for e in batch.events:
            if isinstance(e, Stored):
                stored |= set(e.block_hashes)
                removed -= set(e.block_hashes)
            elif isinstance(e, Removed):
                removed |= set(e.block_hashes)
    held = {h for h in stored if idx.holds("r0", h)}
    assert held == stored - removed and removed  # the recording evicts
    assert idx.is_live("r0") and not idx.is_live("r1")
    assert idx.stats().held["r0"] == len(held)


def test_block_size_mismatch_is_counted_not_applied(recording):
    idx = ExactIndex()
    _, first = next(batches(recording))
    stats = apply_events(idx, "r0", first.events, engine_block_size=64)
    assert stats.block_size_mismatch == 1 and stats.stored == 0 and stats.block_sizes == {32}


def test_match_counts_leading_blocks_and_speculation_expires():
    idx = ExactIndex(speculative_ttl_s=2.0)
    idx.stored("r0", [1, 2, 3])
    assert idx.match("r0", [1, 2, 3, 4], now=0.0) == 3
    assert idx.match("r0", [9, 1, 2], now=0.0) == 0
    idx.speculate("r0", [1, 2, 3, 4, 5], now=10.0)
    assert idx.match("r0", [1, 2, 3, 4, 5], now=11.0) == 5
    assert idx.match("r0", [1, 2, 3, 4, 5], now=12.5) == 3  # unconfirmed blocks expired
    idx.speculate("r0", [4, 5], now=20.0)
    idx.stored("r0", [4])  # confirmed: no longer expires
    assert idx.match("r0", [1, 2, 3, 4, 5], now=30.0) == 4
    idx.removed("r0", [2])
    assert idx.match("r0", [1, 2, 3], now=30.0) == 1
    idx.speculate("r0", [7, 8], now=40.0)
    idx.forget_speculative("r0", [7, 8])
    assert idx.match("r0", [7], now=40.0) == 0
    idx.cleared("r0")
    assert idx.match("r0", [1], now=40.0) == 0 and idx.is_live("r0")
    idx.stored("r0", [1])
    idx.purge("r0")
    assert not idx.is_live("r0") and idx.match("r0", [1], now=40.0) == 0


def test_an_index_past_its_bound_purges_instead_of_growing():
    idx = ExactIndex(max_blocks_per_replica=3)
    idx.stored("r0", [1, 2, 3])
    idx.stored("r0", [4])
    assert idx.stats().held["r0"] == 0 and idx.stats().purges["r0"] == 1


# -- precise routing --------------------------------------------------------------------------------------
def precise_router(model_dir: Path, ttl: float = 5.0) -> tuple[PoolRouter, list[float]]:
    cfg = RoutingConfig(
        policy="prefix_affinity",
        index="precise",
        block_size=32,
        engine_block_size=32,
        tokenizer={"kind": "hf", "path": str(model_dir / "tokenizer.json")},
        kv_events={"speculative_ttl_s": ttl},
        seed=1,
    )
    now = [100.0]
    replicas = [ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}") for i in range(3)]
    router = PoolRouter(replicas, cfg, clock=lambda: now[0])
    router.attach_exact(ExactIndex(cfg.kv_events.speculative_ttl_s))
    return router, now


def chat_request(recorded: dict) -> RouteRequest:
    return RouteRequest(recorded["endpoint"], "tiny-llama", recorded["body"], recorded["salt"] or "")


def test_precise_routing_follows_the_replica_whose_events_hold_the_prefix(recording, model_dir):
    router, _ = precise_router(model_dir)
    # Replica r2 published the recording (first five batches: the shared system prompt, all tenants).
    for _, batch in list(batches(recording))[:5]:
        apply_events(router.exact, "r2", batch.events, engine_block_size=32)
    apply_events(router.exact, "r0", [])  # r0's events flow, it holds nothing
    for req in recording["requests"][:4]:
        d = router.route(chat_request(req))
        assert d.replica.id == "r2" and d.reason == "affinity"
        assert d.matched_tokens == req["usage"]["prompt_tokens"] // 32 * 32
        assert d.engine_block_hashes
        router.release(d)
    assert router.stats().precise_decisions == 4


def test_events_overrule_the_approximate_guess_and_unlive_replicas_keep_it(recording, model_dir):
    router, now = precise_router(model_dir, ttl=2.0)
    req = chat_request(recording["requests"][0])
    first = router.route(req)  # cold: no replica is live, approximate placement
    router.release(first)
    assert not first.engine_block_hashes  # no live replica: engine hashes not even computed
    again = router.route(req)
    assert again.replica is first.replica and again.reason == "affinity"  # approximate index remembers
    router.release(again)
    # Now the replica's events say it holds nothing (e.g. evicted): its approximate guess is overruled.
    apply_events(router.exact, first.replica.id, [Cleared()])
    third = router.route(req)
    assert third.matched_tokens == 0 and third.reason == "cold"
    router.release(third)
    # ... but the decision itself is speculative for the TTL: a burst right behind it sticks.
    fourth = router.route(req)
    assert fourth.replica is third.replica and fourth.matched_tokens > 0
    router.release(fourth)
    now[0] += 3.0  # unconfirmed: forgotten
    assert router.exact.match(third.replica.id, third.engine_block_hashes, now[0]) == 0


def test_forget_failed_takes_back_speculative_engine_blocks(recording, model_dir):
    router, now = precise_router(model_dir)
    apply_events(router.exact, "r0", [])
    apply_events(router.exact, "r1", [])
    apply_events(router.exact, "r2", [])
    d = router.route(chat_request(recording["requests"][0]))
    assert router.exact.match(d.replica.id, d.engine_block_hashes, now[0]) == len(d.engine_block_hashes)
    router.forget_failed(d)
    router.release(d)
    assert router.exact.match(d.replica.id, d.engine_block_hashes, now[0]) == 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"policy": "round_robin"}, "policy must be 'prefix_affinity'"),
        ({"tokenizer": {"kind": "approx"}}, "tokenizer.kind must be 'hf'"),
        ({"engine_block_size": None}, "engine_block_size must be set"),
        ({"engine_block_size": 48}, "must be a multiple of block_size"),
        ({"kv_events": {"bind": "http://x"}}, "tcp://host:port"),
        ({"kv_events": {"topics": {"a": "t", "b": "t"}}}, "unique"),
    ],
)
def test_precise_config_errors_are_clear(changes, message):
    base = {
        "index": "precise",
        "block_size": 32,
        "engine_block_size": 128,
        "tokenizer": {"kind": "hf", "path": "/m/tokenizer.json"},
    }
    with pytest.raises(ValueError, match=message):
        RoutingConfig(**{**base, **changes})
    assert RoutingConfig(**base).kv_events is not None  # defaulted for precise
