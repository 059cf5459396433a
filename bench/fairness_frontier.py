"""The step-sharing levers, one point at a time, in model time: tails against alone, output against FCFS.

    python -m bench.fairness_frontier [--seeds 0 1 ... 15] [--points headroom=2 headroom=2,prefill=0 ...]
        [--jobs 2]

Issue 28, round 9. With the fair queue and headroom the well-behaved tenants' remaining excess is
the engine step (round 8: at p95 their own steps take 0.048 s against 0.023 s alone, the step full
of the flood's prefills and decodes). A point is one setting of the levers, ``key=value`` joined by
commas:

- the gateway's: ``headroom`` (``fairness.headroom_slots``), ``reserved`` (``fairness.reserved_slots``),
  ``prefill`` (``fairness.max_queued_prefill_tokens``: below the interactive class a replica with more
  prefill tokens queued by the gateway takes nothing more), ``slots`` (the lower bands' slots a
  replica, default 8);
- the engine's (``sim.engine.EngineConfig``, vLLM's flags): ``tokens`` (``--max-num-batched-tokens``,
  8192), ``long`` (``--long-prefill-token-threshold``, 0: none), ``batch`` (``--max-num-seqs``,
  default slots + headroom).

Every point runs ``bench.fairness.simulate`` (the gateway's own ``router.fairness`` code, the engine
model) on each seed's workload (five tenants at 1/s, a flood at 10 x the default fleet's capacity,
200 batch lines, 30 s). The references, per seed: **alone** (the five tenants alone, the default
engine: what a tenant gets with the fleet to itself today) and **FCFS** (today's gateway: the slot
FIFO at 8 slots, the default engine: no order, every slot to whoever came first); each point's output
also against a slot FIFO on the same engines (same batch and flags: what the fair order itself costs).

Columns: each well-behaved tenant's TTFT pooled over the five and the seeds, p95 / p99 x alone with a
95 % interval and a verdict against 1.25 (``bench.tails``: met / missed / unresolved), the worst
tenant's p99 and how many tenants' p99 are met; output tokens/s (completed before the arrivals stop)
summed over seeds against FCFS's; the flood's share of completions against its entitled max-min share;
the well-behaved tenants' prefix hit rate; their own steps' p95 (the start of the step that first
scheduled them to their first token, pooled) beside alone's. A second table splits their time: the
gateway's wait, the engine's until the step that first scheduled them, and that step and any more
to the first token; how many were sent off the replica holding their longest prefix (a cold
prefill); the engines' preemptions.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from bench.fairness import CALM, TAIL_TARGET, _tail_ttfts, capacity, simulate, summarize, workload
from bench.report import percentile, table
from bench.tails import ratio_cell, ratio_ci

KEYS = {"headroom", "reserved", "prefill", "slots", "tokens", "long", "batch"}
DEFAULT = {
    "headroom": 0,
    "reserved": 0,
    "prefill": None,
    "slots": 8,
    "tokens": 8192,
    "long": 0,
    "batch": None,
}


def parse_point(text: str) -> dict[str, Any]:
    """``headroom=2,prefill=0`` -> the point's settings (the rest at their defaults)."""
    out: dict[str, Any] = dict(DEFAULT)
    if text in ("", "-"):
        return out
    for part in text.split(","):
        key, sep, val = part.partition("=")
        if not sep or key not in KEYS:
            raise ValueError(f"bad point part {part!r}: key=value with a key of {sorted(KEYS)}")
        n = int(val)
        if n < 0 or (key in ("slots", "tokens", "batch") and n < 1):
            raise ValueError(f"{key}={n}: out of range")
        out[key] = n
    return out


def _kw(p: dict[str, Any]) -> dict[str, Any]:
    return {
        "slots": p["slots"], "headroom": p["headroom"], "reserved": p["reserved"], "max_prefill": p["prefill"],
        "max_batched_tokens": p["tokens"], "long_prefill": p["long"], "engine_batch": p["batch"],
    }  # fmt: skip


@dataclass
class SeedResult:
    ttfts: dict[str, list[float]]
    own_steps: list[float]
    tokens_per_s: float
    flood_share: float
    flood_entitled: float
    calm_hit: float
    parts: list[list[float]]  # gateway wait, until the step that first scheduled it, its own steps
    off_home: int  # well-behaved requests sent off the replica of their longest prefix match
    sent: int
    preemptions: int


def _one(mode: str, kw: dict[str, Any], seed: int, flood_rate: float, seconds: float = 30.0) -> SeedResult:
    alone = mode == "alone"
    reqs = workload(seconds, 1.0, 0.0 if alone else flood_rate, 0 if alone else 200, seed)
    run = simulate(mode, reqs, 2, seconds=seconds, **kw)
    s = summarize(run)
    sent = [r for r in run.reqs if r.tenant in CALM and r.first is not None and r.scheduled is not None]
    own = [r.first - r.scheduled for r in sent]  # type: ignore[operator]
    parts = [
        [r.decision.routed_at - r.at for r in sent],  # type: ignore[union-attr]
        [r.scheduled - r.decision.routed_at for r in sent],  # type: ignore[operator,union-attr]
        own,
    ]
    off = sum(1 for r in sent if r.decision is not None and r.decision.matched_tokens < r.best)
    return SeedResult(
        {t: _tail_ttfts(run, t) for t in CALM}, own, s["tokens_per_s"], s["flood_share"], s["flood_entitled"],
        s["calm_hit"], parts, off, len(sent), int(run.extra["preemptions"]),
    )  # fmt: skip


