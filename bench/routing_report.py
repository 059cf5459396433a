"""The routing benchmark's markdown (tables, targets) and PNG plots, from its results."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report import table

IMG_DIR = Path(__file__).resolve().parent.parent / "docs" / "img"
REPO_PREFIX = "img"  # image links relative to docs/benchmarks.md
PA = "prefix_affinity"
SMG = "smg 1.13.0 cache_aware"
SGL = "sglang-router 0.3.2 cache_aware"

_COLORS = {PA: "#dd8452", SMG: "#55a868", SGL: "#8172b3", "prefix_affinity, 2 workers": "#c44e52"}


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def _s(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    return f"{x:.2f}" if x >= 1 else f"{1000 * x:.0f} ms"


def _by(results: Sequence[Any], workload: str, policy: str) -> Any | None:
    return next((r for r in results if r.workload == workload and r.policy == policy), None)


def workload_table(results: Sequence[Any]) -> str:
    headers = [
        "router", "ok / sent", "fleet hit", "hit / pooled bound", "hit / oracle", "TTFT p50", "TTFT p99",
        "req/s", "imbalance prompt tokens", "imbalance busy time", "in-flight peak max/mean", "preemptions",
        "index predicted / replica cached", "replica lag", "load avg", "routing reasons",
    ]  # fmt: skip
    rows = []
    for r in results:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r.reasons.items(), key=lambda kv: -kv[1]))
        rows.append(
            [
                r.policy,
                f"{r.ok} / {r.requests}",
                _pct(r.fleet_hit),
                _pct(r.hit_vs_pooled),
                _pct(r.hit_vs_oracle),
                _s(r.ttft_p50),
                _s(r.ttft_p99),
                f"{r.rps:.2f}",
                f"{r.prompt_imbalance:.2f}",
                f"{r.busy_imbalance:.2f}",
                f"{r.inflight_peak_ratio:.2f}",
                str(r.preemptions),
                f"{r.predicted_cached / r.reported_cached:.2f}" if r.reported_cached else "-",
                _pct(r.lag),
                f"{r.loadavg:.1f}",
                reasons or "-",
            ]
        )
    return table(headers, rows)


def targets(results: Sequence[Any]) -> list[list[str]]:
    """One row per target of issue 12: what was asked, what this run measured, met or not."""
    rows: list[list[str]] = []

    def row(workload: str, target: str, measured: str, met: bool | None) -> None:
        rows.append([workload, target, measured, "n/a" if met is None else ("met" if met else "**missed**")])

    for wl in ("mooncake_kv25", "mooncake_kv100"):
        pa, smg, sgl, rr = (_by(results, wl, p) for p in (PA, SMG, SGL, "round_robin"))
        if pa is None:
            continue
        if smg is not None:
            row(wl, "hit rate >= smg cache_aware", f"{_pct(pa.fleet_hit)} vs {_pct(smg.fleet_hit)}",
                pa.fleet_hit >= smg.fleet_hit)  # fmt: skip
        row(wl, "hit rate >= 0.97 of the pooled bound", f"{pa.hit_vs_pooled:.3f}", pa.hit_vs_pooled >= 0.97)
        row(wl, "work imbalance (prompt tokens) <= 1.15", f"{pa.prompt_imbalance:.2f} (busy time "
            f"{pa.busy_imbalance:.2f})", pa.prompt_imbalance <= 1.15)  # fmt: skip
        if rr is not None:
            loaded = rr.ttft_p99 >= 2 * rr.ttft_p50
            others = [o for o in (smg, sgl, rr) if o is not None]
            text = ", ".join(f"{o.policy} {_s(o.ttft_p99)}" for o in others)
            row(
                wl,
                "p99 TTFT below smg's, sglang-router's and round_robin's (load: round_robin p99 >= 2 x p50)",
                f"{_s(pa.ttft_p99)} vs {text}; round_robin p99/p50 = {rr.ttft_p99 / rr.ttft_p50:.1f}",
                all(pa.ttft_p99 < o.ttft_p99 for o in others) if loaded else None,
            )
    pa, sgl = _by(results, "tight_cache", PA), _by(results, "tight_cache", SGL)
    if pa is not None and sgl is not None:
        row("tight_cache", "hit rate >= sglang-router's", f"{_pct(pa.fleet_hit)} vs {_pct(sgl.fleet_hit)}",
            pa.fleet_hit >= sgl.fleet_hit)  # fmt: skip
    for wl in ("shared_system", "multi_turn", "agent_loop", "no_sharing", "hot_prefix"):
        pa, rr = _by(results, wl, PA), _by(results, wl, "round_robin")
        if pa is None or rr is None:
            continue
        if pa.oracle_hit:
            row(wl, "hit rate >= round_robin's", f"{_pct(pa.fleet_hit)} vs {_pct(rr.fleet_hit)}",
                pa.fleet_hit >= rr.fleet_hit)  # fmt: skip
        row(wl, "p99 TTFT <= round_robin's (5 % tolerance)", f"{_s(pa.ttft_p99)} vs {_s(rr.ttft_p99)}",
            pa.ttft_p99 <= 1.05 * rr.ttft_p99)  # fmt: skip
    return rows


def plots(results: Sequence[Any], out_dir: Path = IMG_DIR) -> list[str]:
    """Bar charts per workload (hit rate with the pooled bound and the oracle, p99 TTFT, imbalance)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    wls = list(dict.fromkeys(r.workload for r in results))
    pols = list(dict.fromkeys(r.policy for r in results))
    charts = [
        ("routing-hit-rate.png", "fleet prefix-cache hit rate (%)", lambda r: 100 * r.fleet_hit, True),
        ("routing-ttft-p99.png", "p99 time to first token (s, model time)", lambda r: r.ttft_p99, False),
        ("routing-imbalance.png", "max/mean prompt tokens per replica", lambda r: r.prompt_imbalance, False),
    ]
    names = []
    for fname, ylabel, value, with_bounds in charts:
        fig, axes = plt.subplots(1, len(wls), figsize=(2.9 * len(wls), 3.8), squeeze=False)
        for ax, wl in zip(axes[0], wls, strict=True):
            rs = [_by(results, wl, p) for p in pols]
            ax.bar(
                range(len(pols)),
                [value(r) if r is not None else 0.0 for r in rs],
                color=[_COLORS.get(p, "#4c72b0") for p in pols],
            )
            first = next((r for r in rs if r is not None), None)
            if with_bounds and first is not None:
                ax.axhline(100 * first.oracle_hit, color="black", linestyle="--", linewidth=1, label="oracle")
                ax.axhline(100 * first.pooled_hit, color="grey", linestyle=":", linewidth=1.2, label="pooled")
                ax.legend(loc="lower right", fontsize=6)
            ax.set_xticks(range(len(pols)))
            ax.set_xticklabels(pols, rotation=60, ha="right", fontsize=6)
            ax.set_title(wl, fontsize=8)
            ax.tick_params(axis="y", labelsize=7)
        axes[0][0].set_ylabel(ylabel, fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=90)
        plt.close(fig)
        names.append(fname)
    return names


