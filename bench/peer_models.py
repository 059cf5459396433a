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
"""

from __future__ import annotations

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
