"""Routing quality: every workload through the gateway with every policy, truth from the simulators.

    python -m bench.routing [--quick] [--write] [--policies P ...] [--workloads W ...] [--speed S]

One simulator process serves ``--replicas`` replicas (4) with a small KV cache (eviction matters), a
few batch slots each (so load turns into queueing) and realistic costs: prefill 0.2 ms/token, decode
20 ms/token, all multiplied by ``--speed``. For each (workload, policy) a fresh gateway process starts
with that policy (a YAML policy naming the replicas and their real KV capacity), the replicas' caches and
counters are reset, and the workload is offered open loop: Poisson arrivals at a fixed rate (scaled by
1/speed), streamed requests, a turn sent only after the previous turn of its conversation finished.

Measured per run: the fleet's prefix-cache hit rate from the replicas' own ``/metrics``
(``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``, summed over replicas), the oracle
hit rate of the same stream (``bench.oracle``), TTFT (first SSE byte at the client) mean and p99,
throughput, requests per replica, request-seconds per replica (the simulator's
``e2e_request_latency_seconds_sum``: queue + prefill + decode, the closest to busy time it reports),
in flight per replica at each request's arrival (client records) and sampled from ``/sim/stats`` every
0.2 s, and the gateway's routing reasons. prefix_affinity runs with ``min_spill_in_flight`` at the
replicas' batch size (as an operator sets it to ``--max-num-seqs``); without ``--quick`` it also runs
once more with the policy's default, 0 (``--no-ablation`` skips it), which shows what that allowance
trades: hit rate and TTFT against the strict load bound, and once with ``--workers 2`` (two gateway
processes on one port, each with its own in-flight counts and prefix index: what N workers cost in hit
rate).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import psutil
import yaml
from prometheus_client.parser import text_string_to_metric_families

from bench import workloads
from bench.oracle import OracleResult, oracle
from bench.procs import Proc, running, start_gateway, start_sim
from bench.report import percentile

POLICIES = ["round_robin", "least_load", "consistent_hash", "chwbl", "prefix_affinity", "session"]
QUICK_POLICIES = ["round_robin", "least_load", "prefix_affinity"]
WORKLOADS = list(workloads.SIZES)
ABLATION = "prefix_affinity, min_spill 0"  # the same policy with the default min_spill_in_flight
WORKERS = 2
WORKERS_ROW = f"prefix_affinity, {WORKERS} workers"  # N processes, each with its own view

# Offered load, requests/s at speed 1: sized for a busy but not overloaded fleet of 4 x 4 slots when
# prefixes are reused (each request holds a slot for ~0.35 s cached, up to ~1.2 s uncached).
RATES = {
    "shared_system": 16.0,
    "multi_turn": 16.0,
    "agent_loop": 12.0,
    "no_sharing": 16.0,
    "hot_prefix": 16.0,
}


@dataclass
class SimSettings:
    replicas: int = 4
    kv_capacity_blocks: int = 4096
    max_num_seqs: int = 4
    prefill_s_per_token: float = 0.0002
    decode_s_per_token: float = 0.02
    overhead_s: float = 0.005
    speed: float = 1.0

    def args(self) -> list[str]:
        return [
            "--kv-capacity-blocks", str(self.kv_capacity_blocks),
            "--max-num-seqs", str(self.max_num_seqs),
            "--prefill-s-per-token", str(self.prefill_s_per_token),
            "--decode-s-per-token", str(self.decode_s_per_token),
            "--overhead-s", str(self.overhead_s),
            "--speed", str(self.speed),
        ]  # fmt: skip


@dataclass
class Sent:
    """What the client saw of one request."""

    ok: bool = False
    status: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    replica: str | None = None
    start: float = 0.0  # perf_counter when the request was sent


@dataclass
class RunResult:
    workload: str
    policy: str
    requests: int
    ok: int
    errors: int
    wall_s: float
    oracle_hit: float
    fleet_hit: float
    prompt_tokens: int
    cached_tokens: int
    ttft_mean: float
    ttft_p50: float
    ttft_p99: float
    ttft_p99_reusable: float  # p99 TTFT of the requests the oracle finds at least half cached
    rps: float
    per_replica_requests: list[int]
    per_replica_busy_s: list[float]
    inflight_peak_ratio: float  # max over samples of max/mean in-flight (samples with in-flight >= replicas)
    inflight_over_bound: float  # share of samples where a replica held more than ceil(c * total / n)
    inflight_samples: int
    arrival_over_bound: float  # share of requests whose replica, as they arrived, held > ceil(c * total / n)
    arrival_peak_ratio: float  # max over arrivals (total >= n) of the chosen replica's in-flight / mean
    reasons: dict[str, int] = field(default_factory=dict)
    predicted_cached: int = 0
    reported_cached: int = 0
    loadavg: float = 0.0  # the machine's 1-minute load average at the end of the run (2 cores shared)

    @staticmethod
    def imbalance(values: list[float] | list[int]) -> float:
        mean = sum(values) / len(values) if values else 0.0
        return max(values) / mean if mean else 0.0

    @property
    def req_imbalance(self) -> float:
        return self.imbalance(self.per_replica_requests)

    @property
    def busy_imbalance(self) -> float:
        return self.imbalance(self.per_replica_busy_s)

    @property
    def hit_vs_oracle(self) -> float:
        return self.fleet_hit / self.oracle_hit if self.oracle_hit else float("nan")


# -- metrics ------------------------------------------------------------------------------------------


def at_arrival(sent: list[Sent], replicas: list[str], load_factor: float) -> tuple[float, float]:
    """In flight per replica at each request's arrival (itself included), from the client's records:
    the share of requests whose replica then held more than ``ceil(c * total / n)`` requests, and the
    largest in-flight / mean of the chosen replica (over arrivals with at least ``n`` in flight).

    This is the instant the bounded-load rule governs (departures later may leave a replica above the
    mean of what remains, which no router controls)."""
    ok = [s for s in sent if s.ok and s.replica in replicas]
    n = len(replicas)
    over, peak = 0, 0.0
    for s in ok:
        loads = dict.fromkeys(replicas, 0)
        for o in ok:
            if o.start <= s.start < o.start + o.e2e or o is s:
                loads[o.replica] += 1  # type: ignore[index]
        total = sum(loads.values())
        if loads[s.replica] > math.ceil(load_factor * total / n):  # type: ignore[index]
            over += 1
        if total >= n:
            peak = max(peak, loads[s.replica] / (total / n))  # type: ignore[index]
    return (over / len(ok) if ok else 0.0), peak


def prom_values(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text page: name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def prom_sum(values: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(v for _, v in values.get(name, []))


async def get_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
        r.raise_for_status()
        return await r.text()


async def reset_fleet(session: aiohttp.ClientSession, urls: list[str]) -> None:
    """Wait (bounded) until no replica runs anything, then clear caches and counters."""
    for _ in range(300):
        stats = [json.loads(await get_text(session, u + "/sim/stats")) for u in urls]
        if all(s["running"] == 0 and s["waiting"] == 0 for s in stats):
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("replicas still busy after 30 s")
    for u in urls:
        async with session.post(u + "/sim/reset") as r:
            r.raise_for_status()


# -- driving ------------------------------------------------------------------------------------------


async def send(session: aiohttp.ClientSession, url: str, req: workloads.Request, timeout_s: float) -> Sent:
    body = dict(req.body)
    body["stream"] = True
    body["stream_options"] = {"include_usage": True}
    headers = {"Content-Type": "application/json"}
    if req.session:
        headers["x-session-id"] = req.session
    start = time.perf_counter()
    out = Sent(start=start)
    try:
        async with session.post(
            url, data=orjson.dumps(body), headers=headers, timeout=aiohttp.ClientTimeout(total=timeout_s)
        ) as r:
            out.status = r.status
            out.replica = r.headers.get("x-gateway-replica")
            first = None
            async for _ in r.content.iter_any():
                if first is None:
                    first = time.perf_counter()
            end = time.perf_counter()
            out.ok = r.status == 200
            out.ttft = (first or end) - start
            out.e2e = end - start
    except (TimeoutError, aiohttp.ClientError):
        out.ok = False
    return out


async def sample_inflight(
    session: aiohttp.ClientSession, urls: list[str], stop: asyncio.Event, interval_s: float = 0.2
) -> list[list[int]]:
    """In flight (running + waiting) per replica, from the replicas themselves, until ``stop``."""
    samples: list[list[int]] = []
    while not stop.is_set() and len(samples) < 100_000:
        try:
            stats = await asyncio.gather(*(get_text(session, u + "/sim/stats") for u in urls))
            samples.append([(s := json.loads(t))["running"] + s["waiting"] for t in stats])
        except (TimeoutError, aiohttp.ClientError):
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), interval_s)
    return samples


async def drive(
    session: aiohttp.ClientSession,
    url: str,
    wl: workloads.Workload,
    rate: float,
    seed: int,
    timeout_s: float,
    max_seconds: float,
) -> tuple[list[Sent], float]:
    """Offer ``wl`` open loop at ``rate`` requests/s (Poisson); returns what each request saw and the wall time."""
    rng = random.Random(seed)
    done = [asyncio.Event() for _ in wl.requests]
    results: list[Sent] = [Sent() for _ in wl.requests]

    async def one(i: int) -> None:
        req = wl.requests[i]
        try:
            if req.after is not None:
                try:
                    await asyncio.wait_for(done[req.after].wait(), timeout_s)
                except TimeoutError:
                    return
            results[i] = await send(session, url, req, timeout_s)
        finally:
            done[i].set()

    t0 = time.perf_counter()
    deadline = t0 + max_seconds
    tasks = []
    at = t0
    for i in range(len(wl.requests)):
        at += rng.expovariate(rate)
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if time.perf_counter() > deadline:
            break
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return results, time.perf_counter() - t0


# -- one run ------------------------------------------------------------------------------------------


def gateway_policy(
    urls: list[str],
    sim: SimSettings,
    policy: str,
    seed: int,
    scrape: bool = True,
    load_factor: float = 1.25,
    min_spill: int | None = None,
) -> dict[str, Any]:
    """The YAML policy of one run: the replicas with their real KV capacity, the routing policy, and
    ``min_spill_in_flight`` at the replicas' batch size, as an operator sets it to ``--max-num-seqs``."""
    return {
        "billing": {"ledger": {"path": ":memory:"}},
        "scrape": {"enabled": scrape},
        "version": 1,
        "server": {"host": "127.0.0.1", "port": 8080},
        "models": [
            {
                "name": workloads.MODEL,
                "backend": "vllm",
                "replicas": [
                    {"url": u, "id": f"r{i}", "kv_capacity_blocks": sim.kv_capacity_blocks}
                    for i, u in enumerate(urls)
                ],
                "routing": {
                    "policy": policy,
                    "seed": seed,
                    "load_factor": load_factor,
                    "min_spill_in_flight": sim.max_num_seqs if min_spill is None else min_spill,
                },
            }
        ],
        "tenancy": {"allow_anonymous": True},
    }


