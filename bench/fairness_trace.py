"""The Mooncake conversation trace, faster than recorded, shared by two tenants of different weights.

    python -m bench.fairness_trace --trace /tmp/traces/conversation_trace.jsonl [--requests 1500] [--skip 0]
        [--rate 2] [--replicas 2] [--slots 16] [--weights 3 1] [--token-scale 8] [--max-prefill N ...] [--write]

Model time, as ``bench.fairness``: ``router.pool.PoolRouter`` decides, ``sim.engine.Engine``
replicas (costs scaled by ``--token-scale``, as ``bench.routing_offline`` replays traces) serve, and
the gateway's queue is ``router.fairness`` itself (``bench.fairness.simulate``). The trace's
arrival times are divided by ``--rate``. Its requests are split between two tenants by their
conversation: a request's second block id (its first one past the shared system prompt, the same in
every turn of one conversation) decides, so a conversation stays with one tenant and both offer about
the same load. Both are in one class (``standard``, no TTFT objective): their shares are the fair
queue's weights (``--weights``), not priority.

Modes: ``fifo`` (today: slot FIFO, 1024 places, 5 s queue timeout, 503 past it), ``none`` (no gateway
queue: engines' FIFO), ``fair`` (the fair queue with the weights; its 30 s deadline). Per tenant:
p50 / p99 TTFT of its served requests, its share of the completed requests and of their output
tokens, requests shed; the fleet's prefix-cache hit rate (the engines' own counters); the share of requests
sent off their best-prefix replica (the one of their longest match in the router's index at arrival)
and the prompt tokens that cost (the match there less the match where they went).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from bench import traces
from bench.fairness import Req, entitled_shares, simulate
from bench.report import percentile, table, write_section
from router.fairness.classes import ClassSpec
from router.fairness.headroom import AutoHeadroom
from sim.engine import EngineCosts

TENANTS = ("heavy", "light")  # weights --weights[0], --weights[1]
STANDARD = ClassSpec("standard", 1, 10.0, None)  # no TTFT objective: nothing is shed at arrival


def tenant_of(rec: traces.TraceRecord) -> str:
    key = rec.hash_ids[1] if len(rec.hash_ids) > 1 else rec.hash_ids[0] if rec.hash_ids else 0
    return TENANTS[key % 2]


def trace_reqs(records: list[traces.TraceRecord], scale: traces.Scale, rate: float) -> list[Req]:
    wl = traces.trace_workload(records, scale, "mooncake", "mooncake")
    spec = STANDARD
    out = [
        Req(i, tenant_of(rec), spec, (r.at or 0.0) / rate, r.body)
        for i, (rec, r) in enumerate(zip(records, wl.requests, strict=True))
    ]
    out.sort(key=lambda r: r.at)
    for i, r in enumerate(out):
        r.i = i
    return out


def summarize(
    reqs: list[Req], seconds: float, hit: float, weights: dict[str, float] | None = None
) -> dict[str, Any]:
    done = [r for r in reqs if r.done is not None and r.done <= seconds]
    offered = {t: float(sum(1 for r in reqs if r.tenant == t)) for t in TENANTS}
    entitled = entitled_shares(offered, float(len(done)), weights)
    out_tokens = sum(r.body["max_tokens"] for r in done)
    per: dict[str, dict[str, float]] = {}
    for t in TENANTS:
        ttft = [r.first - r.at for r in reqs if r.tenant == t and r.first is not None]
        mine = [r for r in done if r.tenant == t]
        per[t] = {
            "offered": sum(1 for r in reqs if r.tenant == t),
            "p50": percentile(ttft, 50) if ttft else float("nan"),
            "p99": percentile(ttft, 99) if ttft else float("nan"),
            "share": len(mine) / len(done) if done else 0.0,
            "entitled": entitled[t],
            "token_share": sum(r.body["max_tokens"] for r in mine) / out_tokens if out_tokens else 0.0,
            "shed": sum(1 for r in reqs if r.tenant == t and r.shed is not None),
        }
    return {"per": per, "req_s": len(done) / seconds, "tok_s": out_tokens / seconds, "hit": hit}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness_trace", description=__doc__.split("\n")[0])
    ap.add_argument("--trace", required=True, help="Mooncake conversation_trace.jsonl")
    ap.add_argument("--requests", type=int, default=1500)
    ap.add_argument(
        "--skip", type=int, default=0, help="start after this many of the trace's requests (a held-out slice)"
    )
    ap.add_argument("--rate", type=float, default=2.0, help="arrival times are divided by this")
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--slots", type=int, default=16)
    ap.add_argument("--kv-blocks", type=int, default=4096, help="KV blocks of 16 tokens a replica")
    ap.add_argument("--weights", type=float, nargs=2, default=[3.0, 1.0], metavar=("HEAVY", "LIGHT"))
    ap.add_argument("--token-scale", type=float, default=8.0)
    ap.add_argument(
        "--max-prefill",
        type=int,
        nargs="*",
        default=[],
        help="also the fair queue with fairness.max_queued_prefill_tokens N (a row each)",
    )
    ap.add_argument(
        "--auto",
        action="store_true",
        help="also each fair row with fairness.auto_headroom (the defaults: poisson, 0.95 quantile, min 1, max half "
        "the slots; neither tenant is of the highest class, so it keeps its floor)",
    )
    ap.add_argument("--write", action="store_true", help="write the section of docs/benchmarks.md")
    ap.add_argument("--section", default="fairness-mooncake", help="the section's name in docs/benchmarks.md")
    args = ap.parse_args(argv)
    if not (1 <= args.requests <= 12_000 and 1 <= args.replicas <= 16 and 1 <= args.slots <= 256):
        ap.error("bounded: 1-12000 requests, 1-16 replicas, 1-256 slots")
    if not 0 <= args.skip <= 12_000 - args.requests:
        ap.error("--skip: 0 to 12000 - --requests")
    if not all(w > 0 for w in args.weights) or args.rate <= 0:
        ap.error("--weights and --rate must be > 0")
    started = time.perf_counter()
    scale = traces.Scale(traces.MOONCAKE, args.token_scale)
    records = traces.read_trace(args.trace, traces.MOONCAKE, args.skip + args.requests)[args.skip :]
    if records and args.skip:
        t0 = records[0].at_s
        records = [dataclasses.replace(r, at_s=r.at_s - t0) for r in records]  # the slice starts at 0
    costs = EngineCosts().scaled(args.token_scale)
    weights = dict(zip(TENANTS, args.weights, strict=True))
    results: dict[str, dict[str, Any]] = {}
    seconds = 0.0
    modes: list[tuple[str, str, int | None]] = [
        ("none", "no gateway queue", None), ("fifo", "today (slot FIFO)", None), ("fair", "fair queue", None),
        *(("fair", f"fair queue, queued prefill <= {n}", n) for n in args.max_prefill),
    ]  # fmt: skip
    if args.auto:
        modes += [(m, f"{name}, auto headroom", n) for m, name, n in modes if m == "fair"]
    for mode, name, max_prefill in modes:
        auto = AutoHeadroom(args.slots // 2) if name.endswith("auto headroom") else None
        reqs = trace_reqs(records, scale, args.rate)
        seconds = reqs[-1].at
        run = simulate(
            mode, reqs, args.replicas, args.slots, seconds, kv_blocks=args.kv_blocks, weights=weights,
            watch=frozenset(TENANTS), costs=costs, max_prefill=max_prefill, auto=auto,
        )  # fmt: skip
        results[name] = summarize(run.reqs, seconds, run.hits / run.queries if run.queries else 0.0, weights)
        results[name]["decode_tokens"] = run.extra["decode_tokens"]
        results[name]["busy_s"] = run.extra["busy_s"]
        results[name]["off_home"] = run.extra["off_home"] / run.extra["sent"] if run.extra["sent"] else 0.0
        results[name]["off_home_tokens"] = run.extra["off_home_tokens"]
    wall = time.perf_counter() - started
    headers = ["mode", "req/s", "output tok/s", "decode tokens (whole run)", "engine busy s", "hit rate"]
    headers += ["sent off their best-prefix replica", "prefix tokens lost there"]
    for t in TENANTS:
        headers += [f"{t}: p50 / p99 TTFT", f"{t}: share (requests / tokens)", f"{t}: entitled", f"{t}: shed"]
    rows = []
    for name, s in results.items():
        row = [name, f"{s['req_s']:.2f}", f"{s['tok_s']:.0f}", str(s["decode_tokens"]), f"{s['busy_s']:.0f}"]
        row += [f"{s['hit']:.3f}", f"{s['off_home']:.3f}", str(s["off_home_tokens"])]
        for t in TENANTS:
            p = s["per"][t]
            row += [
                f"{p['p50']:.2f} / {p['p99']:.2f}",
                f"{p['share']:.3f} / {p['token_share']:.3f}",
                f"{p['entitled']:.3f}",
                str(p["shed"]),
            ]
        rows.append(row)
    given = argv if argv is not None else sys.argv[1:]
    cmd = "python -m bench.fairness_trace" + "".join(f" {a}" for a in given if a != "--write")
    offered = {t: results["fair queue"]["per"][t]["offered"] for t in TENANTS}
    which = f"after its first {args.skip}, the next" if args.skip else "the first"
    md = "\n".join(
        [
            f"### The Mooncake conversation trace at {args.rate:g} x its rate, two tenants of different weights "
            f"({args.replicas} replicas x {args.slots} slots)",
            "",
            f"`{cmd}` ({which} {len(records)} requests of the trace, arrival times / {args.rate:g} over "
            f"{seconds:.0f} model seconds; {args.replicas} engine-model replicas, {args.slots} slots and "
            f"{args.kv_blocks} KV blocks each, token scale {args.token_scale:g}; tenants by conversation: "
            f"heavy (weight {args.weights[0]:g}) {offered['heavy']} requests, light (weight "
            f"{args.weights[1]:g}) {offered['light']}; {wall:.0f} s of wall time). TTFT in model seconds "
            "of the served requests; req/s, output tok/s and the shares: of the requests completed before "
            "the last arrival (a queue that holds requests longer completes more of them after it) and of "
            "their output tokens; entitled: the tenant's weighted max-min fair share of those completions given "
            "the requests each offered (over the whole slice: a tenant asking less than its weight's part is "
            "entitled to what it asks); decode tokens and engine busy seconds: the whole run's, the engines' own "
            f"counters (the engines' costs are scaled with the tokens: model seconds are real "
            "seconds); today's queue timeout 5 s.",
            "",
            table(headers, rows),
        ]
    )
    print(md)
    if args.write:
        write_section(args.section, md)


if __name__ == "__main__":
    main()
