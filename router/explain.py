"""Why a decision went where it went: each candidate's score terms, as the policy saw them.

``PoolRouter.route`` builds an ``Explanation`` (when its ``explain`` is on) from the same state the
policy read, before the decision adds its own load: each candidate's queued prefill, load and matched
tokens, the weights the policy applied (``PickContext.weights``, written by the policy as it picks),
and for a policy that scores (``prefix_affinity``) each candidate's score, recomputed from those terms
by its formula ``queued + decode_cost x load - reuse_factor x matched`` plus what it added to a
candidate beyond it (``PickContext.added``: prefix_affinity's hot-share term) and its eviction term
(``PickContext.evicted``: what the new blocks would push out of the replica's cache) (lowest wins). Nothing here
takes part in the choice: the explanation reads it. Only numbers and replica ids: never prompt text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from router.replica import ReplicaState


@dataclass(frozen=True, slots=True)
class CandidateTerms:
    replica: str
    queued_prefill_tokens: int
    load: float
    matched_tokens: int
    score: float | None  # the policy's score (lowest wins), for a policy that scores; else None
    added: float = 0.0  # what the policy added to the formula's score (the hot-share term)
    evicted: float = 0.0  # the eviction term's part of the score (what the new blocks push out)


@dataclass(slots=True, eq=False)
class Explanation:
    """One decision's terms. Read-only once built; the per-candidate records and scores are derived
    when asked for (an explanation is built on every decision, read for few)."""

    policy: str
    reason: str
    chosen: str
    prompt_tokens: int
    available_tokens: int  # the longest match over every replica (what the fleet held)
    weights: Mapping[str, float]
    terms: tuple[tuple[str, int, float, int], ...]  # (replica, queued prefill, load, matched) each
    decided_by_filter: bool = False  # a filter (pin, batch plan) decided before the policy
    added: Mapping[str, float] = field(default_factory=dict)  # replica -> score added beyond the formula
    evicted: Mapping[str, float] = field(default_factory=dict)  # replica -> the eviction term's score

    @property
    def candidates(self) -> tuple[CandidateTerms, ...]:
        factor, decode = self.weights.get("reuse_factor"), self.weights.get("decode_cost_tokens")
        scores = factor is not None and decode is not None
        added, evicted = self.added, self.evicted
        return tuple(
            CandidateTerms(
                rid,
                q,
                load,
                m,
                q + decode * load - factor * m + added.get(rid, 0.0) + evicted.get(rid, 0.0)  # type: ignore[operator]
                if scores
                else None,
                added.get(rid, 0.0),
                evicted.get(rid, 0.0),
            )
            for rid, q, load, m in self.terms
        )

    def why(self) -> str:
        """One sentence on why the winner won, from the terms."""
        if self.decided_by_filter:
            return (
                f"decided by the {self.reason} filter before the policy: {self.chosen} was the only candidate"
            )
        candidates = self.candidates
        won = next(c for c in candidates if c.replica == self.chosen)
        if won.score is None:
            return f"{self.policy} chose {self.chosen} ({self.reason}); this policy does not score candidates"
        others = sorted(
            (c for c in self.candidates if c.replica != self.chosen), key=lambda c: c.score or 0.0
        )
        tied = [c.replica for c in others if c.score == won.score]
        text = f"{self.chosen} had the lowest score {won.score:g}"
        if others:
            text += f" (next: {others[0].replica} at {others[0].score:g})"
        if tied:
            text += f"; tied with {', '.join(tied)}, broken by the most cache room, then the hash ring"
        longest = max((c.matched_tokens for c in candidates), default=0)
        pushed = [c.replica for c in candidates if c.added]
        if pushed:
            text += (
                f"; {', '.join(pushed)} scored more for having taken over their share of the recent decisions "
                "(a hot prefix)"
            )
        if any(c.evicted for c in candidates):
            text += f"; its new blocks would evict {won.evicted:g} tokens' worth there"
            text += " (the score counts what a placement pushes out of a full cache)"
        if self.reason == "spill":
            holder = next(c for c in candidates if c.matched_tokens == longest)
            text += (
                f"; {holder.replica} held a longer match ({longest} tokens) but its queued prefill and load "
                f"cost more than prefilling here"
            )
        elif self.reason == "cold":
            text += "; no replica held enough of the prompt to count as a match (cold)"
        elif self.reason == "affinity":
            text += f"; it held the longest match ({longest} of {self.prompt_tokens} tokens)"
        return text

    def as_json(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "reason": self.reason,
            "chosen": self.chosen,
            "prompt_tokens": self.prompt_tokens,
            "available_tokens": self.available_tokens,
            "weights": dict(self.weights),
            "candidates": [
                {
                    "replica": c.replica,
                    "queued_prefill_tokens": c.queued_prefill_tokens,
                    "load": c.load,
                    "matched_tokens": c.matched_tokens,
                    "score": c.score,
                    "added": c.added,
                    "evicted": c.evicted,
                    "chosen": c.replica == self.chosen,
                }
                for c in self.candidates
            ],
            "why": self.why(),
        }


def explain(
    candidates: Sequence[ReplicaState],
    matched_blocks: Mapping[str, int],
    block_size: int,
    hashed_tokens: int,
    prompt_tokens: int,
    weights: Mapping[str, float],
    added: Mapping[str, float],
    chosen: ReplicaState,
    reason: str,
    policy: str,
    available_tokens: int,
    decided_by_filter: bool,
    evicted: Mapping[str, float] | None = None,
) -> Explanation:
    """The terms of the candidates a policy read (before the decision counts its own load on
    ``chosen``). It takes the pick context's fields, not the context, so that the explanation, which a
    ``Decision`` carries, depends on nothing above ``router.replica``."""
    terms = tuple(
        [  # a list, not a generator: one call where a generator is one a candidate more
            (
                r.id,
                r.queued_prefill_tokens,
                r.load(),
                min(matched_blocks.get(r.id, 0) * block_size, hashed_tokens),
            )
            for r in candidates
        ]
    )
    return Explanation(
        policy,
        reason,
        chosen.id,
        prompt_tokens,
        available_tokens,
        weights,
        terms,
        decided_by_filter,
        dict(added),
        dict(evicted or {}),
    )
