"""The routing benchmark's markdown (tables, targets) and PNG plots, from its results."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report import table

IMG_DIR = Path(__file__).resolve().parent.parent / "docs" / "img"
REPO_PREFIX = "img"  # image links relative to docs/benchmarks.md


_COLORS = {
    "prefix_affinity": "#dd8452",
    "prefix_affinity, min_spill 0": "#e8b48e",
    "prefix_affinity, 2 workers": "#c44e52",
}


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f} %"


def _ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{1000 * x:.0f}"


def _by(results: Sequence[Any], workload: str, policy: str) -> Any | None:
    return next((r for r in results if r.workload == workload and r.policy == policy), None)


def workload_table(results: Sequence[Any]) -> str:
    headers = [
        "policy", "ok / sent", "fleet hit", "oracle hit", "hit / oracle", "TTFT mean ms", "TTFT p99 ms",
        "p99 reusable ms",
        "req/s", "imbalance req", "imbalance busy", "in-flight peak max/mean", "arrivals over bound",
        "index predicted / replica cached", "load avg", "routing reasons",
    ]  # fmt: skip
    rows = []
    for r in results:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(r.reasons.items(), key=lambda kv: -kv[1]))
        rows.append(
            [
                r.policy,
                f"{r.ok} / {r.requests}",
                _pct(r.fleet_hit),
                _pct(r.oracle_hit),
                _pct(r.hit_vs_oracle),
                _ms(r.ttft_mean),
                _ms(r.ttft_p99),
                _ms(r.ttft_p99_reusable),
                f"{r.rps:.1f}",
                f"{r.req_imbalance:.2f}",
                f"{r.busy_imbalance:.2f}",
                f"{r.inflight_peak_ratio:.2f}",
                _pct(r.arrival_over_bound),
                f"{r.predicted_cached / r.reported_cached:.2f}" if r.reported_cached else "-",
                f"{r.loadavg:.1f}",
                reasons or "-",
            ]
        )
    return table(headers, rows)


def targets(results: Sequence[Any], load_factor: float) -> list[list[str]]:
    """One row per target of the issue: what was asked, what this run measured, met or not."""
    rows: list[list[str]] = []

    def row(workload: str, target: str, measured: str, met: bool | None) -> None:
        rows.append([workload, target, measured, "n/a" if met is None else ("met" if met else "**missed**")])

    def vs(pa: Any, other: Any, strict: bool) -> tuple[str, bool | None]:
        """p99 TTFT of prefix_affinity against another policy; a difference under 5 % is a tie."""
        diff = pa.ttft_p99 / other.ttft_p99 - 1
        text = f"{_ms(pa.ttft_p99)} vs {_ms(other.ttft_p99)} ms ({100 * diff:+.1f} %)"
        if abs(diff) < 0.05:
            return text + ", a tie within 5 %", not strict
        return text, diff < 0

    for wl in ("shared_system", "multi_turn", "agent_loop"):
        pa, rr, ll = (_by(results, wl, p) for p in ("prefix_affinity", "round_robin", "least_load"))
        if pa is None:
            continue
        row(wl, "prefix_affinity hit >= 90 % of oracle", _pct(pa.hit_vs_oracle), pa.hit_vs_oracle >= 0.9)
        row(wl, "load imbalance (requests) <= 1.3", f"{pa.req_imbalance:.2f}", pa.req_imbalance <= 1.3)
        for other in (rr, ll):
            if other is not None:
                row(wl, f"p99 TTFT below {other.policy} (by 5 % or more)", *vs(pa, other, strict=True))
    pa, ll = _by(results, "no_sharing", "prefix_affinity"), _by(results, "no_sharing", "least_load")
    if pa is not None and ll is not None:
        row(
            "no_sharing",
            "p99 TTFT within 5 % of least_load",
            f"{_ms(pa.ttft_p99)} vs {_ms(ll.ttft_p99)} ms ({100 * (pa.ttft_p99 / ll.ttft_p99 - 1):+.1f} %)",
            pa.ttft_p99 <= 1.05 * ll.ttft_p99,
        )
    pa, ll = _by(results, "hot_prefix", "prefix_affinity"), _by(results, "hot_prefix", "least_load")
    if pa is not None:
        row(
            "hot_prefix",
            f"no replica above ceil({load_factor} x mean in flight) when a request arrives",
            f"{_pct(pa.arrival_over_bound)} of arrivals over the bound "
            f"(peak {pa.arrival_peak_ratio:.2f} x mean); sampled at the replicas every 0.2 s: "
            f"{_pct(pa.inflight_over_bound)} of {pa.inflight_samples} samples over, "
            f"peak {pa.inflight_peak_ratio:.2f} x mean",
            pa.arrival_over_bound == 0.0,
        )
        if ll is not None:
            row("hot_prefix", "p99 TTFT no worse than least_load (5 % tolerance)", *vs(pa, ll, strict=False))
    return rows


def findings(results: Sequence[Any], ablation: str, slots: int) -> list[str]:
    """What this run's numbers say about the router, computed from them (bullets of markdown)."""
    out: list[str] = []
    pairs = [
        (r, _by(results, r.workload, ablation))
        for r in results
        if r.policy == "prefix_affinity" and _by(results, r.workload, ablation) is not None
    ]
    if pairs:
        rows = "; ".join(
            f"{r.workload} hit {_pct(r.hit_vs_oracle)} vs {_pct(a.hit_vs_oracle)} of the oracle, p99 TTFT "
            f"{_ms(r.ttft_p99)} vs {_ms(a.ttft_p99)} ms, arrivals over the bound {_pct(r.arrival_over_bound)} "
            f"vs {_pct(a.arrival_over_bound)}"
            for r, a in pairs
        )
        out.append(
            f"**The batch allowance, measured.** prefix_affinity with `min_spill_in_flight: {slots}` (the "
            "replicas' batch size) vs the policy's default 0: "
            f"{rows}. The allowance lets a replica holding a private prefix take requests up to its batch "
            "size although the bound `ceil(c x (total + 1) / n)` is 2-3 at a few requests in flight; a hot "
            "prefix keeps the plain bound either way. A replica's load is the gateway's own in-flight count "
            "plus what its last scraped report shows beyond the gateway's own in-flight count when it was "
            "read (other pods' share)."
        )
    workers = [
        (r, _by(results, r.workload, "prefix_affinity, 2 workers"))
        for r in results
        if r.policy == "prefix_affinity"
    ]
    workers = [(r, w) for r, w in workers if w is not None and r.oracle_hit > 0]
    if workers:
        rows = "; ".join(
            f"{r.workload} {_pct(w.hit_vs_oracle)} vs {_pct(r.hit_vs_oracle)} of the oracle "
            f"(p99 TTFT {_ms(w.ttft_p99)} vs {_ms(r.ttft_p99)} ms)"
            for r, w in workers
        )
        out.append(
            "**What two worker processes cost.** `--workers 2` (one port, SO_REUSEPORT; each process has its "
            "own in-flight counts and prefix index, and the kernel spreads connections between them) vs "
            f"one process: {rows}. Cold prefixes still land alike (CHWBL on the same ring in both); what is "
            "lost is each process's view of what the other sent. Its routing-reasons column counts one "
            "worker only (`/metrics` answers from whichever process takes the connection)."
        )
    idle = [  # a replica with less than a quarter of the mean number of requests
        r
        for r in results
        if r.policy == "prefix_affinity"
        and r.per_replica_requests
        and 4 * len(r.per_replica_requests) * min(r.per_replica_requests) < r.ok
    ]
    if idle:
        parts = ", ".join(f"{r.workload} {r.per_replica_requests}" for r in idle)
        out.append(
            "**A replica left (nearly) idle under one hot prefix.** Requests per replica under "
            f"prefix_affinity: {parts}. Every request of a hot prefix has the same route key, so spills walk "
            "the ring in the same order; the last replica of that order gets work only when all the others "
            "are at the bound, which the rounding up of `ceil(c x (total + 1) / n)` rarely allows at a few "
            "requests in flight: the fleet runs on n - 1 replicas."
        )
    return out