async def run_one(
    session: aiohttp.ClientSession,
    urls: list[str],
    sim: SimSettings,
    wl: workloads.Workload,
    orc: OracleResult,
    policy: str,
    rate: float,
    seed: int,
    workdir: Path,
    load_factor: float,
    scrape: bool = True,
    min_spill: int | None = None,
    workers: int = 1,
) -> RunResult:
    tag = (
        f"{wl.name}-{policy}"
        + ("" if scrape else "-noscrape")
        + ("" if min_spill is None else f"-ms{min_spill}")
        + ("" if workers == 1 else f"-w{workers}")
    )
    cfg_path = workdir / f"gw-{tag}.yaml"
    cfg_path.write_text(
        yaml.safe_dump(gateway_policy(urls, sim, policy, seed, scrape, load_factor, min_spill))
    )
    await reset_fleet(session, urls)
    gw: Proc = await asyncio.to_thread(
        start_gateway,
        ["--config", str(cfg_path), *(["--workers", str(workers)] if workers > 1 else [])],
        env={"PREFIX_GATEWAY_SECRET": "routing-bench"},
        log_path=str(workdir / f"gw-{tag}.log"),
    )
    try:
        await asyncio.sleep(0.5)  # let the first scrape of the replicas' load land before traffic
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_inflight(session, urls, stop))
        sent, wall = await drive(
            session, gw.url + "/v1/chat/completions", wl, rate, seed, timeout_s=120.0, max_seconds=600.0
        )
        stop.set()
        samples = await sampler
        gw_metrics = prom_values(await get_text(session, (gw.metrics_url or gw.url) + "/metrics"))
    finally:
        await asyncio.to_thread(gw.stop)
    sims = [prom_values(await get_text(session, u + "/metrics")) for u in urls]
    queries = sum(prom_sum(m, "vllm:prefix_cache_queries_total") for m in sims)
    hits = sum(prom_sum(m, "vllm:prefix_cache_hits_total") for m in sims)
    per_req = [int(prom_sum(m, "vllm:request_success_total")) for m in sims]
    busy = [prom_sum(m, "vllm:e2e_request_latency_seconds_sum") for m in sims]
    ok = [s for s in sent if s.ok]
    ttfts = [s.ttft for s in ok] or [float("nan")]
    reusable = [s.ttft for s, (p, h) in zip(sent, orc.per_request, strict=True) if s.ok and 2 * h >= p]
    ratios, over, counted = [], 0, 0
    n = len(urls)
    for row in samples:
        total = sum(row)
        if total < n:
            continue
        counted += 1
        ratios.append(max(row) / (total / n))
        if max(row) > math.ceil(load_factor * total / n):
            over += 1
    arrival_over, arrival_peak = at_arrival(sent, [f"r{i}" for i in range(n)], load_factor)
    reasons: dict[str, int] = {}
    for labels, v in gw_metrics.get("prefix_gateway_routing_decisions_total", []):
        reasons[labels.get("reason", "?")] = reasons.get(labels.get("reason", "?"), 0) + int(v)
    return RunResult(
        workload=wl.name,
        policy=policy,
        requests=len(wl.requests),
        ok=len(ok),
        errors=len(sent) - len(ok),
        wall_s=wall,
        oracle_hit=orc.hit_rate,
        fleet_hit=hits / queries if queries else 0.0,
        prompt_tokens=int(queries),
        cached_tokens=int(hits),
        ttft_mean=sum(ttfts) / len(ttfts),
        ttft_p50=percentile(ttfts, 50),
        ttft_p99=percentile(ttfts, 99),
        ttft_p99_reusable=percentile(reusable, 99) if reusable else float("nan"),
        rps=len(ok) / wall if wall else 0.0,
        per_replica_requests=per_req,
        per_replica_busy_s=busy,
        inflight_peak_ratio=max(ratios, default=0.0),
        inflight_over_bound=over / counted if counted else 0.0,
        inflight_samples=counted,
        arrival_over_bound=arrival_over,
        arrival_peak_ratio=arrival_peak,
        reasons=reasons,
        predicted_cached=int(prom_sum(gw_metrics, "prefix_gateway_prefix_predicted_tokens_total")),
        reported_cached=int(prom_sum(gw_metrics, "prefix_gateway_prefix_reported_cached_tokens_total")),
        loadavg=os.getloadavg()[0],
    )


