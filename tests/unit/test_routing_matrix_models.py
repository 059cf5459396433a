"""The matrix's engine models (bench.routing_matrix): whole-prompt eviction groups each request's blocks."""

from __future__ import annotations

from bench.routing_matrix import PromptEngine
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