def plots(results: Sequence[Any], out_dir: Path = IMG_DIR) -> list[str]:
    """Bar charts (hit rate vs oracle, p99 TTFT, imbalance) per workload; returns the file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    wls = list(dict.fromkeys(r.workload for r in results))
    pols = list(dict.fromkeys(r.policy for r in results))
    charts = [
        ("routing-hit-rate.png", "fleet prefix-cache hit rate (%)", lambda r: 100 * r.fleet_hit, True),
        ("routing-ttft-p99.png", "p99 time to first token (ms)", lambda r: 1000 * r.ttft_p99, False),
        ("routing-imbalance.png", "max/mean requests per replica", lambda r: r.req_imbalance, False),
    ]
    names = []
    for fname, ylabel, value, with_oracle in charts:
        fig, axes = plt.subplots(1, len(wls), figsize=(3.2 * len(wls), 3.6), squeeze=False)
        for ax, wl in zip(axes[0], wls, strict=True):
            rs = [_by(results, wl, p) for p in pols]
            vals = [value(r) if r is not None else 0.0 for r in rs]
            ax.bar(
                range(len(pols)),
                vals,
                color=[_COLORS.get(p, "#4c72b0") for p in pols],
            )
            if with_oracle:
                ax.set_ylim(0, 100)
            if with_oracle and rs and rs[0] is not None:
                ax.axhline(100 * rs[0].oracle_hit, color="black", linestyle="--", linewidth=1, label="oracle")
                ax.legend(loc="lower right", fontsize=7)
            ax.set_xticks(range(len(pols)))
            ax.set_xticklabels(pols, rotation=60, ha="right", fontsize=7)
            ax.set_title(wl, fontsize=9)
            ax.tick_params(axis="y", labelsize=7)
        axes[0][0].set_ylabel(ylabel, fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / fname, dpi=90)
        plt.close(fig)
        names.append(fname)
    return names


def markdown(results: Sequence[Any], meta: dict[str, Any], with_plots: bool = False) -> str:
    sim = meta["sim"]
    lines = [
        "## Routing quality",
        "",
        f"Command: `{meta['command'].strip()}` on {meta['machine']}, {meta['date']}; the whole run took "
        f"{meta['total_s']:.0f} s. One process simulates {sim['replicas']} vLLM-like replicas "
        f"(KV cache {sim['kv_capacity_blocks']} blocks of 16 tokens each, {sim['max_num_seqs']} batch slots, "
        f"prefill {sim['prefill_s_per_token'] * 1000:.2f} ms/token, decode {sim['decode_s_per_token'] * 1000:.0f} "
        f"ms/token, overhead {sim['overhead_s'] * 1000:.0f} ms, all x speed {sim['speed']}); a fresh gateway "
        "process per run with the policy named in the table; the load generator is a third process. "
        "Open-loop Poisson arrivals at "
        + ", ".join(f"{k} {v:.0f}/s ({meta['sizes'][k]} requests)" for k, v in meta["rates"].items())
        + "; streamed requests with `temperature: 0.7` (never response-cached); the next turn of a "
        "conversation is sent only after the previous one finished.",
        "",
        "Columns: *fleet hit* = prefix-cache hit tokens / prompt tokens summed over the replicas' own "
        "`vllm:prefix_cache_hits_total` and `vllm:prefix_cache_queries_total`; *oracle hit* = one infinite "
        "cache seeing the same stream in order, block-granular like the replicas (`bench/oracle.py`); "
        "*TTFT* = first SSE byte at the client; *p99 reusable* = p99 TTFT of the requests the oracle finds at least half cached (leaves out first sights of a prefix, which no routing can help); *imbalance req* = max/mean of requests per replica; "
        "*imbalance busy* = max/mean of request-seconds per replica (the simulator's "
        "`vllm:e2e_request_latency_seconds_sum`: queue + prefill + decode; it reports no GPU busy time); "
        "*in-flight peak* = the largest max/mean of running + waiting requests per replica over samples "
        "taken every 0.2 s at the replicas (samples with at least one request per replica on average); "
        "*arrivals over bound* = share of requests whose replica, at the moment they were sent, held more than `ceil(c x total in flight / n)` requests (client-side records: send and end times and the `x-gateway-replica` header); *index predicted / replica cached* = the gateway's `prefix_gateway_prefix_predicted_tokens_total` over `prefix_gateway_prefix_reported_cached_tokens_total` (above 1: its index believes in blocks the replicas no longer hold); *load avg* = the machine's 1-minute load average at the end of the run (2 cores shared with other work: above ~3, CPU contention inflates latencies and makes p99 noisy); *routing reasons* = the gateway's `prefix_gateway_routing_decisions_total{reason}`.",
        "",
    ]
    wls = list(dict.fromkeys(r.workload for r in results))
    for wl in wls:
        lines += [f"### {wl}", "", workload_table([r for r in results if r.workload == wl]), ""]
    rows = targets(results, meta["load_factor"])
    if rows:
        lines += [
            "### Targets",
            "",
            "Measured in this one run (the load bound is integral: with `c` = "
            f"{meta['load_factor']} and `n` replicas a replica may hold `ceil(c x total / n)` requests).",
            "",
            table(["workload", "target", "measured", "result"], rows),
            "",
        ]
    notes = findings(results, meta.get("ablation_name", "prefix_affinity, min_spill 0"), sim["max_num_seqs"])
    if notes:
        lines += ["### Findings", ""] + [f"- {n}" for n in notes] + [""]
    if with_plots:
        for name in plots(results):
            lines += [f"![{name[:-4]}]({REPO_PREFIX}/{name})", ""]
    return "\n".join(lines)
