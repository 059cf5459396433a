"""Routing quality on production traces and synthetic workloads, with the peers on the same replicas.

    python -m bench.routing [--trace PATH] [--quick] [--write] [--policies P ...] [--workloads W ...]
        [--workers-row] [--gateways N ...] [--engine-block-size N] [--capacity pub|unpub|x0.5|x2]
        [--routing KEY=VALUE ...]

``--engine-block-size`` and ``--capacity`` are the process cells of ``bench.routing_matrix``: the
replicas' KV block, and the capacity the gateway's policy names (the engine's, none, half, twice; but
``pub`` the replicas publish no ``vllm:cache_config_info``). ``--routing`` sets gateway routing fields
(e.g. ``learn_capacity=false evict_weight=0``: the policy before issue 24). ``zipf_tight`` (not in the
default set): 16 shared prompts of 1.6k tokens under Zipf s = 0.9, KV for about 3 a replica.

Each workload runs once per router, one after another, on the same simulated replicas (the engine
model of ``sim/``: vLLM V1's scheduler and paged KV cache, step costs of Llama-3-8B on an
A100-80GB), with their caches and counters reset in between. The routers: this gateway with a routing
policy (a fresh ``prefix-gateway serve --config`` process each time, replicas named with their real
KV capacity, everything else as a new user leaves it), and the peers users compare it with, installed
from PyPI into side venvs (``bench.peers``: smg 1.13.0 and sglang-router 0.3.2, ``--policy
cache_aware``). A third process offers the requests: streamed chat completions, open loop.

Workloads:

- ``mooncake_kv25``, ``mooncake_kv100`` (with ``--trace``): the first ``--trace-requests`` (4,000) of
  Mooncake's conversation trace (``kvcache-ai/Mooncake``, ``FAST25-release/traces/
  conversation_trace.jsonl``; not in this repository: ``git show HEAD:FAST25-release/traces/
  conversation_trace.jsonl`` from a clone), replayed by ``bench.traces`` (same block id, same text)
  at 1/8 of its token counts (the replicas run with ``--token-scale 8``, which scales their costs to
  match), arrivals at the trace's timestamps / ``--trace-rate`` (0.5), the whole replay compressed
  into about ``--trace-seconds`` (90) of wall time by the replicas' ``--speed``. The fleet's KV is 25 %
  and 100 % of the replay's working set (its distinct blocks). TTFTs and throughput are reported in
  model seconds (wall / speed).
- ``tight_cache``: sgl-router's tight-cache shape (8 prefixes of 1k tokens, KV for about 2 a replica).
- the five synthetic workloads of ``bench.workloads`` (shared system prompts, multi-turn chat, agent
  loop, no sharing, one hot prefix), Poisson arrivals at 32/s, KV 4096 blocks a replica.

Several gateway processes (``--gateways 2 4``, trace workloads): ``prefix_affinity, N workers, shared``
(``--workers N`` on one port, ``shared_index`` over the workers' Unix sockets, no Redis) and
``prefix_affinity, N pods, shared (Redis)`` (N processes on N ports, each request sent to one drawn at
random, ``shared_index`` through a real redis-server this benchmark starts); ``--workers-row`` adds
``--workers 2`` sharing nothing. Routing reasons of a ``--workers`` row are one worker's (each scrape
of its ``/metrics`` reaches one).

Measured per run: the fleet's hit rate from the replicas' own counters
(``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total``), the oracle (one infinite cache)
and the pooled bound (one LRU of the fleet's total KV) of the same stream (``bench.oracle``), TTFT p50
and p99 at the client, throughput, work imbalance (max / mean over replicas of prompt tokens and of
engine busy time), preemptions (``vllm:num_preemptions_total``), in-flight peak (sampled at the
replicas), and routing reasons (the gateway's ``prefix_gateway_routing_decisions_total``, smg's
``smg_cache_aware_policy_branch_total``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
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

from bench import traces, workloads
from bench.oracle import OracleResult, oracle
from bench.peers import PEERS, start_peer
from bench.procs import Proc, free_port, running, start_gateway, start_sim
from bench.redis_server import RedisServer
from bench.report import percentile

GATEWAY_POLICIES = ["round_robin", "least_load", "consistent_hash", "chwbl", "prefix_affinity", "session"]
ROUTERS = GATEWAY_POLICIES + list(PEERS)
DEFAULT_ROUTERS = ["round_robin", "prefix_affinity", "smg", "sglang-router"]
SYNTHETIC = ["shared_system", "multi_turn", "agent_loop", "no_sharing", "hot_prefix", "tight_cache"]
EXTRA_WORKLOADS = ["zipf_tight"]  # not in the default set: issue 24's tight cache under Zipf popularity
TRACE_KV = {"mooncake_kv25": 0.25, "mooncake_kv100": 1.0}
WORKLOADS = SYNTHETIC + list(TRACE_KV) + EXTRA_WORKLOADS
WORKERS = 2
WORKERS_ROW = f"prefix_affinity, {WORKERS} workers"


@dataclass(frozen=True)
class GatewayFleet:
    """Several gateway processes as one router: ``workers`` of one ``--workers N`` on one port, or
    ``pods``, separate processes on separate ports with the client spreading requests over them at
    random (a Service); ``shared``: with ``shared_index`` on (workers: their Unix sockets; pods: Redis)."""

    processes: int
    layout: str  # "workers" | "pods"
    shared: bool

    @property
    def name(self) -> str:
        how = (", shared (Redis)" if self.layout == "pods" else ", shared") if self.shared else ""
        return f"prefix_affinity, {self.processes} {self.layout}{how}"


def fleet_rows(counts: list[int]) -> list[GatewayFleet]:
    return [GatewayFleet(n, layout, True) for n in counts for layout in ("workers", "pods")]


FLEETS = {f.name: f for f in [GatewayFleet(WORKERS, "workers", False), *fleet_rows([2, 4, 8])]}

# Offered load of the synthetic workloads (requests/s): busy but not saturated under the engine model
# (round_robin's p99 TTFT is 2-5x its p50 there; python -m bench.routing_offline --workload W --rate R).
RATES = {"shared_system": 32.0, "multi_turn": 32.0, "agent_loop": 32.0, "no_sharing": 32.0,
         "hot_prefix": 32.0, "tight_cache": 8.0}  # fmt: skip
ACCESS_LOG = bool(os.environ.get("ROUTING_BENCH_ACCESS_LOG"))
ROUTING_EXTRA: dict[str, Any] = {}  # --routing KEY=VALUE: the gateway's routing fields of every run
CAPACITY_TOLD = {"pub": 1.0, "unpub": None, "x0.5": 0.5, "x2": 2.0}
TIGHT_KV_BLOCKS = 150  # about 2 of tight_cache's 8 prefixes (66 blocks each) a replica, plus running room


@dataclass(frozen=True)
class SimSettings:
    """One simulator process: what every replica of it is."""

    replicas: int = 4
    kv_capacity_blocks: int = 4096
    max_num_seqs: int = 256
    speed: float = 1.0
    token_scale: float = 1.0
    stream_interval: int = 1
    block_size: int = 16  # the engine's block (kv_capacity_blocks counts these)
    told: float | None = 1.0  # the capacity the gateway is told, x the engine's (None: told nothing)

    @property
    def told_blocks(self) -> int | None:
        """The replicas' ``kv_capacity_blocks`` in the gateway's policy (16-token blocks), if any."""
        true = self.kv_capacity_blocks * self.block_size // 16
        return None if self.told is None else max(1, round(self.told * true))

    def args(self) -> list[str]:
        out = [
            "--kv-capacity-blocks", str(self.kv_capacity_blocks),
            "--max-num-seqs", str(self.max_num_seqs),
            "--speed", f"{self.speed:.6g}",
            "--stream-interval", str(self.stream_interval),
        ]  # fmt: skip
        if self.token_scale != 1.0:
            out += ["--token-scale", f"{self.token_scale:g}"]
        if self.block_size != 16:
            out += ["--block-size", str(self.block_size)]
        if self.told != 1.0:  # told another capacity than the engine's, or none: the engine says nothing
            out += ["--no-cache-config-info"]
        return out


@dataclass
class Case:
    """One workload as it is offered: its requests, its replicas, its arrivals, its bounds."""

    name: str
    title: str
    wl: workloads.Workload
    sim: SimSettings
    rate: float | None  # Poisson arrivals per wall second (requests without ``at``)
    orc: OracleResult
    pooled: OracleResult

    @property
    def time_scale(self) -> float:
        """Wall seconds per model second."""
        return self.sim.speed


@dataclass
class Sent:
    """What the client saw of one request (wall seconds)."""

    ok: bool = False
    status: int = 0
    ttft: float = 0.0
    e2e: float = 0.0
    start: float = 0.0


@dataclass
class RunResult:
    workload: str
    policy: str
    requests: int
    ok: int
    errors: int
    wall_s: float
    time_scale: float  # wall seconds per model second
    oracle_hit: float
    pooled_hit: float
    fleet_hit: float
    prompt_tokens: int
    cached_tokens: int
    ttft_p50: float  # model seconds
    ttft_p99: float
    ttft_mean: float
    rps: float  # requests per model second
    per_replica_prompt: list[int]
    per_replica_busy: list[float]
    preemptions: int
    inflight_peak_ratio: float
    lag: float = 0.0  # replicas' steps ended this much later than modelled, relative (CPU starvation)
    reasons: dict[str, int] = field(default_factory=dict)
    predicted_cached: int = 0
    reported_cached: int = 0
    loadavg: float = 0.0

    @staticmethod
    def imbalance(values: list[float] | list[int]) -> float:
        mean = sum(values) / len(values) if values else 0.0
        return max(values) / mean if mean else 0.0

    @property
    def prompt_imbalance(self) -> float:
        return self.imbalance(self.per_replica_prompt)

    @property
    def busy_imbalance(self) -> float:
        return self.imbalance(self.per_replica_busy)

    @property
    def hit_vs_oracle(self) -> float:
        return self.fleet_hit / self.oracle_hit if self.oracle_hit else float("nan")

    @property
    def hit_vs_pooled(self) -> float:
        return self.fleet_hit / self.pooled_hit if self.pooled_hit else float("nan")


# -- metrics ------------------------------------------------------------------------------------------


def prom_values(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a Prometheus text page: name -> [(labels, value)]."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def prom_sum(values: dict[str, list[tuple[dict[str, str], float]]], name: str) -> float:
    return sum(v for _, v in values.get(name, []))


def by_label(values: dict[str, list[tuple[dict[str, str], float]]], name: str, label: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for labels, v in values.get(name, []):
        key = labels.get(label, "?")
        out[key] = out.get(key, 0) + int(v)
    return {k: v for k, v in out.items() if v}


async def get_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as r:
        r.raise_for_status()
        return await r.text()


async def fleet_stats(session: aiohttp.ClientSession, urls: list[str]) -> list[dict[str, Any]]:
    return [json.loads(await get_text(session, u + "/sim/stats")) for u in urls]


async def wait_idle(session: aiohttp.ClientSession, urls: list[str], limit_s: float = 60.0) -> None:
    for _ in range(int(limit_s / 0.1)):
        if all(s["running"] == 0 and s["waiting"] == 0 for s in await fleet_stats(session, urls)):
            return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"replicas still busy after {limit_s:.0f} s")


async def reset_fleet(session: aiohttp.ClientSession, urls: list[str]) -> None:
    """Wait (bounded) until no replica runs anything, then clear caches and counters."""
    await wait_idle(session, urls)
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
    urls: list[str],
    case: Case,
    seed: int,
    timeout_s: float,
    max_seconds: float,
) -> tuple[list[Sent], float]:
    """Offer the case open loop: a request with ``at`` leaves at ``at`` model seconds (x time scale),
    others by Poisson arrivals at ``case.rate``; one with ``after`` waits for that one to finish. Each
    request goes to one of ``urls`` drawn at random (several gateway pods behind a Service)."""
    rng = random.Random(seed)
    spread = random.Random(seed + 1)
    reqs = case.wl.requests
    done = [asyncio.Event() for _ in reqs]
    results: list[Sent] = [Sent() for _ in reqs]
    url_of = [urls[spread.randrange(len(urls))] for _ in reqs]

    async def one(i: int) -> None:
        req = reqs[i]
        try:
            if req.after is not None:
                try:
                    await asyncio.wait_for(done[req.after].wait(), timeout_s)
                except TimeoutError:
                    return
            results[i] = await send(session, url_of[i], req, timeout_s)
        finally:
            done[i].set()

    t0 = time.perf_counter()
    deadline = t0 + max_seconds
    tasks = []
    at = t0
    for i, req in enumerate(reqs):
        if req.at is not None:
            at = t0 + req.at * case.time_scale
        else:
            at += rng.expovariate(case.rate or 1.0)
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
    redis_url: str | None = None,
    shared: bool = False,
) -> dict[str, Any]:
    """The YAML policy of one run: the replicas with their real KV capacity and the routing policy;
    everything else at its default (a fleet of gateway processes: the shared index on, Redis for pods)."""
    extra: dict[str, Any] = {"shared_index": {"enabled": True}} if shared else {}
    told = {} if sim.told_blocks is None else {"kv_capacity_blocks": sim.told_blocks}
    if redis_url is not None:
        extra["redis"] = {"url": redis_url}
        extra["cache"] = {"enabled": False}  # the response cache would be shared too: not what is measured
    return {
        **extra,
        "version": 1,
        "server": {
            "host": "127.0.0.1",
            "port": 8080,
            "access_log": ACCESS_LOG,
            "log_level": "info" if ACCESS_LOG else "warning",
        },
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [
            {
                "name": workloads.MODEL,
                "backend": "vllm",
                "replicas": [{"url": u, "id": f"r{i}", **told} for i, u in enumerate(urls)],
                "routing": {**ROUTING_EXTRA, "policy": policy, "seed": seed},
            }
        ],
        "tenancy": {"allow_anonymous": True},
    }


async def wait_ready(session: aiohttp.ClientSession, url: str, limit_s: float = 60.0) -> None:
    """Until the router answers a one-token chat completion (peers register their workers after they
    start listening)."""
    body = {"model": workloads.MODEL, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1}
    deadline = time.monotonic() + limit_s
    while True:
        try:
            async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=10)) as r:
                await r.read()
                if r.status == 200:
                    return
        except (TimeoutError, aiohttp.ClientError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer a chat completion within {limit_s:.0f} s")
        await asyncio.sleep(0.2)


async def start_router(
    router: str, urls: list[str], case: Case, seed: int, workdir: Path, tag: str, redis_url: str | None = None
) -> tuple[list[Proc], list[str]]:
    """The router processes in front of ``urls``: a peer, the gateway with a policy, or a fleet of
    gateway processes (``FLEETS``). Returns the processes (the client spreads requests over their
    URLs) and the URLs of their metrics (a gateway's metrics listener)."""
    log = str(workdir / f"{tag}.log")
    if router in PEERS:
        peer = await asyncio.to_thread(start_peer, PEERS[router], urls, log)
        return [peer.proc], [peer.metrics_url or peer.proc.url + "/metrics"]
    fleet = FLEETS.get(router)
    policy = router if fleet is None else "prefix_affinity"
    pods = fleet is not None and fleet.layout == "pods"
    shared = fleet is not None and fleet.shared
    cfg_path = workdir / f"{tag}.yaml"
    cfg = gateway_policy(urls, case.sim, policy, seed, redis_url if pods and shared else None, shared)
    cfg_path.write_text(yaml.safe_dump(cfg))
    args = ["--config", str(cfg_path)]
    if fleet is not None and not pods:
        args += ["--workers", str(fleet.processes)]
    env = {"PREFIX_GATEWAY_SECRET": "routing-bench"}
    count = fleet.processes if pods and fleet is not None else 1
    procs = [
        await asyncio.to_thread(start_gateway, args, env=env, log_path=f"{log}.{k}", port=free_port())
        for k in range(count)
    ]
    # --workers N: the metrics listener is worker 0's; its counters are that worker's only.
    return procs, [(p.metrics_url or p.url) + "/metrics" for p in procs]


async def run_one(
    session: aiohttp.ClientSession,
    urls: list[str],
    case: Case,
    router: str,
    seed: int,
    workdir: Path,
    redis: RedisServer | None = None,
) -> RunResult:
    tag = f"{case.name}-{router}".replace(", ", "-").replace(" ", "_").replace("(", "").replace(")", "")
    await wait_idle(session, urls)
    if redis is not None:
        redis.flushall()
    procs, metrics_urls = await start_router(
        router, urls, case, seed, workdir, tag, redis.url if redis is not None else None
    )
    try:
        entry = [p.url + "/v1/chat/completions" for p in procs]
        for url in entry:
            await wait_ready(session, url)
        await reset_fleet(session, urls)
        await asyncio.sleep(0.5)  # let a first scrape of the replicas' load land before traffic
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample_inflight(session, urls, stop))
        horizon = max([r.at or 0.0 for r in case.wl.requests]) * case.time_scale
        sent, wall = await drive(
            session, entry, case, seed, timeout_s=max(120.0, 4 * horizon), max_seconds=max(600.0, 3 * horizon)
        )
        stop.set()
        samples = await sampler
        router_metrics: dict[str, list[tuple[dict[str, str], float]]] = {}
        for m in metrics_urls:
            for name, values in prom_values(await get_text(session, m)).items():
                router_metrics.setdefault(name, []).extend(values)
    finally:
        for p in procs:
            await asyncio.to_thread(p.stop)
    sims = [prom_values(await get_text(session, u + "/metrics")) for u in urls]
    stats = await fleet_stats(session, urls)
    queries = sum(prom_sum(m, "vllm:prefix_cache_queries_total") for m in sims)
    hits = sum(prom_sum(m, "vllm:prefix_cache_hits_total") for m in sims)
    ok = [s for s in sent if s.ok]
    scale = case.time_scale
    ttfts = [s.ttft / scale for s in ok] or [float("nan")]
    ratios = [max(row) / (sum(row) / len(row)) for row in samples if sum(row) >= len(row)]
    if router in PEERS:
        branch = PEERS[router].branch_metric
        reasons = by_label(router_metrics, branch, "branch") if branch else {}
    else:
        reasons = by_label(router_metrics, "prefix_gateway_routing_decisions_total", "reason")
    return RunResult(
        workload=case.name,
        policy=router
        if router not in PEERS
        else f"{PEERS[router].requirement.replace('==', ' ')} cache_aware",
        requests=len(case.wl.requests),
        ok=len(ok),
        errors=len(sent) - len(ok),
        wall_s=wall,
        time_scale=scale,
        oracle_hit=case.orc.hit_rate,
        pooled_hit=case.pooled.hit_rate,
        fleet_hit=hits / queries if queries else 0.0,
        prompt_tokens=int(queries),
        cached_tokens=int(hits),
        ttft_p50=percentile(ttfts, 50),
        ttft_p99=percentile(ttfts, 99),
        ttft_mean=sum(ttfts) / len(ttfts),
        rps=len(ok) / (wall / scale) if wall else 0.0,
        per_replica_prompt=[int(s["prompt_tokens"]) for s in stats],
        per_replica_busy=[float(s.get("busy_s", 0.0)) for s in stats],
        preemptions=int(sum(prom_sum(m, "vllm:num_preemptions_total") for m in sims)),
        inflight_peak_ratio=max(ratios, default=0.0),
        lag=sum(s.get("late_s", 0.0) for s in stats) / max(1e-9, sum(s.get("paced_s", 0.0) for s in stats)),
        reasons=reasons,
        predicted_cached=int(prom_sum(router_metrics, "prefix_gateway_prefix_predicted_tokens_total")),
        reported_cached=int(prom_sum(router_metrics, "prefix_gateway_prefix_reported_cached_tokens_total")),
        loadavg=os.getloadavg()[0],
    )


