"""The matrix's engine models (bench.routing_matrix): whole-prompt eviction groups each request's blocks."""

from __future__ import annotations

import pytest

from bench import routing_matrix
from bench.peer_models import SglangCacheAware
from bench.routing_matrix import PromptEngine
from bench.workloads import Workload
from router import pool
from sim.engine import EngineConfig, EngineRequest


def cache(engine: PromptEngine, hashes: list[int]) -> None:
    req = EngineRequest(prompt_hashes=hashes, num_prompt_tokens=16 * len(hashes), max_tokens=1)
    req.blocks = [None] * len(hashes)
    engine._cache_full(req, req.num_prompt_tokens)
    engine.pool.release(req.blocks)  # finished: its blocks idle, evictable as one group
    # the request is freed here, as the replay frees a finished one: a new request may take its address


def test_two_requests_never_share_a_group_even_when_one_is_freed_first() -> None:
    """The groups were ``id(req)``: CPython reuses a freed object's address, so the next request's
    blocks joined the freed one's group and one eviction took both (a cell moved 0.815-0.863 between
    runs of the same code)."""
    engine = PromptEngine(EngineConfig(num_gpu_blocks=64, block_size=16))
    for k in range(8):
        cache(engine, [1000 * k + i for i in range(4)])
    groups = [engine.pool.group[1000 * k] for k in range(8)]
    assert len(set(groups)) == 8, groups
    assert all(len(engine.pool.members[g]) == 4 for g in groups)


def test_round5_variants_set_the_unlearning_rule_and_the_peer_model_they_name(monkeypatch) -> None:
    """Each ablation variant must reach the replay as named (else its table column measures another
    router): the unlearning rule (``router.pool.UNLEARN``), and the sglang model's hash bound and
    balance threshold."""
    seen: list[tuple[str, int, object]] = []

    def fake_replay(wl, cfg, ecfg, replicas, rate, **kw):
        model = kw["make_policy"]() if kw["make_policy"] is not None else None
        seen.append((pool.UNLEARN, cfg.max_prefix_tokens, model))

    monkeypatch.setattr(pool, "UNLEARN", pool.UNLEARN)  # restored after the test
    monkeypatch.setattr(routing_matrix, "replay", fake_replay)
    cell = routing_matrix.Cell()
    variants = (
        "after",
        "unlearn-oldest",
        "unlearn-none",
        "sglang-model",
        "sglang-model-4k",
        "sglang-model-balance2",
    )
    for v in variants:
        routing_matrix.run_cell(None, EngineConfig(), cell, v, 1.0)  # type: ignore[arg-type]
    rules = [s[0] for s in seen]
    assert rules == ["proven", "oldest", "none", "proven", "proven", "proven"]
    assert [s[2] is None for s in seen] == [True, True, True, False, False, False]
    models = [s[2] for s in seen[3:]]
    assert all(isinstance(m, SglangCacheAware) for m in models)
    assert [s[1] for s in seen[3:]] == [65536, 4096, 65536]
    assert [m.balance_abs for m in models] == [64, 64, 2]  # type: ignore[union-attr]


def test_round6_zipf_cells_are_tune_only_and_use_neither_split_seed() -> None:
    """Round 6's own Zipf cells (``--set zipf-r6``) judge a router change on the tune split: their seeds
    are neither the tune matrix's 1 nor the held-out split's 2, and the held-out split refuses them."""
    assert len(routing_matrix.ZIPF_R6) == 12
    assert {seed for _, _, seed in routing_matrix.ZIPF_R6.values()} == {3, 4}
    with pytest.raises(SystemExit):
        routing_matrix.main(["--split", "heldout", "--set", "zipf-r6"])


def test_round7_small_engines_are_below_the_default_and_the_held_out_split_adds_cells() -> None:
    """Round 7's cells: every unpublished small engine is below ``default_kv_capacity_blocks`` (so an
    estimate started above the default is wrong there by construction); the held-out split runs the tune
    split's cells and others the tune split never sees."""
    tune, held = routing_matrix.small_cells("tune"), routing_matrix.small_cells("heldout")
    assert all(c.size is not None and c.size < 1 for c in held)
    assert held[: len(tune)] == tune and len(held) > len(tune)
    names = [c.name for c in held]
    assert len(set(names)) == len(names) and "bs64 unpub block cached e0.25" in names
    assert {c.name for c in tune}.isdisjoint({c.name for c in routing_matrix.trace_cells()})


def test_round10_cells_mimic_the_real_vllm_engine_and_gateway() -> None:
    """``--set real-vllm``: 256 blocks of 32 tokens a replica, router blocks of 32, two replicas on the
    real benchmark's workloads (the split's seeds), and no scrape where the capacity is unpublished."""
    jobs = routing_matrix.vllm_jobs("tune", None, 4000, None)
    assert {j.label for j in jobs} == {f"{w} seed {s}" for w in ("docs14x1k", "zipf16x3k") for s in (1, 2)}
    assert all((j.ecfg.num_gpu_blocks, j.ecfg.block_size, j.replicas) == (256, 32, 2) for j in jobs)
    assert all(j.routing == {"block_size": 32} and j.per_replica == 512 for j in jobs)
    assert {(j.name, j.cell.published, j.scrape_s) for j in jobs} == {
        ("vllm32 unpub", None, None),
        ("vllm32 pub", 1.0, 0.5),
    }
    held = routing_matrix.vllm_jobs("heldout", None, 4000, ["vllm32 unpub"])
    assert {j.label for j in held} == {f"{w} seed {s}" for w in ("docs14x1k", "zipf16x3k") for s in (3, 4)}
    assert {j.name for j in held} == {"vllm32 unpub"}


def test_an_unscraped_gateway_hears_no_load_but_a_peers_model_polls(monkeypatch) -> None:
    seen: list[tuple[bool, bool]] = []

    def fake_replay(wl, cfg, ecfg, replicas, rate, **kw):
        seen.append((kw["scrape"], kw["make_policy"] is not None))

    monkeypatch.setattr(routing_matrix, "replay", fake_replay)
    cell, wl = routing_matrix.Cell(32, "unpub"), Workload("docs14x1k", "")
    for v in ("after", "smg-model"):
        routing_matrix.run_cell(wl, EngineConfig(), cell, v, 1.0, 2, {"block_size": 32}, None)
    routing_matrix.run_cell(wl, EngineConfig(), cell, "after", 1.0, 2, None, 0.5)
    assert seen == [(False, False), (True, True), (True, False)]
