"""The oracle hit rate: one infinite prefix cache that sees the whole request stream, in order.

It is block-granular exactly like the simulator (same chat template, same token approximation, same
chained block hashes, whole leading blocks only), so ``fleet hit rate / oracle hit rate`` says how much
of the reachable prefix reuse a routing policy kept. No capacity bound and no routing: an upper bound
no fleet of separate caches can beat (up to the order in which concurrent requests reach the replicas).
Pure, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from bench.sim.kvcache import block_hashes, count_tokens
from bench.sim.prompt import render_chat


@dataclass(frozen=True, slots=True)
class OracleResult:
    prompt_tokens: int
    hit_tokens: int
    per_request: tuple[tuple[int, int], ...] = ()  # (prompt tokens, hit tokens) of each request, in order

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def oracle(
    bodies: Iterable[dict[str, Any]], *, block_size: int = 16, bytes_per_token: int = 4
) -> OracleResult:
    """Prompt tokens and cached tokens of ``bodies`` (chat requests) under one infinite cache."""
    seen: set[int] = set()
    prompt = hits = 0
    each: list[tuple[int, int]] = []
    for body in bodies:
        data = render_chat(body)
        hashes = block_hashes(data, block_size=block_size, bytes_per_token=bytes_per_token)
        matched = 0
        for h in hashes:
            if h not in seen:
                break
            matched += 1
        tokens = count_tokens(len(data), bytes_per_token)
        prompt += tokens
        hits += matched * block_size
        each.append((tokens, matched * block_size))
        seen.update(hashes)
    return OracleResult(prompt, hits, tuple(each))
