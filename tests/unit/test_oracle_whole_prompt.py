"""bench.oracle's pooled bound of a whole-prompt engine (bench.routing_matrix's ``prompt`` cells)."""

from __future__ import annotations

from bench.oracle import oracle


def chat(text: str) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def test_a_block_eviction_takes_its_whole_prompt():
    """A 64-block cache: "a" (40 blocks), then "b" (40) pushes out 16 of a's blocks. By block, a's head
    (24 blocks) still hits; by whole prompt, a's first evicted block takes all of a."""
    a, b = "a" * 64 * 40, "b" * 64 * 40
    bodies = [chat(a), chat(b), chat(a)]
    by_block = oracle(bodies, capacity_blocks=64).per_request[2][1]
    whole = oracle(bodies, capacity_blocks=64, whole_prompt=True).per_request[2][1]
    assert by_block > 0
    assert whole == 0
    assert oracle(bodies, whole_prompt=True).hit_rate == oracle(bodies).hit_rate  # no bound: no eviction