async def main_async(args: argparse.Namespace) -> tuple[list[RunResult], dict[str, Any]]:
    sim = SimSettings(
        replicas=args.replicas,
        kv_capacity_blocks=args.kv_capacity_blocks,
        max_num_seqs=args.max_num_seqs,
        speed=args.speed,
    )
    wls = [workloads.make(name, quick=args.quick) for name in args.workloads]
    oracles = {wl.name: oracle(r.body for r in wl.requests) for wl in wls}
    workdir = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    sim_proc, urls = start_sim(sim.replicas, extra=sim.args(), log_path=str(workdir / "sim.log"))
    results: list[RunResult] = []
    t_start = time.perf_counter()
    with running(sim_proc):
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            runs: list[tuple[str, int | None, int]] = [(p, None, 1) for p in args.policies]
            if args.ablation and "prefix_affinity" in args.policies:
                runs += [("prefix_affinity", 0, 1), ("prefix_affinity", None, WORKERS)]
            for wl in wls:
                rate = args.rate_scale * RATES[wl.name] / sim.speed
                for policy, min_spill, workers in runs:
                    r = await run_one(
                        session, urls, sim, wl, oracles[wl.name], policy, rate, args.seed, workdir, args.load_factor,
                        scrape=not args.no_scrape, min_spill=min_spill, workers=workers,
                    )  # fmt: skip
                    if min_spill is not None:
                        r.policy = ABLATION
                    elif workers > 1:
                        r.policy = WORKERS_ROW
                    results.append(r)
                    print(
                        f"{wl.name:14s} {policy:16s} ok={r.ok}/{r.requests} hit={r.fleet_hit:.3f} "
                        f"(oracle {r.oracle_hit:.3f}) ttft mean={r.ttft_mean * 1000:.0f}ms "
                        f"p99={r.ttft_p99 * 1000:.0f}ms p99reuse={r.ttft_p99_reusable * 1000:.0f}ms rps={r.rps:.1f} imb={r.req_imbalance:.2f}/"
                        f"{r.busy_imbalance:.2f} peak={r.inflight_peak_ratio:.2f} arr>bound={r.arrival_over_bound:.3f} "
                        f"arrpeak={r.arrival_peak_ratio:.2f} load={r.loadavg:.1f} reasons={r.reasons}",
                        flush=True,
                    )
    meta = {
        "command": "python -m bench.routing " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, Python {platform.python_version()}",
        "sim": asdict(sim),
        "rates": {wl.name: args.rate_scale * RATES[wl.name] / sim.speed for wl in wls},
        "sizes": {wl.name: len(wl) for wl in wls},
        "total_s": time.perf_counter() - t_start,
        "workdir": str(workdir),
        "quick": args.quick,
        "scrape": not args.no_scrape,
        "load_factor": args.load_factor,
        "ablation_name": ABLATION,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    return results, meta


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="smaller workloads, 3 policies (about 2 minutes)")
    p.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md and plots")
    p.add_argument("--policies", nargs="+", choices=POLICIES, help="default: all (quick: 3)")
    p.add_argument("--workloads", nargs="+", choices=WORKLOADS, default=WORKLOADS)
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--kv-capacity-blocks", type=int, default=SimSettings.kv_capacity_blocks)
    p.add_argument("--max-num-seqs", type=int, default=SimSettings.max_num_seqs)
    p.add_argument("--speed", type=float, default=1.0, help="multiplies every simulated delay; rates / speed")
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiplies every workload's offered rate")
    p.add_argument(
        "--load-factor", type=float, default=1.25, help="the gateway's routing.load_factor (bounded load c)"
    )
    p.add_argument("--seed", type=int, default=0, help="arrivals and routing tie breaks")
    p.add_argument(
        "--ablation",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also run prefix_affinity with load scraping off (default: on, off with --quick)",
    )
    p.add_argument(
        "--no-scrape", action="store_true", help="gateway does not read the replicas' /metrics load"
    )
    p.add_argument("--json", help="also write the raw results to this file")
    args = p.parse_args(argv)
    if args.policies is None:
        args.policies = QUICK_POLICIES if args.quick else POLICIES
    if args.ablation is None:
        args.ablation = not args.quick
    if args.speed <= 0:
        p.error("--speed must be > 0 (delays are what this benchmark measures)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        results, meta = runner.run(main_async(args))
    from bench import routing_report

    if args.json:
        Path(args.json).write_text(
            json.dumps({"meta": meta, "results": [asdict(r) for r in results]}, indent=1)
        )
    md = routing_report.markdown(results, meta, with_plots=args.write)
    print(md)
    if args.write:
        from bench.report import write_section

        write_section("routing", md)


if __name__ == "__main__":
    main()
