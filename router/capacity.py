"""Each replica's effective KV capacity, learned from the replica's own ``cached_tokens``.

The approximate index bounds what it believes a replica holds by a capacity in router blocks. The
engine's published block count (vLLM's ``cache_config_info``) or ``default_kv_capacity_blocks`` is only
where the estimate starts: other tenants' prompts, decode tokens, preemptions and CPU tiers make what
our prompts can use differ from it, and many engines publish nothing. Every answer tells which way the
estimate is wrong, for the replica that served it:

- **a hit on a ghost** (``cached_tokens`` above the index's match, on blocks the index's bound had
  made it forget: ``PrefixIndex`` keeps a ghost list of those, as many as the bound, with how many
  evictions came after each): a bound larger by the ghost's depth would have kept them. The estimate
  grows to the bound plus ``GROW`` (published start) or ``UNPUBLISHED_GROW`` (the default) x that depth.
  A hit on anything else (decode blocks the engine caches and the index never listed, another
  gateway's requests, a TTL) says nothing of the bound and moves nothing.
- **a predicted hit that missed** (below the match by more than one engine block, the engine's
  last-token rule): the replica evicted blocks the index still lists. The estimate shrinks by
  ``SHRINK`` x those blocks (and the pool unlearns up to as many of the index's entries sent before
  them, ``router.pool.UNLEARN``).

The tolerance is learned too: ``cached_tokens`` is always a multiple of the engine's block, so their
greatest common divisor (``grain``) converges to the engine's block size within a few answers (1 for
SGLang's radix cache, 16 for vLLM, 64 or more elsewhere).

Why ghosts, measured with ``python -m bench.routing_matrix`` (tuning split: the Mooncake conversation
trace's first 4,000 records at KV 25 %, Zipf seed 1; docs/benchmarks.md, "Routing robustness matrix"):
the previous rule grew by 32 x every surplus while the index was at its bound, and a right published
capacity drifted to 2-4x the truth (the index's LRU order is not the engine's, and vLLM caches decode
blocks the index never sent). On the Zipf tight cache that hid the fullness the eviction term reads
(``router.policies.prefix_affinity``): 0.964 of the pooled bound with busy imbalance 1.37, against
0.987 and 1.14 now (learned capacity 1.01 x the engine's). Why two rates: a published capacity is
evidence, the default a guess; too small a bound is expensive on the trace (the index forgets
conversations the replica still caches) and too large one cheap (misses are unlearned). Unpublished,
64-token engine blocks (the issue's cell): UNPUBLISHED_GROW 2 -> 0.907 of the pooled bound, 4 -> 0.922,
8 -> 0.926, 32 -> 0.929; published 2x-trusted (``PUBLISHED_FACTOR``) GROW 2 kept Zipf at 0.97-0.99
where 4 gave 0.94-0.99 (2,000 records). Bounds of ``1/MAX_FACTOR`` to ``MAX_FACTOR`` x the default, ``1/PUBLISHED_FACTOR``
to ``PUBLISHED_FACTOR`` x a published value, keep the index's memory bounded.

Where an unpublished estimate starts (round 7): at its ceiling (``UNPUBLISHED_START`` = ``MAX_FACTOR`` x
the default), where the index forgets nothing it may hold; the first predicted hit that missed
(``FIRST_MISS``) proves the replica holds less than the index listed at that moment, so the estimate
goes there, but not below the default (the guess it used to start from), and moves by the rules above
after that. A wrong default then costs little either way: an engine larger than the default is not
forgotten while the estimate would still be growing towards it, and a smaller one is back at the
default's behaviour from its first miss. Without ``cached_tokens`` no miss is ever seen and the
estimate stays at the ceiling (measured cheap: too large a bound only keeps affinity longer). Tune
split, ``python -m bench.routing_matrix --split tune --variants start-default after start4-noreset
start8-noreset start4 --cells <the 12 unpublished cells>`` (docs/benchmarks.md, "Round 7"), start at the
default -> this rule: mean 0.923 -> 0.930 of the pooled bound, up by 0.016-0.036 where misses are
scarce (bs16 / bs64 / bs16 e0.5 without ``cached_tokens``, the CPU tier), -0.011 / -0.013 on two
64-token cells (whole-prompt eviction; e0.25, worst cell 0.782 -> 0.769), the rest within 0.006. A
start 4 x the default without the reset (the previous round's untested note) had the same mean but
cost the small 64-token engines and bs16 e0.5 0.015-0.029; the ceiling without the reset the same.

A miss proves an unpublished estimate (round 8, ``PROVEN_MISSES``, ``FIRST_MISS_FLOOR``,
``UNPUBLISHED_LOW``, ``PROVEN_GROW``): a predicted hit that missed is evidence as a published capacity
is, so from the first one the estimate is ``proven``: the policy's eviction term reads it
(``router.policies.prefix_affinity``), its ghost growth is the published ``GROW`` instead of 32 x, and
the first miss takes it to what the index listed even below the default (down to the default / 64).
On the Zipf tight cache unpublished (330 blocks a replica, 1/25 of the default) round 7's estimate
ended at 18 x the engine (its floor the default / 8, growth 32 x a ghost's depth) and the term was off:
0.896 of the pooled bound; now 0.99 x the engine and 0.973 (busy imbalance 1.08). Tune split, ``python
-m bench.routing_matrix --split tune --variants r7 after proven-off low8 grow32 proven2 grow4`` (every
cell but bs1; docs/benchmarks.md, "Round 8"): the 12 unpublished cells' mean 0.930 -> 0.938, worst 0.769
-> 0.812 (bs64 e0.25), published cells identical; each change alone undone: term off (``proven-off``)
0.925, floor back at the default / 8 (``low8``) 0.924, growth 32 x (``grow32``) 0.935 (``zipf-unpub``
0.938, busy 1.18); proven only after 2 misses 0.929 (bs64 e0.25 0.741).

A depth estimator (round 9, ``ESTIMATOR = "depth"``, ``DepthTally``; off: measured, not adopted). Round
8's evidence is biased downwards (a miss shrinks on every request, a ghost hit comes only from requests
still routed there), so this reads both directions with one weight: each answer labels the listed
blocks (matched, and ghosts past the match) by their recency depth in the index's order, held or not by
the engine, and the capacity is the threshold the fewest decayed labels contradict, a published value a
prior of ``PRIOR_WEIGHT`` labels. It is unbiased where it starts right (the published 64-token twin held
at 1.00 x the engine for its whole run, against round 8's drift to 0.86 x) and that did not score: tune
split, ``python -m bench.routing_matrix --split tune --small-grid heldout --variants r8 depth
depth-gone0.5 --cells <every cell but bs1>`` (docs/benchmarks.md, "Round 9"): the twin 0.869 -> 0.859;
where the published value is too small it leaves the prior late or never (ghosts are in 4 % of the
answers: bs16 x0.5 0.50 x for a quarter of the run, 0.980 -> 0.934; bs64 x0.5 0.50 x throughout, 0.910
-> 0.792; the CPU tier 0.921 -> 0.862), Zipf 0.989 -> 0.973; the 12
unpublished cells' mean 0.938 -> 0.940 with the worst 0.812 -> 0.764 (on 64-token engines the fit ends at
2-3.4 x the engine's blocks) and ``zipf-unpub``'s busy imbalance 1.16.

Without ``cached_tokens`` in the answers (vLLM without ``--enable-prompt-tokens-details``) the replica's
scraped ``vllm:prefix_cache_hits`` counter is the evidence (``CounterWindow``): summed over the prefills
between two scrapes, its surplus over the index's predictions is read as the window's shallowest ghosts.
Growth only (a prefill counted before a scrape and heard of after it reads as a deficit, then a
surplus). Unpublished capacity on the trace, before -> after: 0.821 -> 0.980 of the pooled bound
(16-token blocks), 0.787 -> 0.940 (64).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from math import floor, gcd, log2

from router.replica import ReplicaState

GROW = 2.0  # blocks of estimate per block of a ghost hit's depth, past the bound
UNPUBLISHED_GROW = 32.0  # the same for an estimate that started from the default
SHRINK = 1.0  # blocks of estimate per block the replica had evicted
MAX_FACTOR = 8  # the estimate stays within [start / MAX_FACTOR, start * MAX_FACTOR]
PUBLISHED_FACTOR = 2  # the same around a published capacity
UNPUBLISHED_START = MAX_FACTOR  # an unpublished estimate starts at this x the default: its ceiling
FIRST_MISS = True  # its first miss takes it to what the index listed then (within the bounds)
FIRST_MISS_FLOOR = 0.0  # ... but not below this x the default (round 7: 1, the default itself)
UNPUBLISHED_LOW = 64  # an unpublished estimate stays above the default / this (round 7: MAX_FACTOR)
PROVEN_MISSES = 1  # predicted hits that missed that prove an unpublished estimate (0: never proven)
PUBLISHED_START = 1.0  # a published estimate starts at this x the value (above 1: its first miss resets
# it as an unpublished one's; round 8 measured 2 and left it out: docs/benchmarks.md, "Round 8")
PUBLISHED_LOW: float = PUBLISHED_FACTOR  # a published estimate stays above the value / this
PROVEN_GROW: float | None = GROW  # ghost growth of a proven unpublished estimate (None: UNPUBLISHED_GROW)
# Round 9: "depth": the depth estimator (``DepthTally``) instead of the rules above for answers that
# carry ``cached_tokens``; "r8" (committed): the rules above. The hit-counter path keeps them either
# way. Measured and not adopted: published cells fell 0.010-0.118 (docs/benchmarks.md, "Round 9").
ESTIMATOR = "r8"
HALF_LIFE = 256.0  # a replica's answers after which a label weighs half (the decay)
PRIOR_WEIGHT = 8.0  # a published value's weight, in labels of the newest answer's weight (not a floor)
PER_OCTAVE = 8  # depth buckets per doubling (9 % wide), anchored at the start
OCTAVES_BELOW = 8  # buckets span start / 2**OCTAVES_BELOW ..
OCTAVES_ABOVE = 5  # .. start * 2**OCTAVES_ABOVE (ghosts reach twice a ceiling of 8 x); beyond: the end ones
GONE_WEIGHT = 1.0  # a not-held label's weight against a held one's (below 1: the fit leans generous)
PLATEAU = "mid"  # where in the least-error plateau the estimate sits: "mid" (geometric middle) or "top"


@dataclass(slots=True)
class CapacityEstimate:
    """One replica's estimate, in router blocks."""

    start: int  # the published (or default) capacity it started from
    blocks: float
    factor: float = MAX_FACTOR  # the estimate stays within [start / factor, start * factor]
    grown: int = 0  # answers that grew it
    shrunk: int = 0  # answers that shrank it (the depth estimator: answers with a not-held label)
    tally: DepthTally | None = None  # the depth estimator's labels (None: not used yet)

    @property
    def published(self) -> bool:
        return self.factor == PUBLISHED_FACTOR

    @property
    def proven(self) -> bool:
        """Evidence bounds it: published, or shrunk by ``PROVEN_MISSES`` predicted hits that missed."""
        return self.published or (PROVEN_MISSES > 0 and self.shrunk >= PROVEN_MISSES)

    @property
    def bound(self) -> int:
        return max(1, round(self.blocks))

    def clamp(self) -> None:
        f = self.factor
        lo = max(1.0, self.start / (PUBLISHED_LOW if self.published else UNPUBLISHED_LOW))
        hi = float(self.start * f)
        self.blocks = min(hi, max(lo, self.blocks))