def _job(args: tuple[str, str, dict[str, Any], int, float]) -> tuple[str, int, SeedResult]:
    name, mode, kw, seed, flood_rate = args
    return name, seed, _one(mode, kw, seed, flood_rate)


def run_points(points: list[str], seeds: list[int], jobs: int) -> dict[str, list[SeedResult]]:
    flood_rate = 10 * capacity(2, 8, seed=seeds[0])
    runs: list[tuple[str, str, dict[str, Any], int, float]] = []
    base = _kw(parse_point(""))
    for s in seeds:
        runs.append(("alone", "alone", base, s, flood_rate))
        runs.append(("FCFS", "fifo", base, s, flood_rate))
    for text in points:
        p = parse_point(text)
        runs += [(text, "fair", _kw(p), s, flood_rate) for s in seeds]
        same = dict(_kw(p), slots=p["slots"] + p["headroom"], headroom=0, reserved=0, max_prefill=None)
        if p["batch"] is None:
            same["engine_batch"] = p["slots"] + p["headroom"]
        runs += [(f"FIFO@{text}", "fifo", same, s, flood_rate) for s in seeds]
    out: dict[str, list[SeedResult]] = {}
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            done = list(ex.map(_job, runs))
    else:
        done = [_job(r) for r in runs]
    for name, _, res in sorted(done, key=lambda x: (x[0], x[1])):
        out.setdefault(name, []).append(res)
    return out


def report(results: dict[str, list[SeedResult]], points: list[str]) -> str:
    alone = {t: [x for r in results["alone"] for x in r.ttfts[t]] for t in CALM}
    alone_pool = [x for xs in alone.values() for x in xs]
    alone_own = percentile([x for r in results["alone"] for x in r.own_steps], 95)
    fcfs = sum(r.tokens_per_s for r in results["FCFS"])
    rows = []
    for text in points:
        rs = results[text]
        per = {t: [x for r in rs for x in r.ttfts[t]] for t in CALM}
        pooled = [x for xs in per.values() for x in xs]
        tenant = {t: ratio_ci(per[t], alone[t], 0.99, TAIL_TARGET) for t in CALM}
        worst = max(tenant, key=lambda t: tenant[t].value)
        met = sum(1 for r in tenant.values() if r.verdict == "met")
        tok = sum(r.tokens_per_s for r in rs)
        same = sum(r.tokens_per_s for r in results[f"FIFO@{text}"])
        n = len(rs)
        rows.append([
            text or "-",
            ratio_cell(ratio_ci(pooled, alone_pool, 0.95, TAIL_TARGET)),
            ratio_cell(ratio_ci(pooled, alone_pool, 0.99, TAIL_TARGET)),
            f"{worst} {ratio_cell(tenant[worst])}", f"{met} of {len(CALM)}",
            f"{tok / fcfs:.3f}", f"{tok / same:.3f}",
            f"{sum(r.flood_share for r in rs) / n:.3f} / {sum(r.flood_entitled for r in rs) / n:.3f}",
            f"{sum(r.calm_hit for r in rs) / n:.3f}",
            f"{percentile([x for r in rs for x in r.own_steps], 95):.3f}",
        ])  # fmt: skip
    n_alone = f"{min(map(len, alone.values()))}-{max(map(len, alone.values()))}"
    head = [
        "point", "pooled p95 x alone", "pooled p99 x alone", "worst tenant p99 x alone", "tenants' p99 met",
        "output x FCFS", "x FIFO, same engines", "flood share / entitled", "hit rate (well-behaved)",
        f"own steps p95 s (alone {alone_own:.3f})",
    ]  # fmt: skip
    parts = []
    for name in ["alone", *points]:
        rs = results[name]
        qs = [
            " / ".join(f"{percentile([x for r in rs for x in r.parts[k]], q):.3f}" for q in (50, 95, 99))
            for k in range(3)
        ]
        parts.append([
            name or "-", *qs, f"{sum(r.off_home for r in rs)} of {sum(r.sent for r in rs)}",
            sum(r.preemptions for r in rs),
        ])  # fmt: skip
    parts_head = [
        "point", "gateway wait p50 / p95 / p99 s", "until the step that first scheduled it", "its steps to the first token",
        "sent off their prefix's replica", "engine preemptions",
    ]  # fmt: skip
    return (
        f"alone: {n_alone} requests a tenant; FCFS output {fcfs / len(results['FCFS']):.0f} tok/s a seed\n\n"
        + table(head, rows)
        + "\n\nWhere the well-behaved requests' time went (pooled over the seeds):\n\n"
        + table(parts_head, parts)
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness_frontier", description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(16)))
    ap.add_argument("--points", nargs="+", default=["headroom=2"])
    ap.add_argument("--jobs", type=int, default=1, help="processes (each point-seed is independent)")
    args = ap.parse_args(argv)
    for p in args.points:
        parse_point(p)  # fail before running anything
    if not 1 <= args.jobs <= 4 or len(args.seeds) > 32:
        ap.error("bounded: 1-4 jobs, at most 32 seeds")
    t0 = time.perf_counter()
    md = report(run_points(args.points, args.seeds, args.jobs), args.points)
    print(md)
    print(f"\n({time.perf_counter() - t0:.0f} s wall, seeds {' '.join(map(str, args.seeds))})")


if __name__ == "__main__":
    main()
