"""Prefix affinity by predicted cost: each replica is scored by the prefill it would queue this request
behind, less what it already holds of the prompt; the lowest score takes the request.

    score(r) = queued_prefill_tokens(r) + decode_cost_tokens * load(r) - (1 + w) * matched(r)
               + evict_weight * evicted(r) + hot_penalty_tokens * over_share(r)

``queued_prefill_tokens`` is the uncached prefill this process sent ``r`` that ``r`` has not answered
yet; ``load`` the requests in flight there (this process's, plus other pods' from the last scrape);
``matched`` the leading tokens of the prompt the index says ``r`` holds; ``evicted`` the tokens its new
blocks would push out of ``r``'s cache (its uncached blocks beyond the index's free room);
``over_share`` the decisions of the last 256 that ``r`` took beyond ``hot_share_factor`` x the mean, only
where the prompt is mostly a hot prefix (below). ``w`` is ``reuse_weight``
for a private prefix and ``shared_reuse_weight`` for a shared one (below). Ties go to the cache with
the most room, else to the one whose next eviction is the oldest, then to the first tied replica along
the hash ring from the prompt's route key (an idle fleet places a new prefix alike in every gateway
process). Reasons: ``affinity`` (the replica with the longest match), ``spill`` (a longer match was
passed over: queueing there cost more than prefilling again here), ``cold`` (no match of
``min_match_fraction`` of the prompt anywhere).

Why, measured with ``python -m bench.routing_offline`` (the router in front of engine models in
virtual time, 4 replicas; the Mooncake conversation trace, 4,000 requests at 1/8 of their tokens, with
25 % and 100 % of its working set in KV; the synthetic workloads of ``bench.workloads`` at 32/s;
tables in docs/benchmarks.md):

- **Cost, not request counts.** The previous policy (commit 8cebe06: leave the longest match above
  ``ceil(1.25 (total+1)/n)`` requests in flight) spilled 6-7 % of the trace's requests, nearly all
  later turns with about 80 % of their prompt cached at home, and those spills were 86-97 % of the
  tokens it lost against the pooled bound (it kept 0.85 of it; p99 TTFT 31 s). A request costs its replica its
  uncached tokens; a replica is worth leaving only when the prefill queued there costs more than the
  prompt's cached part is worth. Scored on cost: 0.98 of the pooled bound, p99 TTFT 20 s (a long cold
  prompt in a queue now sends the next requests elsewhere, which counting requests cannot see).
- **A private prefix is sticky: w = 20.** Leaving a conversation's home re-prefills its history, and
  the copy left behind crowds the old home's cache. Hit rate / pooled bound at 25 % KV went 0.82
  (w = 1), 0.91 (3), 0.96 (8), 0.98 (20), 0.99 (50), p99 TTFT 19.6-21.3 s throughout (50: 21.3).
- **One home per private prefix.** A spill's copy holds the newest turn, so the next turn matches it
  longer than the old home and follows it: a conversation's turns never split between two caches.
- **A shared prefix is not: its w is 0.** A prefix is shared when an earlier request of the last
  ``shared_window`` decisions ended its match at the same block (a conversation's turns each end
  deeper). With w = 20 for every prefix (``shared_window: 0``) every agent of the agent-loop workload
  started on the replica that first held the common tool preamble and stayed there: 4.0 x the mean
  prompt tokens on one replica, TTFT p50 / p99 0.14 / 0.25 s; with the window, 1.55 x and 0.05 / 0.15 s.
  A hot system prompt likewise replicates once its home's queue exceeds one re-prefill of it.
- **Cold requests go where they are cheapest now**, by the same score; an idle fleet places them where
  they evict the least (most room, then the oldest next eviction, as one pooled LRU would). On
  sgl-router's tight-cache shape (8 prefixes, KV for 2 a replica) ring placement put 3 prefixes on one
  replica and 1 on another (hit 0.73 at 4 requests/s); room first puts 2 on each (0.92, the oracle's).
  Rooms are compared only between replicas that all publish a capacity, or none does: one replica
  with its metrics unreachable among three publishing 2,048 blocks got all 40 cold prefixes of a
  sequential load (its default bound of 8,192 looked roomiest); the ring spreads them.
- **A placement pays for what it evicts: evict_weight = 1.** Under a tight cache a copy of a shared
  prompt (w = 0) evicts another prompt that will be prefilled again. ``evicted`` is what the new blocks
  take beyond the index's free room; in a full fleet it is the same for every replica of a cold request
  (no change there) and it makes a shared prompt's copy cost two re-prefills instead of one. Zipf over
  16 shared prompts of 1.6k tokens, 4 replicas holding about 3 each (``python -m bench.routing_matrix``,
  tuning seed): hit / pooled bound 0.88 (0) -> 0.97 (0.25-1; 0.5 and 1 alike). The term reads the
  index's free room, so it needs a right capacity: with the capacity learner drifting to 2-4 x the
  truth the fleet looked roomy and the hot prompt concentrated (busy imbalance 1.37, p99 TTFT 0.33 s);
  with ``router.capacity``'s ghost rule (learned capacity 0.99-1.01 x) 0.97-0.99 of the pooled bound,
  busy 1.09-1.17 x, prompt tokens 1.24-1.38 x, p99 0.19-0.24 s. Capping the term by the bounded load
  (dropped while every replica holding the match has more than c x the mean in flight) was measured
  and left out: c = 1.1-1.5 cost 0.05-0.13 of the pooled bound for busy 1.05-1.18, c = 2-3 changed
  nothing; so was a larger ``decode_cost_tokens`` (512: Zipf busy <= 1.13 but 0.96 of the pooled bound,
  and the trace 0.979 -> 0.965).
- **Only where the capacity is published.** The term reads the index's free room, which is evidence
  only against a capacity the replica published (or the policy wrote for it); otherwise the bound is
  the default or what ``router.capacity`` grew from it (32 x a ghost's depth at a time, 2.4-3.7 x the
  truth at the end), and the term, steering by room the replica does not have, cost the issue's cell
  (64-token engine blocks, unpublished) 0.015 of the pooled bound: ablations on the tune split
  (``python -m bench.routing_matrix --variants after noevict truth-pinned truth-pinned-noevict``) gave
  0.929 with both on, 0.944 without the term, 0.946 with the bound pinned at the engine's truth, 0.951
  pinned and without the term; at the truth the term costs 0.005 here and nothing on 16-token blocks
  or Zipf (where it is worth 0.09-0.17). Off for unpublished capacities (every candidate must have
  one): tune split, 4,000 / 2,000 records, bs16 unpub 0.975 -> 0.985 / 0.962 -> 0.990, bs64 unpub
  0.929 -> 0.944 / 0.935 -> 0.933, whole-prompt eviction 0.800 -> 0.841 / 0.829 -> 0.828, the CPU tier
  0.921 -> 0.942 / 0.883 -> 0.920; without ``cached_tokens`` bs16 0.980 -> 0.973 / 0.975 -> 0.981 and
  bs64 0.940 -> 0.914 / 0.910 -> 0.937. Published cells do not change. Held out (records 6,000-10,000,
  run once after): the issue's cell did not follow (0.930 -> 0.919), bs16 unpub 0.973 -> 0.978, without
  ``cached_tokens`` bs16 0.950 -> 0.958 and bs64 0.886 -> 0.906.
  Round 8: **or a miss has proven** (``router.capacity``: a predicted hit that missed took the estimate
  to what the index listed; from then it grows at the published rate). Unpublished, the Zipf tight
  cache had no term and concentrated (0.896 of the pooled bound, estimate 18 x the engine): 0.973 now,
  busy 1.08; the 12 unpublished tune cells' mean 0.930 -> 0.938 (docs/benchmarks.md, "Round 8").
  Round 10 measured and did **not adopt** taking every cache as full where no candidate's room is known
  (``UNKNOWN_ROOM = "full-all"``; its room 0: an LRU engine runs full after its first minutes; the term
  stays off wherever a room is unknown, ``"off"``, rounds 4-9). It gained on tune's means by 0.0018 and
  lowered the worst cells: tune ``zipf-unpub`` 0.973 -> 0.926, held out the 18 unpublished cells 0.934
  -> 0.931, worst 0.817 -> 0.784 (the issue's measure is the worst cell), and the real vLLM did not
  separate it (85.4 against 86.9 % on docs14x1k, 54.7 against 53.8 % on Zipf, inside one run's spread).
  What it was for: on the real-vLLM
  engine (``bench.real_vllm``: 256 blocks of 32 tokens a replica, 1/32 of the default, no capacity
  written, no scrape) an estimate stays at its 8 x-default ceiling until each replica's first miss, a
  fifth of a 300-request run, and with the term off shared documents (w = 0) were copied into full
  caches whenever the home's queue passed one re-prefill (7 spills in 12 requests of docs14x1k, each
  evicting another document). ``python -m bench.routing_matrix --set real-vllm --split tune --variants
  r9 after`` (virtual time, that engine and gateway): docs14x1k seeds 1 / 2 0.946 / 0.985 -> 0.978 /
  1.010 of the pooled bound, zipf16x3k and the trace's cells unchanged; held out seed 3 (the real
  benchmark's own sequence) 0.981 -> 0.954. Each unknown cache taken as full beside the known rooms
  (``UNKNOWN_ROOM = "full"``) had the same mean with four cells 0.020-0.055 lower (docs/benchmarks.md,
  "Round 10").
- **A hot prompt's home takes at most about its share: hot_penalty_tokens = 192 past 1.15 x.** Under
  Zipf a hot shared prompt stays on the replica that first held it (a copy costs a re-prefill plus what it
  evicts, 3,200 tokens here, against 64 a request in flight), and so does anything that replica held:
  round 6's own tune cells (``python -m bench.routing_matrix --set zipf-r6``: s = 1.1-1.3, 16 and 24
  prompts, seeds 3 and 4) had busy imbalance 1.12-1.43 (11 of 12 above the issue's 1.15) under every
  unlearning rule (round 4's, round 5's, none), so it is not the unlearning but the stickiness. Where the
  prompt is mostly (3/4) a hot prefix (one that ended the match of at least 1/n of the last
  ``shared_window`` decisions), a replica scores 192 queued tokens for each of the last 256 decisions it
  took beyond 1.15 x the mean: a second holder takes the excess, or one copy is made. Tune, hot-off ->
  on: the 12 new cells 0.975-1.001 -> 0.961-0.990 of the pooled bound (mean 0.986 -> 0.971: a balanced
  fleet holds the hottest prompt twice), busy 1.12-1.43 -> 1.02-1.14;
  zipf / zipf-s1.1 / zipf-24 seed 1 0.989 / 0.981 / 0.994 -> 0.989 / 0.981 / 0.974, busy 1.15 / 1.17 /
  1.13 -> 1.11 / 1.04 / 1.03; every trace cell unchanged (no trace decision passes the 3/4 gate; at 1/2
  the 63 that did moved the 64-token cells by -0.017 to +0.028). Measured and left out (same cells,
  mean / worst fraction of the pooled bound, max busy): a CHWBL bound on in-flight counts for shared
  prefixes (c = 1.25-2: 0.78-0.95 of the pooled bound, busy 1.01-1.14; in-flight counts are too noisy),
  a copy forced when a prefix's window share exceeds its holders' (0.83-0.98), the load term 512-2,048 for shared prefixes
  (0.974 / 0.956 / 1.27 at 512, 0.914 / 0.869 / 1.10 at 1,024), excluding a replica past c x its share of
  decisions (c = 1.1-1.2, mean 0.92-0.95), the same only towards another holder (no change: the hot prompt has
  one), and this term at 96 / 1.0 x (0.974 / 0.955 / 1.15), 128 / 1.15 (0.977 / 0.954 / 1.13), 256 / 1.15
  (0.973 / 0.959 / 1.14) and over every shared prefix (the trace's bs64 unpub cell -0.030). Held out
  (seed 2, run once on this code): zipf / zipf-s1.1 / zipf-24 1.003 / 0.992 / 1.002 -> 0.982 / 0.969 /
  0.957, busy 1.14 / 1.22 / 1.08 -> 1.08 / 1.09 / 1.05; the 17 trace cells unchanged.
"""