@dataclass(slots=True)
class DepthTally:
    """Decayed labels of one replica: blocks the index listed for it (matched, or ghosts past the match)
    by their recency depth in the index's order, held by the engine or not (its ``cached_tokens``).

    The capacity is the depth where "held" turns into "not held": the threshold that the fewest labels
    (by weight) contradict, a held label deeper than it or a not-held one shallower. An order error
    (the engine evicted a shallow block the index still lists) is one label against every held label
    deeper than it, and a deep ghost held counts as much as a shallow miss. Memory: two lists of
    ``PER_OCTAVE * (OCTAVES_BELOW + OCTAVES_ABOVE)`` floats (104) a replica; a label is O(1), the fit
    O(buckets). Decay: each answer's labels weigh ``2 ** (1 / HALF_LIFE)`` x the previous answer's
    (renormalised before they overflow), so an answer ``HALF_LIFE`` answers old weighs half."""

    start: int
    prior: float  # the published value's weight (0: none), in units of the newest answer's weight
    held: list[float] = field(default_factory=list)
    gone: list[float] = field(default_factory=list)
    weight: float = 1.0  # the next label's weight

    def __post_init__(self) -> None:
        n = PER_OCTAVE * (OCTAVES_BELOW + OCTAVES_ABOVE)
        self.held = [0.0] * n
        self.gone = [0.0] * n

    def bucket(self, depth: float) -> int:
        """Bucket b holds depths in [start * 2**((b - o) / PER_OCTAVE), start * 2**((b - o + 1) / ...))."""
        b = floor(log2(max(depth, 1e-9) / self.start) * PER_OCTAVE) + PER_OCTAVE * OCTAVES_BELOW
        return min(len(self.held) - 1, max(0, b))

    def add(self, held: Iterable[int], gone: Iterable[int]) -> None:
        """One answer's labels (depths, 1 = the most recent entry)."""
        w = self.weight
        for d in held:
            self.held[self.bucket(d)] += w
        g = w * GONE_WEIGHT
        for d in gone:
            self.gone[self.bucket(d)] += g
        self.weight = w * 2.0 ** (1.0 / HALF_LIFE)
        if self.weight > 1e100:
            k = 1.0 / self.weight
            self.held = [x * k for x in self.held]
            self.gone = [x * k for x in self.gone]
            self.weight = 1.0

    def fit(self) -> float | None:
        """The capacity the labels (and the prior) contradict least; None: the least-error plateau
        reaches past the deepest bucket (no not-held label above the held ones: no upper limit)."""
        held, gone = self.held, self.gone
        n = len(held)
        at = PER_OCTAVE * OCTAVES_BELOW  # the threshold at the start itself (a bucket edge)
        prior = self.prior * self.weight
        err = sum(held) + prior  # threshold 0: every held label (and the prior's held one) contradicts
        best, lo, hi = err, 0, 0
        eps = 1e-9 * (err + 1.0)
        for t in range(1, n + 1):  # threshold t: held below bucket t, not held from it on
            err += gone[t - 1] - held[t - 1]
            if t == at:
                err -= prior
            if t == at + 1:
                err += prior  # the prior's not-held label sits in bucket ``at``
            if err < best - eps:
                best, lo, hi = err, t, t
            elif err <= best + eps and hi == t - 1:
                hi = t
        if hi == n:
            return None
        edge = (lo + hi) / 2 if PLATEAU == "mid" else float(hi)
        return self.start * 2.0 ** ((edge - at) / PER_OCTAVE)


