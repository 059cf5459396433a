"""Each replica's effective KV capacity, learned from the replica's own ``cached_tokens``.

The approximate index bounds what it believes a replica holds by a capacity in router blocks. The
engine's published block count (vLLM's ``cache_config_info``) or ``default_kv_capacity_blocks`` is only
where the estimate starts: other tenants' prompts, decode tokens, preemptions and CPU tiers make what
our prompts can use differ from it, and many engines publish nothing. Every answer tells which way the
estimate is wrong, for the replica that served it:

- **an unpredicted hit** (``cached_tokens`` above the index's match by a block or more, while the index
  was at its bound): the replica still held blocks the bound had made the index forget. The estimate
  grows by ``GROW`` x those blocks. (Noisy when the bound is right: the index's LRU order is not the
  engine's; with a right published capacity the growth costs 0.01 of the pooled bound on the trace.)
- **a predicted hit that missed** (below the match by more than one engine block, the engine's
  last-token rule): the replica evicted blocks the index still lists. The estimate shrinks by
  ``SHRINK`` x those blocks (and the pool unlearns as many of the index's oldest entries).

The tolerance is learned too: ``cached_tokens`` is always a multiple of the engine's block, so their
greatest common divisor (``grain``) converges to the engine's block size within a few answers (1 for
SGLang's radix cache, 16 for vLLM, 64 or more elsewhere). With 64-token engine blocks and 16-token
router blocks a fixed one-block tolerance read every prompt's rounding as up to three evicted blocks
and unlearned them.

Why additive by the evidence, and why growing faster than shrinking, measured with
``python -m bench.routing_matrix`` (docs/benchmarks.md, "Routing robustness matrix"): too small a bound
is expensive (the index forgets conversations the replica still caches and the policy spreads them:
0.79-0.82 of the pooled bound on the Mooncake conversation trace at KV 25 %, capacity unpublished), too
large a bound is cheap (the misses it causes are unlearned: 0.98 at 2x). Each piece of evidence is as
large as the error it shows (a conversation's forgotten history, or its evicted blocks), so a handful of
answers from a replica's first minutes move the estimate most of the way. GROW on the tuning split
(capacity unpublished, 16- / 64-token engine blocks): 2 -> 0.93 / 0.89 of the pooled bound,
8 -> 0.96 / 0.91, 32 -> 0.98 / 0.94 (the estimates settle near 2x the truth, where a wrong bound costs
least); held out, 0.92-0.96. Bounds of ``1/MAX_FACTOR`` to ``MAX_FACTOR`` x the starting point keep the
index's memory bounded. Without ``cached_tokens`` (an engine that does not report it) nothing here
moves: the starting point stays, and an unpublished capacity keeps costing (0.77-0.84).
"""

from __future__ import annotations

from dataclasses import dataclass
from math import gcd

GROW = 32.0  # blocks of estimate per block the replica held beyond the index's match
SHRINK = 1.0  # blocks of estimate per block the replica had evicted
MAX_FACTOR = 8  # the estimate stays within [start / MAX_FACTOR, start * MAX_FACTOR]


@dataclass(slots=True)
class CapacityEstimate:
    """One replica's estimate, in router blocks."""

    start: int  # the published (or default) capacity it started from
    blocks: float
    grown: int = 0  # answers that grew it
    shrunk: int = 0  # answers that shrank it

    @property
    def bound(self) -> int:
        return max(1, round(self.blocks))

    def clamp(self) -> None:
        lo, hi = max(1.0, self.start / MAX_FACTOR), float(self.start * MAX_FACTOR)
        self.blocks = min(hi, max(lo, self.blocks))


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one answer says of the index's prediction for its replica, in router blocks."""

    missing: int  # predicted blocks the replica no longer held (0: none)
    surplus: int  # blocks it held beyond the prediction (0: none)


class CapacityLearner:
    """Capacity estimates of a pool's replicas and the engine block grain, from answers."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.grain = 0  # gcd of the non-zero cached_tokens seen (0: none seen yet)
        self._est: dict[str, CapacityEstimate] = {}

    def start(self, replica_id: str, blocks: int) -> int:
        """(Re)start a replica's estimate at ``blocks`` (published or default); returns the bound."""
        self._est[replica_id] = CapacityEstimate(blocks, float(blocks))
        return blocks

    def drop(self, replica_id: str) -> None:
        self._est.pop(replica_id, None)

    def estimate(self, replica_id: str) -> CapacityEstimate | None:
        return self._est.get(replica_id)

    def evidence(self, predicted_tokens: int, cached_tokens: int) -> Evidence:
        """Compare one answer with its prediction (and learn the engine's grain from it)."""
        if cached_tokens > 0:
            self.grain = gcd(self.grain, cached_tokens)
        bs = self.block_size
        tolerance = max(bs, self.grain)  # one engine block: the last token is always recomputed
        deficit = predicted_tokens - cached_tokens
        missing = (deficit - tolerance) // bs if deficit > tolerance else 0
        surplus = -deficit // bs if -deficit >= bs else 0
        return Evidence(missing, surplus)

    def observe(self, replica_id: str, ev: Evidence, index_size: int) -> int | None:
        """Move the replica's estimate by one answer's evidence; the new bound when it changed.

        ``index_size``: the replica's index entries when the answer came. A surplus only counts when the
        index was at its bound (else the bound did not make it forget: another gateway's request, TTL)."""
        est = self._est.get(replica_id)
        if est is None:
            return None
        before = est.bound
        if ev.missing:
            est.blocks -= SHRINK * ev.missing
            est.shrunk += 1
        elif ev.surplus and index_size + ev.surplus >= before:
            est.blocks += GROW * ev.surplus
            est.grown += 1
        est.clamp()
        return est.bound if est.bound != before else None