# -- the cases ----------------------------------------------------------------------------------------


def bounds(wl: workloads.Workload, fleet_blocks: int) -> tuple[OracleResult, OracleResult]:
    bodies = [r.body for r in wl.requests]
    return oracle(bodies), oracle(bodies, capacity_blocks=fleet_blocks)


def make_cases(args: argparse.Namespace) -> list[Case]:
    cases: list[Case] = []
    n = args.replicas
    bs, told = args.engine_block_size, CAPACITY_TOLD[args.capacity]
    for name in args.workloads:
        if name in TRACE_KV:
            continue
        if name == "zipf_tight":
            wl, kv, rate = workloads.zipf_tight(), workloads.ZIPF_TIGHT_KV_BLOCKS, workloads.ZIPF_TIGHT_RATE
        else:
            wl, rate = workloads.make(name, quick=args.quick), RATES[name]
            kv = TIGHT_KV_BLOCKS if name == "tight_cache" else args.kv_capacity_blocks
        sim = SimSettings(n, kv * 16 // bs, args.max_num_seqs, args.speed, block_size=bs, told=told)
        orc, pooled = bounds(wl, kv * n)
        cases.append(Case(name, wl.title, wl, sim, args.rate_scale * rate / args.speed, orc, pooled))
    wanted = [w for w in args.workloads if w in TRACE_KV]
    if wanted and args.trace:
        scale = traces.Scale(traces.MOONCAKE, args.token_scale)
        recs = traces.read_trace(args.trace, traces.MOONCAKE, args.trace_requests)
        base = traces.trace_workload(recs, scale, "mooncake", "Mooncake conversation trace")
        model_span = max(r.at or 0.0 for r in base.requests) / args.trace_rate
        reqs = [
            workloads.Request(r.body, r.session, r.after, (r.at or 0.0) / args.trace_rate)
            for r in base.requests
        ]
        ws = traces.working_set_blocks(recs, scale)
        speed = args.trace_seconds / model_span
        for name in wanted:
            frac = TRACE_KV[name]
            kv = max(1, int(frac * ws / n))
            wl = workloads.Workload(
                name, f"Mooncake conversation trace, fleet KV {frac:.0%} of the working set", reqs
            )
            sim = SimSettings(n, kv * 16 // bs, args.max_num_seqs, speed, args.token_scale,
                              args.trace_stream_interval, bs, told)  # fmt: skip
            orc, pooled = bounds(wl, kv * n)
            cases.append(Case(name, wl.title, wl, sim, None, orc, pooled))
    elif wanted:
        print(
            "no --trace given: the Mooncake workloads are skipped (get conversation_trace.jsonl from "
            "kvcache-ai/Mooncake, FAST25-release/traces/)",
            file=sys.stderr,
        )
    return cases


async def main_async(args: argparse.Namespace) -> tuple[list[RunResult], dict[str, Any]]:
    cases = make_cases(args)
    workdir = Path(tempfile.mkdtemp(prefix="routing-bench-"))
    results: list[RunResult] = []
    t_start = time.perf_counter()
    groups: dict[SimSettings, list[Case]] = {}
    for c in cases:
        groups.setdefault(c.sim, []).append(c)
    redis: RedisServer | None = None
    if any(FLEETS[r].layout == "pods" for r in _fleet_rows(args)):
        redis = RedisServer()
        redis.start()
    async with contextlib.AsyncExitStack() as stack:
        if redis is not None:
            stack.callback(redis.stop)
        session = await stack.enter_async_context(
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        )
        for k, (sim, group) in enumerate(groups.items()):
            sim_proc, urls = start_sim(sim.replicas, extra=sim.args(), log_path=str(workdir / f"sim{k}.log"))
            with running(sim_proc):
                for case in group:
                    routers = list(args.policies)
                    if case.name in TRACE_KV:
                        routers += _fleet_rows(args)
                    for router in routers:
                        r = await run_one(session, urls, case, router, args.seed, workdir, redis)
                        results.append(r)
                        print(
                            f"{case.name:15s} {r.policy:34s} ok={r.ok}/{r.requests} hit={r.fleet_hit:.3f} "
                            f"(pooled {r.pooled_hit:.3f}, oracle {r.oracle_hit:.3f}) ttft p50={r.ttft_p50:.3f}s "
                            f"p99={r.ttft_p99:.3f}s imb={r.prompt_imbalance:.2f}/{r.busy_imbalance:.2f} "
                            f"preempt={r.preemptions} wall={r.wall_s:.0f}s lag={r.lag:.2f} load={r.loadavg:.1f} "
                            f"reasons={r.reasons}",
                            flush=True,
                        )
    meta = {
        "command": "python -m bench.routing " + " ".join(sys.argv[1:]),
        "machine": f"{platform.machine()}, {psutil.cpu_count()} cores, Python {platform.python_version()}",
        "cases": {
            c.name: {"title": c.title, "requests": len(c.wl), "sim": asdict(c.sim), "rate": c.rate}
            for c in cases
        },
        "trace_rate": args.trace_rate,
        "token_scale": args.token_scale,
        "total_s": time.perf_counter() - t_start,
        "workdir": str(workdir),
        "quick": args.quick,
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
    }
    return results, meta


def _fleet_rows(args: argparse.Namespace) -> list[str]:
    rows = [WORKERS_ROW] if args.workers_row else []
    return rows + [f.name for f in fleet_rows(args.gateways)]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", help="Mooncake conversation_trace.jsonl (the mooncake_* workloads need it)")
    p.add_argument("--quick", action="store_true", help="smaller workloads and trace (a few minutes)")
    p.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md and plots")
    p.add_argument("--policies", nargs="+", choices=ROUTERS, default=DEFAULT_ROUTERS,
                   help="gateway policies and peers (smg, sglang-router)")  # fmt: skip
    p.add_argument(
        "--workloads", nargs="+", choices=WORKLOADS, help="default: all (quick: no mooncake_kv100)"
    )
    p.add_argument("--replicas", type=int, default=4)
    p.add_argument("--kv-capacity-blocks", type=int, default=SimSettings.kv_capacity_blocks)
    p.add_argument("--max-num-seqs", type=int, default=SimSettings.max_num_seqs)
    p.add_argument("--rate-scale", type=float, default=1.0, help="multiplies the synthetic workloads' rates")
    p.add_argument(
        "--speed", type=float, default=1.0, help="synthetic workloads: the replicas' --speed (rates / speed)"
    )
    p.add_argument("--trace-requests", type=int, help="first requests of the trace (default 4000; quick 600)")
    p.add_argument("--trace-rate", type=float, default=0.5, help="trace arrival times / this")
    p.add_argument("--trace-seconds", type=float, help="wall seconds of one trace replay (90; quick 30)")
    p.add_argument("--trace-stream-interval", type=int, default=4, help="the replicas' --stream-interval")
    p.add_argument("--token-scale", type=float, default=8.0, help="real tokens per simulated trace token")
    p.add_argument("--workers-row", action="store_true", help=f"trace runs also with --workers {WORKERS}")
    p.add_argument("--gateways", type=int, nargs="*", default=[], choices=(2, 4, 8),
                   help="trace runs also with N gateway processes sharing their placements: --workers N "
                   "on one port, and N processes on N ports with Redis (the client spreads requests)")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="arrivals and routing tie breaks")
    p.add_argument("--engine-block-size", type=int, default=16, help="the replicas' KV block (tokens)")
    p.add_argument("--capacity", choices=sorted(CAPACITY_TOLD), default="pub",
                   help="the KV capacity the gateway is told: the engine's, none, half, twice (but pub: the "
                   "replicas publish no vllm:cache_config_info)")  # fmt: skip
    p.add_argument("--routing", action="append", default=[], help="gateway routing field, KEY=VALUE")
    p.add_argument("--json", help="also write the raw results to this file")
    args = p.parse_args(argv)
    if args.workloads is None:
        args.workloads = [w for w in SYNTHETIC + list(TRACE_KV) if not (args.quick and w == "mooncake_kv100")]
    if args.trace_requests is None:
        args.trace_requests = 600 if args.quick else 4000
    if args.trace_seconds is None:
        args.trace_seconds = 30.0 if args.quick else 90.0
    ROUTING_EXTRA.update({k: yaml.safe_load(v) for k, v in (kv.split("=", 1) for kv in args.routing)})
    for name in ("trace_rate", "trace_seconds", "token_scale", "rate_scale", "speed"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
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
