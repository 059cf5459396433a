"""Estimates as replays: the tenant's recent prompts, as units, re-billed with ``cache.billing.pricing.bill``.

A prompt is a sequence of *units* ``(hash, tokens)`` (its content-defined chunks, or a chunk moved by
the advice). ``replay`` walks a sequence of prompts in the order they came, keeps what a prefix cache
would hold (the chained hash of every unit boundary seen so far) and an explicit registry (marked
prefixes with their expiry, renewed on a read, ``explicit_ttl_s``), and bills each request with the
same ``bill`` the ledger uses: implicit cached tokens are the longest repeated prefix floored to whole
blocks, a marked prefix of at least ``explicit_min_tokens`` is a creation or a read and then the rest
of the prompt is billed in full (explicit and implicit are exclusive per request), a prompt under
``implicit_min_tokens`` gets no discount. A finding's saving is ``replay(as is) − replay(advised)``
over the same requests: the two runs share every approximation (the sample, the cold start, a single
cache for the fleet), so their difference is what the change saves, and a change that would raise the
cost shows as a negative saving and is not advised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cache.billing.pricing import ExplicitOutcome, ModelPrices, RequestUsage, Rules, bill

Units = Sequence[tuple[int, int]]  # (unit hash, tokens)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request to replay: its units, its token count, its marked prefix (0: none), when it came."""

    units: Units
    prompt_tokens: int
    marked_tokens: int
    ts: float


@dataclass(frozen=True, slots=True)
class ReplayCost:
    micros: int
    requests: int
    cached_tokens: int  # implicit
    explicit_tokens: int

    def per_request(self) -> float:
        return self.micros / self.requests if self.requests else 0.0


def _chain(units: Units) -> list[tuple[int, int]]:
    """(chained hash, tokens through this unit) at each unit boundary."""
    out, h, tok = [], 0, 0
    for u, t in units:
        h = hash((h, u))
        tok += t
        out.append((h, tok))
    return out


def replay(prompts: Sequence[Prompt], rules: Rules, prices: ModelPrices, block_size: int) -> ReplayCost:
    seen: set[int] = set()
    registry: dict[tuple[int, int], float] = {}  # (prefix chain hash, marked tokens) -> expiry
    total = cached_sum = explicit_sum = 0
    for p in prompts:
        chain = _chain(p.units)
        hit_tokens = 0
        for h, tok in chain:
            if h not in seen:
                break
            hit_tokens = tok
        cached = min(p.prompt_tokens, hit_tokens // block_size * block_size)
        outcome = None
        if p.marked_tokens > 0:
            marked = min(p.marked_tokens, p.prompt_tokens)
            key_hash = 0
            for h, tok in chain:
                if tok > marked:
                    break
                key_hash = h
            key = (key_hash, marked)
            if marked >= rules.explicit_min_tokens:
                live = registry.get(key, float("-inf")) > p.ts
                outcome = ExplicitOutcome(marked, "hit" if live else "created")
                registry[key] = p.ts + rules.explicit_ttl_s
        seen.update(h for h, _ in chain)
        item = bill(
            RequestUsage(p.prompt_tokens, 0, cached, "replica"),
            prices,
            rules,
            outcome,
            "upstream",
            request_id="",
            tenant="",
            model="",
            ts_ms=0,
        )
        total += item.total_micros
        cached_sum += item.tokens.implicit_hit
        explicit_sum += item.tokens.explicit_hit + item.tokens.explicit_create
    return ReplayCost(total, len(prompts), cached_sum, explicit_sum)