@dataclass(frozen=True, slots=True)
class Evidence:
    """What one answer says of the index's prediction for its replica, in router blocks."""

    missing: int  # predicted blocks the replica no longer held (0: none)
    surplus: int  # blocks it held beyond the prediction (0: none)
    depth: int = 0  # the deepest of those in the index's ghost list (0: none was a ghost)


class CapacityLearner:
    """Capacity estimates of a pool's replicas and the engine block grain, from answers."""

    def __init__(self, block_size: int) -> None:
        self.block_size = block_size
        self.grain = 0  # gcd of the non-zero cached_tokens seen (0: none seen yet)
        self._est: dict[str, CapacityEstimate] = {}

    def start(self, replica_id: str, blocks: int, published: bool = False) -> int:
        """(Re)start a replica's estimate at ``blocks`` (published, else the default); returns the bound."""
        if published:
            est = CapacityEstimate(blocks, blocks * PUBLISHED_START, PUBLISHED_FACTOR)
            est.clamp()
        else:  # a guess: start where it forgets nothing (the ceiling) until a miss says otherwise
            est = CapacityEstimate(blocks, blocks * UNPUBLISHED_START, MAX_FACTOR)
            est.clamp()
        self._est[replica_id] = est
        return est.bound

    def drop(self, replica_id: str) -> None:
        self._est.pop(replica_id, None)

    def estimate(self, replica_id: str) -> CapacityEstimate | None:
        return self._est.get(replica_id)

    def proven(self, replicas: Iterable[ReplicaState]) -> frozenset[str]:
        """The ids of ``replicas`` whose estimate evidence has proven (``CapacityEstimate.proven``)."""
        est = self._est
        return frozenset(
            [r.id for r in replicas if (e := est.get(r.id)) is not None and e.proven]
        )  # no generator

    def evidence(
        self, predicted_tokens: int, cached_tokens: int, ghost_depths: tuple[int, ...] = ()
    ) -> Evidence:
        """Compare one answer with its prediction (and learn the engine's grain from it).
        ``ghost_depths``: the decision's blocks past its match, as deep as each was in the index's
        ghost list (``PrefixIndex.ghost_depths``)."""
        if cached_tokens > 0:
            self.grain = gcd(self.grain, cached_tokens)
        bs = self.block_size
        tolerance = max(bs, self.grain)  # one engine block: the last token is always recomputed
        deficit = predicted_tokens - cached_tokens
        missing = (deficit - tolerance) // bs if deficit > tolerance else 0
        surplus = -deficit // bs if -deficit >= bs else 0
        depth = ghost_depths[min(surplus, len(ghost_depths)) - 1] if surplus and ghost_depths else 0
        return Evidence(missing, surplus, depth)

    def observe(self, replica_id: str, ev: Evidence, held: int | None = None) -> int | None:
        """Move the replica's estimate by one answer's evidence; the new bound when it changed.
        ``held``: how many entries the index lists for the replica now.

        A surplus counts only as far as its blocks were ghosts: what the bound had made the index forget
        (not another gateway's request, a TTL, or blocks the index never sent there). The first miss of
        an unpublished estimate (still at its optimistic start) proves the replica holds less than the
        index listed: the estimate goes to that, but not below the default (the guess it would have
        started from), before the miss's own shrink."""
        est = self._est.get(replica_id)
        if est is None:
            return None
        before = est.bound
        if ev.missing:
            first = not est.published or PUBLISHED_START > 1
            if FIRST_MISS and held is not None and not est.shrunk and first:
                est.blocks = max(min(est.blocks, float(held)), FIRST_MISS_FLOOR * est.start)
            est.blocks -= SHRINK * ev.missing
            est.shrunk += 1
        elif ev.depth:
            grow = GROW if est.published else UNPUBLISHED_GROW
            if PROVEN_GROW is not None and est.proven and not est.published:
                grow = PROVEN_GROW
            target = before + grow * ev.depth  # a bound that much larger would have kept them
            if target > est.blocks:
                est.blocks = target
                est.grown += 1
        est.clamp()
        return est.bound if est.bound != before else None

    @property
    def uses_depths(self) -> bool:
        """Answers with ``cached_tokens`` go to ``observe_depths`` (``ESTIMATOR``), else to ``observe``."""
        return ESTIMATOR == "depth"

    def observe_depths(
        self,
        replica_id: str,
        ev: Evidence,
        cached_tokens: int,
        listed: tuple[int, ...],
        ghost_depths: tuple[int, ...] = (),
        blocks: int = 0,
    ) -> int | None:
        """Label one answer's listed blocks held or not by their depth, refit; the new bound when it
        changed. ``listed``: at the decision, (matched blocks, depth of the match's first and deepest
        block, entries the index listed for the replica); ``ghost_depths`` as for ``evidence``;
        ``blocks``: the prompt's hashed blocks (a ghost within one engine block of its end may be the
        engine's last-token rule, not an eviction).

        Labels: a predicted hit that missed (``ev.missing``) puts "not held" at the first block the
        engine lacked and "held" at the last it had; otherwise "held" at the match's deepest block, and
        past it, on ghosts, "held" at the deepest ghost the engine had and "not held" at the first it
        lacked. A chain's blocks are listed together, deepest last, so a block's depth between the
        match's first and deepest is the deepest one's less its distance from the end; a ghost's is the
        entries listed plus its ghost depth (the evictions since it)."""
        est = self._est.get(replica_id)
        if est is None:
            return None
        known, d0, dlast, size = listed
        held_blocks = cached_tokens // self.block_size
        held: list[int] = []
        gone: list[int] = []
        if ev.missing and held_blocks < known:
            gone.append(max(d0, dlast - (known - 1 - held_blocks)))
            if held_blocks:
                held.append(max(d0, dlast - (known - held_blocks)))
        else:
            if known:
                held.append(dlast)
            extra = max(0, held_blocks - known)
            if ghost_depths:
                if extra:
                    held.append(size + ghost_depths[min(extra, len(ghost_depths)) - 1])
                tol = -(-max(self.block_size, self.grain) // self.block_size)  # one engine block
                if len(ghost_depths) > extra and known + extra + tol < blocks:
                    gone.append(size + ghost_depths[extra])
        if not held and not gone:
            return None
        tally = est.tally
        if tally is None:
            tally = est.tally = DepthTally(est.start, PRIOR_WEIGHT if est.published else 0.0)
        tally.add(held, gone)
        before = est.bound
        fit = tally.fit()
        est.blocks = float(est.start * est.factor) if fit is None else fit
        est.clamp()
        if gone:
            est.shrunk += 1
        if est.bound > before:
            est.grown += 1
        return est.bound if est.bound != before else None


@dataclass(slots=True)
class CounterWindow:
    """One replica's evidence between two scrapes of its prefix-cache hit counter (vLLM's
    ``prefix_cache_hits``), for a replica whose answers carry no ``cached_tokens``: the prefills it
    finished in the window, as the index predicted them, against the counter's increase.

    The counter sums the window's answers, so it says how many blocks the index was short, not which: a
    surplus is read as the ghosts of the window's decisions, shallowest first (the least growth that
    explains it). A deficit is not evidence here: a prefill the counter counted before the scrape and
    the router heard of after it reads as a deficit in one window and a surplus in the next, and
    shrinking on those collapsed the estimate (a published capacity: 0.98 -> 0.90 of the pooled bound;
    told half: 0.97 -> 0.65)."""

    last: float | None = None  # the counter at the previous scrape (None: not read yet)
    predicted: int = 0  # tokens the index predicted for the window's prefills
    prefills: int = 0
    ghosts: list[int] | None = None  # the window's ghost depths (PrefixIndex.ghost_depths), any order

    def add(self, predicted_tokens: int, ghost_depths: tuple[int, ...]) -> None:
        self.predicted += predicted_tokens
        self.prefills += 1
        if ghost_depths:
            if self.ghosts is None:
                self.ghosts = []
            self.ghosts.extend(ghost_depths)

    def close(self, learner: CapacityLearner, total: float) -> Evidence | None:
        """The counter now reads ``total``: the window's evidence (None: no surplus), and a new window.
        A counter that went down (the replica restarted) starts over."""
        last, self.last = self.last, total
        predicted, prefills, ghosts = self.predicted, self.prefills, self.ghosts
        self.predicted = self.prefills = 0
        self.ghosts = None
        if last is None or total < last or not prefills:
            return None
        surplus = (int(total - last) - predicted) // learner.block_size
        if surplus <= 0:
            return None
        depth = 0
        if ghosts:
            ghosts.sort()
            depth = ghosts[min(surplus, len(ghosts)) - 1]
        return Evidence(0, surplus, depth)
