"""Routing policies on a request stream in virtual time: the router core in front of engine models.

    python -m bench.routing_offline --trace PATH [--format mooncake] [--requests 4000] [--kv 0.25]
        [--policies P ...] [--replicas 4] [--token-scale 8] [--rate 1]

No processes and no sockets: ``router.pool.PoolRouter`` decides, ``sim.engine.Engine`` replicas
serve, one event queue orders arrivals, step ends and the gateway's metric scrapes in model time, and
the router hears what the gateway would tell it (first byte, end of answer with the replica's
``cached_tokens``, a scrape of running/waiting every ``scrape_interval_s``). Deterministic for a seed,
and quick enough (a few tens of seconds for 4,000 trace requests) to compare policy designs; the
benchmark of record is ``python -m bench.routing``, which runs the real gateway, the peers and the
simulator as processes. Gateway CPU, network and the peers are not modelled here.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench import workloads
from bench.oracle import oracle
from bench.report import percentile
from config.routing import RoutingConfig
from router.policies.base import RoutingPolicy
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import Decision, RouteRequest
from sim.engine import Engine, EngineConfig, EngineCosts, EngineRequest
from sim.kvcache import block_hashes, count_tokens
from sim.prompt import render_chat

_ARRIVE, _STEP, _SCRAPE, _SHARE, _PREFILL_DUE = 0, 1, 2, 3, 4
SHARES = ("none", "index", "index+prefill", "index+load", "merged")
_PLACED, _PREFILLED, _FINISHED = 0, 1, 2  # what a shared event says of a decision


@dataclass
class OfflineResult:
    policy: str
    requests: int
    prompt_tokens: int
    cached_tokens: int
    ttft: list[float]
    per_replica_prompt: list[int]
    per_replica_busy: list[float]
    preemptions: int
    reasons: dict[str, int]
    makespan_s: float
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def hit(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @staticmethod
    def imbalance(values: Sequence[float]) -> float:
        mean = sum(values) / len(values) if values else 0.0
        return max(values) / mean if mean else 0.0

    def row(self) -> str:
        return (
            f"{self.policy:22s} hit={self.hit:.3f} ttft p50={percentile(self.ttft, 50):.2f}s "
            f"p99={percentile(self.ttft, 99):.2f}s imb prompt={self.imbalance(self.per_replica_prompt):.2f} "
            f"busy={self.imbalance(self.per_replica_busy):.2f} preempt={self.preemptions} "
            f"makespan={self.makespan_s:.0f}s reasons={dict(sorted(self.reasons.items(), key=lambda kv: -kv[1]))}"
        )


def replay(
    wl: workloads.Workload,
    routing: RoutingConfig,
    engine: EngineConfig,
    replicas: int = 4,
    rate: float = 1.0,
    scrape_interval_s: float = 1.0,
    seed: int = 0,
    log: list[tuple[int, str, str, int, int, int, float]] | None = None,
    gateways: int = 1,
    share: str = "none",
    share_delay_s: float = 0.0,
    stream: bool = True,
    published: float | None = 1.0,
    report_cached: bool = True,
    make_engine: Callable[[EngineConfig], Engine] = Engine,
    make_policy: Callable[[], RoutingPolicy] | None = None,
    scrape: bool = True,
) -> OfflineResult:
    """Offer ``wl`` to ``replicas`` engines behind a ``PoolRouter``: requests with ``at`` arrive at
    ``at / rate``; others are Poisson at ``rate`` per second; ``after`` holds a request until that one
    finished (the next turn of a conversation). ``log`` receives one row per finished request: (index,
    reason, replica, prompt tokens, matched tokens the router predicted, cached tokens, TTFT).

    ``gateways`` > 1: that many routers (gateway processes), each request offered to one drawn at
    random (a Service, or the kernel spreading connections over workers), each with its own in-flight
    counts and queued prefill, all hearing the same scrapes. ``share``: what they tell each other of
    their placements: ``none`` (each its own index), ``index`` (each decision's blocks reach the other
    routers' indexes ``share_delay_s`` later: the placement stream), ``index+prefill`` (also the
    queued prefill each sent, with the same delay), ``index+load`` (that and its requests in flight),
    ``merged`` (a probe: the index as ``index``, and one set of replica counters that every router
    updates inside its decisions).

    ``stream=False``: non-streamed answers. The router hears no first byte (a whole answer comes at its
    end): it releases a request's queued prefill when its timer says so (``PoolRouter.prefill_due_s``,
    as the gateway's ``dispatch._prefill_timer`` does; never with ``nonstream_prefill_release: end``)
    and learns from the end of each answer (``answered_whole``).

    ``published``: the KV capacity the router is told, as a multiple of the engine's (in router blocks),
    or None (unpublished: ``default_kv_capacity_blocks``). ``report_cached``: the router hears each
    answer's ``cached_tokens`` (False: an engine that does not report it). ``make_engine``: the replicas'
    engine model (``bench.routing_matrix`` has other eviction models). ``make_policy``: each router's
    policy instead of ``routing.policy``'s (``bench.peer_models``). ``scrape=False``: the routers hear no
    scrape (a gateway with ``scrape.enabled: false``, or whose replicas' metrics are unreachable): no
    reported load and no hit counter, only their own in-flight counts and the answers."""
    clock = [0.0]
    true_blocks = engine.num_gpu_blocks * engine.block_size // routing.block_size
    told = None if published is None else max(1, round(published * true_blocks))
    fleets = [
        [ReplicaState(id=f"r{i}", url=f"sim://{i}", kv_capacity_blocks=told) for i in range(replicas)]
        for _ in range(gateways)
    ]
    if share == "merged":  # one set of replica counters for every router: no separate processes can
        fleets = [fleets[0]] * gateways  # have it (a probe of what load sharing could at best do)
    routers = [
        PoolRouter(states, routing, make_policy() if make_policy else None, clock=lambda: clock[0])
        for states in fleets
    ]
    pick_gw = random.Random(seed + 1)
    shares: dict[int, tuple[int, Decision, int]] = {}  # pending: id -> (router, decision, what happened)
    queue_err: list[int] = []  # |router's queued prefill - the engine's prefill left|, per scrape and replica
    timers: dict[int, tuple[int, Decision]] = {}  # non-streamed: prefill releases due (router, decision)

    seq = 0  # the events' tie-break order (shared with push below)

    def share_event(g: int, d: Decision, what: int) -> None:
        nonlocal seq
        wanted = share != "none" if what == _PLACED else share.startswith("index+")
        if gateways > 1 and wanted:
            seq += 1
            shares[seq] = (g, d, what)
            push(now + share_delay_s, _SHARE, seq)

    engines = [make_engine(engine) for _ in range(replicas)]
    stepping = [False] * replicas
    events: list[tuple[float, int, int, int]] = []

    def push(t: float, kind: int, arg: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, arg))

    rng = random.Random(seed)
    reqs = wl.requests
    dependents: dict[int, list[int]] = {}
    t = 0.0
    for i, r in enumerate(reqs):
        if r.at is not None:
            t_i = r.at / rate
        else:
            t += rng.expovariate(rate)
            t_i = t
        if r.after is None:
            push(t_i, _ARRIVE, i)
        else:
            dependents.setdefault(r.after, []).append(i)
    not_before = {i: (r.at / rate if r.at is not None else 0.0) for i, r in enumerate(reqs)}
    push(0.0, _SCRAPE, 0)

    decisions: dict[EngineRequest, tuple[int, Decision, float, int]] = {}
    ttft: list[float] = []
    prompt_by = [0] * replicas
    reasons: Counter[str] = Counter()
    pending = len(reqs)
    last_end = 0.0

    def start_step(k: int, now: float) -> None:
        out = engines[k].step(now)
        stepping[k] = True
        push(now + out.duration_s, _STEP, k)
        step_out[k] = out

    step_out: list = [None] * replicas

    while events and pending:
        now, _, kind, arg = heapq.heappop(events)
        clock[0] = now
        if kind == _SCRAPE:
            for k, e in enumerate(engines):  # the router's queued prefill against the engine's
                reqs_in = (*e.running, *e.waiting)
                left = sum(max(0, q.num_prompt_tokens - q.num_computed_tokens) for q in reqs_in)
                states_k = [r.replica(f"r{k}") for r in routers]
                queued = sum(st.queued_prefill_tokens for st in states_k if st is not None)
                queue_err.append(abs(queued - left))
            for router, states in zip(routers, fleets, strict=True):
                for k, e in enumerate(engines if scrape else ()):
                    router.update_reported(states[k].id, len(e.running), len(e.waiting), e.pool.usage(), now)
                    router.observe_hit_counter(states[k].id, e.stats.prefix_hits)  # vllm:prefix_cache_hits
            push(now + scrape_interval_s, _SCRAPE, 0)
        elif kind == _SHARE:
            g, d, what = shares.pop(arg)
            for h, other in enumerate(routers):
                if h == g:
                    continue
                rep = other.replica(d.replica.id)
                assert rep is not None
                if what == _PLACED:
                    if d.block_hashes:
                        other.index.insert(d.replica.id, d.block_hashes, now)
                    if share.startswith("index+"):
                        rep.queued_prefill_tokens += d.uncached_tokens
                    if share == "index+load":
                        rep.in_flight += 1
                elif what == _PREFILLED:
                    rep.queued_prefill_tokens -= d.uncached_tokens
                elif share == "index+load":
                    rep.in_flight -= 1
        elif kind == _PREFILL_DUE:
            g, d = timers.pop(arg)
            if not d._prefill_released:
                routers[g].release_prefill(d)
                share_event(g, d, _PREFILLED)
        elif kind == _ARRIVE:
            r = reqs[arg]
            body = r.body
            g = pick_gw.randrange(gateways)
            router = routers[g]
            d = router.route(RouteRequest("chat", body["model"], body))
            share_event(g, d, _PLACED)
            if not stream and routing.nonstream_prefill_release == "predicted":
                due = router.prefill_due_s(d)
                if due is not None:
                    timers[id(d)] = (g, d)
                    push(now + due, _PREFILL_DUE, id(d))
            k = int(d.replica.id[1:])
            data = render_chat(body)
            tokens = count_tokens(len(data), 4)
            ereq = EngineRequest(
                block_hashes(data, block_size=engine.block_size, bytes_per_token=4),
                tokens,
                body.get("max_tokens", 16),
            )
            decisions[ereq] = (arg, d, now, g)
            reasons[d.reason] += 1
            prompt_by[k] += tokens
            engines[k].add(ereq, now)
            if not stepping[k]:
                start_step(k, now)
        else:  # a step of replica ``arg`` ended
            k = arg
            out = step_out[k]
            for ereq in out.first_tokens:
                i, d, sent, g = decisions[ereq]
                if stream:
                    routers[g].release_prefill(d)
                    share_event(g, d, _PREFILLED)
                ttft.append(now - sent)  # the engine's first token (a whole answer's client sees none)
                if log is not None:
                    log.append(
                        (
                            i,
                            d.reason,
                            d.replica.id,
                            ereq.num_prompt_tokens,
                            d.matched_tokens,
                            ereq.cached_tokens,
                            now - sent,
                        )
                    )
            for ereq in out.finished:
                i, d, _, g = decisions.pop(ereq)
                routers[g].observe_usage(d, ereq.cached_tokens if report_cached else None)
                if not stream:
                    routers[g].answered_whole(d)
                    if not d._prefill_released:
                        share_event(g, d, _PREFILLED)
                routers[g].release(d)
                share_event(g, d, _FINISHED)
                pending -= 1
                last_end = now
                for j in dependents.pop(i, ()):
                    push(max(now, not_before[j]), _ARRIVE, j)
            stepping[k] = False
            if not engines[k].idle:
                start_step(k, now)
    queries = sum(e.stats.prefix_queries for e in engines)
    hits = sum(e.stats.prefix_hits for e in engines)
    return OfflineResult(
        policy=routing.policy,
        requests=len(reqs),
        prompt_tokens=queries,
        cached_tokens=hits,
        ttft=ttft or [float("nan")],
        per_replica_prompt=prompt_by,
        per_replica_busy=[e.stats.busy_s for e in engines],
        preemptions=sum(e.stats.preemptions for e in engines),
        reasons=dict(reasons),
        makespan_s=last_end,
        extra={
            "queue_error_tokens": sum(queue_err) / len(queue_err) if queue_err else 0.0,
            "capacity_ratio": _capacity_ratio(routers[0], true_blocks),
        },
    )


def _capacity_ratio(router: PoolRouter, true_blocks: int) -> float:
    """The first router's learned capacity over the engines' own, the mean over its replicas (the
    fixed bound's when it learns none)."""
    bounds = [
        (est.bound if est is not None else router.index.capacity(r.id))
        for r in router.replicas
        for est in [router.capacity.estimate(r.id) if router.capacity is not None else None]
    ]
    return sum(bounds) / len(bounds) / true_blocks if bounds and true_blocks else 0.0


def main(argv: list[str] | None = None) -> None:
    import yaml

    from bench import traces
    from bench.report import table, write_section

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", help="a trace file (see bench/traces.py for where to get one)")
    p.add_argument(
        "--workload", nargs="+", choices=sorted(workloads.SIZES), help="synthetic workloads instead"
    )
    p.add_argument("--kv-blocks", type=int, default=4096, help="KV blocks a replica (synthetic workloads)")
    p.add_argument("--format", choices=sorted(traces.FORMATS), default="mooncake")
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--kv", type=float, nargs="+", default=[0.25, 1.0], help="fleet KV / working set (trace)")
    p.add_argument("--token-scale", type=float, default=8.0)
    p.add_argument(
        "--rate", type=float, default=0.5, help="trace: arrival times / this; synthetic: requests/s"
    )
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--policies", nargs="+", default=["round_robin", "prefix_affinity"])
    p.add_argument("--routing", action="append", default=[], help="routing field for every run, KEY=VALUE")
    p.add_argument("--sweep", help="prefix_affinity once per value, KEY=V1,V2,...")
    p.add_argument("--gateways", type=int, nargs="+", default=[1], help="gateway processes (routers)")
    p.add_argument("--share", nargs="+", choices=SHARES, default=["none"],
                   help="with several gateways: what they share of their placements")  # fmt: skip
    p.add_argument("--share-delay-s", type=float, default=0.05, help="model seconds a placement takes")
    p.add_argument("--non-stream", action="store_true", help="non-streamed answers (no first byte heard)")
    p.add_argument("--max-tokens", type=int, help="every request's max_tokens (default: the workload's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args(argv)
    extra = {k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.routing)}
    variants: list[tuple[str, dict[str, object]]] = [(pol, {}) for pol in args.policies]
    fleets = [(1, "none")] if 1 in args.gateways else []
    fleets += [(g, sh) for g in args.gateways if g > 1 for sh in args.share]
    if args.sweep:
        key, values = args.sweep.split("=", 1)
        variants += [("prefix_affinity", {key: yaml.safe_load(v)}) for v in values.split(",")]
    cases: list[tuple[str, workloads.Workload, EngineConfig, float]] = []
    if args.workload:
        for name in args.workload:
            wl = workloads.make(name)
            ecfg = EngineConfig(num_gpu_blocks=args.kv_blocks, max_num_seqs=args.max_num_seqs)
            cases.append((f"{wl.name} at {args.rate:g}/s", wl, ecfg, args.rate))
    elif args.trace:
        fmt = traces.FORMATS[args.format]
        scale = traces.Scale(fmt, args.token_scale)
        recs = traces.read_trace(args.trace, fmt, args.requests)
        wl = traces.trace_workload(recs, scale, "trace", "trace")
        ws = traces.working_set_blocks(recs, scale)
        for kv in args.kv:
            ecfg = EngineConfig(num_gpu_blocks=max(1, int(kv * ws / args.replicas)), max_num_seqs=args.max_num_seqs,
                                costs=EngineCosts().scaled(args.token_scale))  # fmt: skip
            cases.append((f"{fmt.name}, {len(recs)} requests, KV {kv:.0%}", wl, ecfg, args.rate))
    else:
        p.error("--trace or --workload is required")
    if args.max_tokens is not None:
        for _, wl, _, _ in cases:
            for r in wl.requests:
                r.body["max_tokens"] = args.max_tokens
    rows = []
    for label, wl, ecfg, rate in cases:
        bodies = [r.body for r in wl.requests]
        orc, pooled = oracle(bodies), oracle(bodies, capacity_blocks=ecfg.num_gpu_blocks * args.replicas)
        print(f"-- {label}: oracle {orc.hit_rate:.3f}, pooled bound {pooled.hit_rate:.3f}", flush=True)
        for (pol, over), (gws, share) in ((v, f) for v in variants for f in fleets):
            t0 = time.perf_counter()
            cfg = RoutingConfig(policy=pol, seed=args.seed, **{**extra, **over})
            res = replay(wl, cfg, ecfg, args.replicas, rate, seed=args.seed, gateways=gws, share=share,
                         share_delay_s=args.share_delay_s, stream=not args.non_stream)  # fmt: skip
            name = pol + "".join(f", {k} {v}" for k, v in over.items())
            if gws > 1:
                name += f", {gws} gateways, share {share}"
            ratio = res.hit / pooled.hit_rate if pooled.hit_rate else float("nan")
            print(
                f"{name:34s} {res.row()[23:]} hit/pooled={ratio:.3f} "
                f"queue error={res.extra['queue_error_tokens']:.0f} tokens ({time.perf_counter() - t0:.0f}s)",
                flush=True,
            )
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(res.reasons.items(), key=lambda kv: -kv[1]))
            rows.append([label, name, f"{res.hit:.3f}", f"{ratio:.3f}", f"{percentile(res.ttft, 50):.2f}",
                         f"{percentile(res.ttft, 99):.2f}", f"{res.imbalance(res.per_replica_prompt):.2f}",
                         f"{res.imbalance(res.per_replica_busy):.2f}",
                         f"{res.extra['queue_error_tokens']:.0f}", reasons])  # fmt: skip
    headers = ["stream", "policy", "hit", "hit / pooled bound", "TTFT p50 s", "TTFT p99 s", "imbalance prompt",
               "imbalance busy", "queue error (tokens)", "reasons"]  # fmt: skip
    name = "-".join(args.workload) if args.workload else Path(args.trace).stem
    swept = args.sweep.split("=")[0] if args.sweep else "policies"
    md = "\n".join([
        f"### Virtual time: {name}, {swept}", "",
        f"Command: `python -m bench.routing_offline {' '.join(sys.argv[1:] if argv is None else argv)}` "
        "(the router core in front of 4 engine models, one event queue; deterministic).", "",
        table(headers, rows),
    ])  # fmt: skip
    print(md)
    if args.write:
        write_section(f"offline-{name}-{swept}", md)


if __name__ == "__main__":
    main()
