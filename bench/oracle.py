"""The oracle hit rate and the pooled bound of a request stream: one cache that sees the whole stream.

Block-granular exactly like the simulator (same chat template, same token approximation, same chained
block hashes, whole leading blocks only, and in engine mode at most ``tokens - 1`` tokens: the last
token is always computed), so ``fleet hit rate / oracle hit rate`` says how much of the reachable
prefix reuse a routing policy kept.

- ``capacity_blocks=None``: one infinite cache (the oracle): an upper bound no fleet of separate caches
  can beat (up to the order in which concurrent requests reach the replicas).
- ``capacity_blocks=N``: one LRU cache of ``N`` blocks, the fleet's total KV pooled (the pooled bound):
  what a perfect router could keep if the fleet were one replica with all the memory; a request's
  blocks are refreshed head last (freed tail first, as vLLM frees them), so its head outlives its tail.
- ``whole_prompt=True``: that cache evicts as ``bench.routing_matrix``'s whole-prompt engine does: a
  block's eviction takes every block the same request cached (the pooled bound of such an engine).
Pure, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sim.kvcache import block_hashes, count_tokens
from sim.prompt import render_chat


@dataclass(frozen=True, slots=True)
class OracleResult:
    prompt_tokens: int
    hit_tokens: int
    per_request: tuple[tuple[int, int], ...] = ()  # (prompt tokens, hit tokens) of each request, in order

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def oracle(
    bodies: Iterable[dict[str, Any]],
    *,
    block_size: int = 16,
    bytes_per_token: int = 4,
    capacity_blocks: int | None = None,
    recompute_last: bool = True,
    whole_prompt: bool = False,
) -> OracleResult:
    """Prompt tokens and cached tokens of ``bodies`` (chat requests) under one cache of
    ``capacity_blocks`` (None: infinite). ``recompute_last``: the engine's rule (a hit leaves at least
    one token to compute); False for the simple model, which hits every whole block."""
    if capacity_blocks is not None and capacity_blocks < 1:
        raise ValueError("capacity_blocks must be at least 1")
    lru: OrderedDict[int, None] = OrderedDict()
    group: dict[int, int] = {}  # whole_prompt: hash -> the request that cached it
    members: dict[int, list[int]] = {}
    prompt = hits = 0
    each: list[tuple[int, int]] = []
    for body in bodies:
        data = render_chat(body)
        hashes = block_hashes(data, block_size=block_size, bytes_per_token=bytes_per_token)
        tokens = count_tokens(len(data), bytes_per_token)
        limit = (tokens - 1) // block_size if recompute_last else len(hashes)
        matched = 0
        for h in hashes:
            if matched >= limit or h not in lru:
                break
            matched += 1
        prompt += tokens
        hits += matched * block_size
        each.append((tokens, matched * block_size))
        for h in reversed(hashes):
            if whole_prompt and h not in lru:
                group[h] = len(each)
                members.setdefault(len(each), []).append(h)
            lru[h] = None
            lru.move_to_end(h)
        if capacity_blocks is not None:
            while len(lru) > capacity_blocks:
                h, _ = lru.popitem(last=False)
                if whole_prompt:
                    for o in members.pop(group.pop(h, -1), ()):
                        if o != h and lru.pop(o, 0) is None:
                            group.pop(o, None)
    return OracleResult(prompt, hits, tuple(each))
