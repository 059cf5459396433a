"""Models of the peers' routing algorithms as router policies, for ``bench.routing_offline`` (virtual time).

The peers themselves run only as processes (``bench.routing``, ``bench.peers``); a model puts one beside
``prefix_affinity`` in every offline cell, and tells whether a gap seen in a process run is the
peer's algorithm or the run.

``SglangCacheAware``: sglang-router 0.3.2's ``cache_aware`` (sgl-router ``src/policies/cache_aware.rs``;
defaults from the installed package's ``router_args.py``: ``cache_threshold`` 0.3,
``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, ``max_tree_size`` 2**26 characters, which no
replay here reaches, so no eviction is modelled). Per decision: when the in-flight counts are
imbalanced (max - min > 64 and max > 1.5 min) the least loaded replica; else the replica whose tree
holds the longest prefix of the request when it covers more than 0.3 of it, else the replica with the
smallest tree; the request is then inserted into the chosen replica's tree. The real tree is a radix
tree of request characters; this model matches the prompt's 16-token router blocks (a prefix shorter
than one block differs, which the 0.3 threshold makes immaterial) and, like the real tree, the whole
prompt: run it with ``max_prefix_tokens`` above the longest prompt (``bench.routing_matrix`` does), or
it sees only the hashed head. Measured against the process runs (docs/benchmarks.md, "Routing
robustness matrix (issue 24)"), Mooncake conversation trace, 4,000 records, KV 25 %: the issue's cell
(64-token engine blocks, capacity unpublished) 0.951 of the pooled bound modelled, 0.946 for real;
16-token blocks, capacity published, 0.984 and 0.986. Capped at the default 4,096 tokens it read 0.930
and 0.964.

``SmgCacheAware``: smg 1.13.0's ``cache_aware`` in its HTTP tree mode (``smg-project/smg``
``model_gateway/src/policies/cache_aware.rs`` and ``least_load.rs``, the newest stored source; its branch
names are the installed binary's; the wheel's ``router_args.py`` gives the defaults: ``cache_threshold``
0.3, ``balance_abs_threshold`` 64, ``balance_rel_threshold`` 1.5, the KV-spread triggers off at 1.0,
``overlap_decay`` and ``selection_temperature`` 0, worker overload protection on at 8 waiting requests
or 0.8 KV usage, ``max_tree_size`` 2**26 characters, not reached here, as above). Per decision: a
replica whose last report shows 8 or more waiting or KV usage of 0.8 or more is left out while another
is not (overload protection); a request whose best match covers 0.3 or less of it (a conversation's
first turn) goes to the least *expected wait* (``LeastLoadPolicy``), not to the smallest tree as
sglang-router 0.3.2's; above it, the expected wait decides among the replicas whose tree holds the
deepest match, after dropping any with more than 1.5 x and 64 more than the mean in flight (if that
drops all: a ``spill`` to the least expected wait of the rest). An HTTP worker's expected wait (its
``/metrics``: vLLM's gauges, no token counts, no generation rate) is ``(waiting + running + dispatched
since its last report) x 1,024 tokens / 2,000 tokens/s + 0.15 s x k / (1 - k)``, ``k`` its
``kv_cache_usage``; ties within 1 us are drawn uniformly (here from a seeded generator). The chosen
replica's tree takes the request. Its load poll is smg's, ``poll_s`` of the replay (``bench.routing_matrix``
sets 29 s on the trace: 1 s of wall time in the process runs). Measured against the process runs
(docs/benchmarks.md, "Round 8"): the Zipf tight cache 0.840 of the pooled bound modelled against 0.76-0.86
for real (imbalance identical); on the trace the first-turn branch count is the process's (2,047 /
2,044) but the hit rate is optimistic, 0.924 / 0.969 (issue's cell / bs16 pub) against 0.83-0.88 /
0.89-0.92, and moves by up to 0.05 with the poll's phase alone.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.policies.base import PickContext
from router.replica import ReplicaState


class SglangCacheAware:
    name = "sglang_model"
    needs_prefix = True

    def __init__(self, cache_threshold: float = 0.3, balance_abs: int = 64, balance_rel: float = 1.5) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.trees: dict[str, set[int]] = {}  # replica id -> the block hashes inserted (unbounded)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        cands, hashes = ctx.candidates, ctx.block_hashes
        loads = [r.in_flight for r in cands]
        hi, lo = max(loads), min(loads)
        if hi - lo > self.balance_abs and hi > lo * self.balance_rel:
            chosen, reason = cands[loads.index(lo)], "balance"
        else:
            best: ReplicaState | None = None
            depth = 0
            for r in cands:
                tree = self.trees.get(r.id, set())
                n = 0
                while n < len(hashes) and hashes[n] in tree:
                    n += 1
                if n > depth:
                    best, depth = r, n
            rate = depth * ctx.block_size / ctx.prompt_tokens if ctx.prompt_tokens else 0.0
            if best is not None and rate > self.cache_threshold:
                chosen, reason = best, "affinity"
            else:
                chosen = min(cands, key=lambda r: len(self.trees.get(r.id, ())))
                reason = "cold"
        self.trees.setdefault(chosen.id, set()).update(hashes)
        return chosen, reason


class SmgCacheAware:
    name = "smg_model"
    needs_prefix = True

    def __init__(
        self,
        cache_threshold: float = 0.3,
        balance_abs: int = 64,
        balance_rel: float = 1.5,
        mean_prefill_tokens: int = 1024,
        throughput: float = 2000.0,
        kv_weight: float = 0.15,
        overload_waiting: float = 8,
        overload_kv: float = 0.8,
        poll_s: float = 0.0,
        seed: int = 0,
    ) -> None:
        self.cache_threshold = cache_threshold
        self.balance_abs = balance_abs
        self.balance_rel = balance_rel
        self.per_request_s = mean_prefill_tokens / throughput
        self.kv_weight = kv_weight
        self.overload_waiting = overload_waiting  # overload protection (math.inf both: off)
        self.overload_kv = overload_kv
        self.poll_s = poll_s  # its load poll, in the replay's seconds (0: every report the router reads)
        self.rng = random.Random(seed)
        self.trees: dict[str, set[int]] = {}  # replica id -> the block hashes inserted (unbounded)
        self.polled: dict[str, tuple[float, float, float, float]] = {}  # id -> (at, running, waiting, kv)
        self.since: dict[str, int] = {}  # replica id -> requests sent since its last poll

    def _poll(self, replicas: Sequence[ReplicaState]) -> None:
        """Take each replica's report as its load poll, at most every ``poll_s``."""
        for r in replicas:
            at = r.reported_at
            if at is None:
                continue
            last = self.polled.get(r.id)
            if last is None or (at - last[0] >= self.poll_s and at != last[0]):
                self.polled[r.id] = (at, r.reported_running or 0.0, r.reported_waiting or 0.0,
                                     r.reported_kv_usage or 0.0)  # fmt: skip
                self.since[r.id] = 0  # a poll releases what it has seen

    def _wait(self, r: ReplicaState) -> float:
        p = self.polled.get(r.id)
        if p is None:  # no poll yet: join the shortest queue
            return float(r.in_flight)
        k = min(p[3], 0.999)
        return (p[1] + p[2] + self.since.get(r.id, 0)) * self.per_request_s + self.kv_weight * k / (1.0 - k)

    def _least_wait(self, cands: list[ReplicaState]) -> ReplicaState:
        waits = [self._wait(r) for r in cands]
        lo = min(waits)
        tied = [r for r, w in zip(cands, waits, strict=True) if w - lo <= 1e-6]
        return tied[self.rng.randrange(len(tied))] if len(tied) > 1 else tied[0]

    def _hot(self, r: ReplicaState, mean: float) -> bool:
        return r.in_flight > mean * self.balance_rel and r.in_flight > mean + self.balance_abs

    def _overloaded(self, r: ReplicaState) -> bool:
        p = self.polled.get(r.id)
        return p is not None and (p[2] >= self.overload_waiting or p[3] >= self.overload_kv)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        hashes = ctx.block_hashes
        self._poll(ctx.candidates)
        cands = [r for r in ctx.candidates if not self._overloaded(r)]
        if not cands:  # every replica overloaded: the least loaded of all
            chosen = min(ctx.candidates, key=lambda r: r.in_flight)
            self._sent(chosen, hashes)
            return chosen, "overloaded"
        depths = {}
        for r in ctx.candidates:  # the tree holds every replica's requests, left out or not
            tree = self.trees.get(r.id, set())
            n = 0
            while n < len(hashes) and hashes[n] in tree:
                n += 1
            depths[r.id] = n
        depth = max(depths.values())
        rate = depth * ctx.block_size / ctx.prompt_tokens if ctx.prompt_tokens else 0.0
        if depth and rate > self.cache_threshold:
            mean = sum(r.in_flight for r in cands) / len(cands)
            matched = [r for r in cands if depths[r.id] == depth]
            safe = [r for r in matched if not self._hot(r, mean)]
            if matched and not safe:
                safe = [r for r in cands if not self._hot(r, mean)]
            chosen = self._least_wait(safe or cands)
            reason = "tree_match" if chosen in matched else "spill"
        else:
            chosen, reason = self._least_wait(cands), "expected_wait_fallback"
        self._sent(chosen, hashes)
        return chosen, reason

    def _sent(self, chosen: ReplicaState, hashes: Sequence[int]) -> None:
        self.trees.setdefault(chosen.id, set()).update(hashes)
        self.since[chosen.id] = self.since.get(chosen.id, 0) + 1