def markdown(results: Sequence[Any], meta: dict[str, Any], with_plots: bool = False) -> str:
    cases = meta["cases"]
    lines = [
        "## Routing quality",
        "",
        f"Command: `{meta['command'].strip()}` on {meta['machine']}, {meta['date']}; the whole run took "
        f"{meta['total_s']:.0f} s. Every table was measured in this one run, one router after the other on "
        "the same simulated replicas (4, engine model: vLLM V1's scheduler and paged KV cache, step costs of "
        "Llama-3-8B on an A100-80GB), caches and counters reset between runs; the gateway a fresh "
        "`prefix-gateway serve` process per run, the peers installed from PyPI into side venvs "
        "(`bench/peers.py`) with `--policy cache_aware`.",
        "",
        "Columns: *fleet hit* = the replicas' `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`; "
        "*pooled bound* = one LRU cache of the fleet's total KV fed the same stream; *oracle* = one infinite "
        "cache (both `bench/oracle.py`, block-granular like the replicas); *TTFT* = first SSE byte at the "
        "client, in model seconds (wall time / the replicas' speed); *req/s* per model second; *imbalance* = "
        "max / mean over replicas of the prompt tokens they were sent and of their engines' busy time; "
        "*in-flight peak* = the largest max/mean of running + waiting per replica over samples every 0.2 s; "
        "*index predicted / replica cached* = the gateway's predicted over the replicas' reported cached "
        "tokens; *replica lag* = how much later than modelled the replicas' steps ended, over their modelled "
        "wall time (the simulator is a Python process on shared cores: a starved one falls behind, and "
        "every TTFT of that run grows with it); *load avg* = the machine's 1-minute load at the end of the run (2 shared cores); "
        "*routing reasons* = the gateway's `prefix_gateway_routing_decisions_total`, smg's "
        "`smg_cache_aware_policy_branch_total` (sglang-router 0.3.2 exports none).",
        "",
        "Reading the trace rows: the replay runs 1 / speed times faster than real time (the replicas' "
        "`--speed`, in each table's line), so every wall millisecond a router itself adds to a request "
        "counts 1 / speed model milliseconds of TTFT: the gateway is one Python process sharing two cores "
        "with the simulator and the load generator, the peers are Rust; smg polls its workers' load every "
        "second (`--load-monitor-interval 1`, not its default 10 s, which would be minutes of model time).",
        "",
    ]
    for wl in dict.fromkeys(r.workload for r in results):
        c = cases[wl]
        sim = c["sim"]
        arrivals = (
            f"Poisson arrivals at {c['rate'] * sim['speed']:.0f}/s of model time"
            if c["rate"]
            else f"arrivals at the trace's times / {meta['trace_rate']}, replicas at --speed {sim['speed']:.4f} "
            f"and --token-scale {sim['token_scale']:g}"
        )
        lines += [
            f"### {wl}",
            "",
            f"{c['title']}: {c['requests']} requests, {arrivals}; KV {sim['kv_capacity_blocks']} blocks of 16 "
            f"tokens a replica.",
            "",
            workload_table([r for r in results if r.workload == wl]),
            "",
        ]
    rows = targets(results)
    if rows:
        lines += ["### Targets (issue 12)", "", table(["workload", "target", "measured", "result"], rows), ""]
    if with_plots:
        for name in plots(results):
            lines += [f"![{name[:-4]}]({REPO_PREFIX}/{name})", ""]
    return "\n".join(lines)