from __future__ import annotations

from collections import Counter, deque

from router.policies.base import PickContext
from router.policies.ring import HashRing
from router.replica import ReplicaState

HOT_WINDOW = 256  # the last decisions whose replicas give each replica's share of the traffic
HOT_MIN_DECISIONS = 32  # decisions of that window before a share counts
# Round 10: the eviction term where a candidate's capacity is neither published nor proven (its free room
# unknown): "off" (committed, rounds 4-9) drops the term wherever one is unknown; "full-all" takes every
# cache as full where no candidate's room is known, and drops the term where some are known and some not
# (rooms not on one footing); "full" takes each unknown one as full beside the known rooms. Module
# header, "Round 10": measured, not adopted.
UNKNOWN_ROOM = "off"


class PrefixAffinity:
    name = "prefix_affinity"
    needs_prefix = True

    def __init__(
        self,
        *,
        virtual_nodes: int = 160,
        reuse_weight: float = 20.0,
        shared_reuse_weight: float = 0.0,
        decode_cost_tokens: float = 64.0,
        shared_window: int = 64,
        min_match_fraction: float = 0.1,
        evict_weight: float = 1.0,
        hot_share_factor: float = 1.15,
        hot_penalty_tokens: float = 192.0,
    ) -> None:
        self.ring = HashRing(virtual_nodes)
        self.private_reuse = 1.0 + reuse_weight
        self.shared_reuse = 1.0 + shared_reuse_weight
        self.decode_cost = decode_cost_tokens
        self.min_match_fraction = min_match_fraction
        self.evict_weight = evict_weight
        self._recent: deque[int] = deque(maxlen=shared_window)
        self._ends: Counter[int] = Counter()  # deepest matched block -> decisions of the window ending there
        self.hot_share_factor = hot_share_factor
        self.hot_penalty = hot_penalty_tokens
        self._sent: deque[str] = deque(maxlen=HOT_WINDOW)  # the replica each recent decision chose
        self._per: Counter[str] = Counter()  # replica id -> decisions of ``_sent``

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        cands = ctx.candidates
        matched = ctx.matched_blocks
        bs, limit = ctx.block_size, ctx.hashed_tokens
        depth = min(max(matched.values(), default=0), len(ctx.block_hashes))
        reuse = (
            self.shared_reuse if depth and self._shared(ctx.block_hashes[depth - 1]) else self.private_reuse
        )
        decode = self.decode_cost
        ctx.weights.update(reuse_factor=reuse, decode_cost_tokens=decode)  # what router.explain shows
        index, blocks = ctx.index, len(ctx.block_hashes)
        evict = self.evict_weight * bs if index is not None and blocks else 0.0
        if evict and UNKNOWN_ROOM != "full":
            known = sum(1 for r in cands if r.kv_capacity_blocks or r.id in ctx.proven)
            if 0 < known < len(cands) or (not known and UNKNOWN_ROOM == "off"):
                evict = 0.0  # rooms on two footings, or (rounds 4-9) none known: the term is off (above)
        hot, over = self._hot(ctx, depth), 0.0
        if hot:  # decisions of the window a replica may take before the term counts
            over = self.hot_share_factor * len(self._sent) / len(cands)
        low = float("inf")
        longest = 0
        tied: list[tuple[ReplicaState, int]] = []  # the lowest-scoring replicas, with their match
        for r in cands:
            m = matched.get(r.id, 0) * bs
            if m > limit:
                m = limit
            if m > longest:
                longest = m
            score = r.queued_prefill_tokens + decode * r.load() - reuse * m
            if hot and self._per[r.id] > over:  # a hot prefix's home past its share (above)
                extra = hot * (self._per[r.id] - over)
                ctx.added[r.id] = extra
                score += extra
            if evict:  # what the new blocks push out of a full cache will be prefilled again
                # a room neither published nor proven is not known: that cache is taken as full (above)
                free = 0
                if r.kv_capacity_blocks or r.id in ctx.proven:
                    free = index.headroom(r.id, ctx.now)[0]  # type: ignore[union-attr]
                new = blocks - matched.get(r.id, 0) - free
                if new > 0:
                    ctx.evicted[r.id] = evict * new
                    score += evict * new
            if score < low:
                low, tied = score, [(r, m)]
            elif score == low:
                tied.append((r, m))
        published = 0  # a loop: ``sum`` over a generator was 2 calls and one per tied replica
        for r, _ in tied:
            if r.kv_capacity_blocks:
                published += 1
        if len(tied) > 1 and ctx.index is not None and published in (0, len(tied)):
            # The cache with the most room, else the one whose next eviction is the oldest, then the ring.
            # Rooms are compared on one footing only: a replica whose capacity is not published (its
            # metrics unreachable, or not scraped yet) is bounded by a default 4 x the simulator's
            # published 2,048 blocks and would take every cold prefix of a light load (all 12 of
            # tests/unit/test_policies.py's shape, and of two gateway processes, one not yet scraped).
            room = [ctx.index.headroom(r.id, ctx.now) for r, _ in tied]
            most = max(room)
            tied = [t for t, h in zip(tied, room, strict=True) if h == most]
        chosen, m = tied[0] if len(tied) == 1 else self._first_on_ring(ctx, tied)
        if self.hot_penalty:
            self._count(chosen.id)
        if longest == 0 or longest < self.min_match_fraction * limit:
            return chosen, "cold"
        return chosen, "affinity" if m == longest else "spill"

    def _shared(self, end: int) -> bool:
        """Count a decision's deepest matched block; shared if another decision of the window ended there."""
        window, ends = self._recent, self._ends
        before = ends[end]
        if window.maxlen == 0:
            return False
        if len(window) == window.maxlen:
            old = window[0]
            ends[old] -= 1
            if not ends[old]:
                del ends[old]
        window.append(end)
        ends[end] += 1
        return before > 0

    def _hot(self, ctx: PickContext, depth: int) -> float:
        """The hot term's weight per decision past the share (0: not scored): where the prompt is mostly
        (3/4) a prefix that ended the match of at least 1/n of the recent decisions, i.e. one that alone
        brings a replica its share of the traffic, once ``HOT_MIN_DECISIONS`` have been counted."""
        n, window = len(ctx.candidates), self._recent
        if not self.hot_penalty or not window.maxlen or not depth or n < 2:
            return 0.0
        if len(self._sent) < HOT_MIN_DECISIONS:
            return 0.0
        if 4 * depth * ctx.block_size < 3 * ctx.hashed_tokens:
            return 0.0
        if self._ends[ctx.block_hashes[depth - 1]] * n < len(window):
            return 0.0
        return self.hot_penalty * HOT_WINDOW / len(self._sent)  # a share of a part-filled window weighs alike

    def _count(self, replica_id: str) -> None:
        sent, per = self._sent, self._per
        if len(sent) == sent.maxlen:
            old = sent[0]
            per[old] -= 1
            if not per[old]:
                del per[old]
        sent.append(replica_id)
        per[replica_id] += 1

    def _first_on_ring(
        self, ctx: PickContext, tied: list[tuple[ReplicaState, int]]
    ) -> tuple[ReplicaState, int]:
        ids = {r.id: (r, m) for r, m in tied}
        for rid in self.ring.walk(ctx.route_key, ctx.candidates):
            if rid in ids:
                return ids[rid]
        return tied[0]  # not reached: every candidate is on the ring
