"""The offline batch of issue 16 on a fleet of engine models, three ways side by side, with online traffic.

    python -m bench.batch [--quick] [--write] [--speed S] [--variants V ...]

One simulator process serves ``--replicas`` (4) engine-model replicas (``python -m sim --mode engine``: vLLM
V1's scheduler, paged KV with its prefix cache, Llama-3-8B step costs on an A100), each with a KV cache
of ``--kv-blocks`` blocks (1,536: 24,576 tokens, a fifth of the batch's templates, so the fleet's KV
holds 0.8 of them). The batch is ``bench.batch_workload``'s: 5,000 chat requests from 50 templates of
1-4k tokens (40 % behind one of 5 shared preambles), varied user inputs, shuffled. Each variant runs
on a fresh gateway process (prefix_affinity routing, the policy's defaults) with the replicas' caches
and counters reset, while an online stream (``--online-rate`` requests/s, Poisson, streamed; 16
applications' system prompts of 0.5-1.5k tokens, Zipf, through the same gateway) runs until the batch
is done:

- ``prefix``: the gateway's Batch API (the real ``openai`` client uploads the file, creates the batch,
  polls, downloads the output): lines in shared-prefix order, placed per replica, at most
  ``batch.share`` of each replica's ``batch.replica_slots`` (0.5 x 64), yielding to online queues.
- ``fifo``: arrival order, as LiteLLM and AIBrix run batches: the lines in file order through the
  gateway's own request path (its prefix-aware routing included, which LiteLLM's router does not have)
  with as many in flight as the batch may hold in total (share x slots x replicas), no backoff.
- ``run_batch``: ``vllm run-batch`` on each replica: the file cut into one contiguous shard per
  replica, each shard's lines straight to its replica in file order with up to ``--max-num-seqs`` at
  once (the rest queue in file order, as in the engine's FCFS queue); no gateway, no share.
- ``online``: the online stream alone for 120 s (about 480 requests): the TTFT to compare with.

``prefix@0.25`` runs ``prefix`` with another ``batch.share`` (the default run includes it: what a
smaller share buys the online stream, and costs the batch); ``prefix/1`` with ``batch.online_replicas:
1`` (one replica kept for the online stream while the batch runs on the others), ``prefix@1/2`` both
(the default run includes these two as well).

Reported per variant: the batch's hit rate (cached / prompt tokens of its answers) against the oracle
(one infinite prefix cache: ``bench.oracle``), its makespan (``prefix``: from ``batches.create`` to the
batch seen ``completed`` by a 0.2 s poll, validation and planning included; the others: first send to
last answer), the tokens the engines prefilled for the batch (every prefill token the engines computed,
recomputation after preemption included, minus the online requests' uncached prompt tokens),
preemptions, and the online stream's TTFT p50/p99 (the first SSE byte at the client) and prompt-cache
hit rate (what the batch left of the online prompts' cached blocks). Delays are the
engine model's times multiplied by ``--speed``; the gateway's own CPU time is not, so keep it at 1 for
numbers to publish. ``--write`` replaces the batch section of docs/benchmarks.md.
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml
from openai import AsyncOpenAI

from bench import workloads
from bench.batch_workload import URL, BatchWorkload, make_batch
from bench.oracle import oracle
from bench.procs import Proc, running, start_gateway, start_sim
from bench.report import percentile, table, write_section
from sim.config import SimConfig
from sim.engine import EngineCosts

VARIANTS = ("online", "prefix", "prefix@0.25", "prefix/1", "prefix@1/2", "fifo", "run_batch")
KINDS = ("online", "prefix", "fifo", "run_batch")


def parse_variant(name: str) -> tuple[str, float | None, int]:
    """``kind[@SHARE][/RESERVE]``: the kind, its ``batch.share`` (None: ``--share``) and its
    ``batch.online_replicas``."""
    rest, _, reserve = name.partition("/")
    kind, _, share = rest.partition("@")
    return kind, float(share) if share else None, int(reserve) if reserve else 0


def variant(name: str) -> str:
    try:
        kind, share, reserve = parse_variant(name)
    except ValueError:
        kind, share, reserve = "", None, 0
    if kind not in KINDS or (share is not None and not 0 < share <= 1) or reserve < 0:
        raise argparse.ArgumentTypeError(
            f"a variant is one of {KINDS}; prefix@SHARE for another share, prefix/N for N online replicas"
        )
    return name


SECRET = {"PREFIX_GATEWAY_SECRET": "batch-bench"}


@dataclass
class Settings:
    replicas: int = 4
    kv_blocks: int = 1536
    max_num_seqs: int = 256
    speed: float = 1.0
    share: float = 0.5
    replica_slots: int = 64
    online_rate: float = 4.0
    online_s: float = 120.0  # the stream alone: long enough for its p99 to rest on ~5 samples
    long_prefill: int = 0  # the engines' --long-prefill-token-threshold (0: none)
    seed: int = 16
    requests: int = 5000
    templates: int = 50


@dataclass
class Online:
    ttfts: list[float] = field(default_factory=list)
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class Result:
    variant: str
    lines: int = 0
    ok: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    makespan_s: float = 0.0
    prefilled_tokens: int = 0
    preemptions: int = 0
    busy_s: float = 0.0
    online: Online = field(default_factory=Online)
    plan_s: float | None = None  # prefix: create -> in_progress (validation), as the batch object says

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def online_requests(seed: int, n: int) -> list[dict[str, Any]]:
    wl = workloads.shared_system_prompts(
        seed=seed, requests=n, prompts=16, prompt_tokens=(500, 1500), question_tokens=(20, 80), max_tokens=32
    )
    return [r.body for r in wl.requests]


def _usage(body: Any) -> tuple[int, int]:
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    details = usage.get("prompt_tokens_details") or {}
    return int(usage.get("prompt_tokens") or 0), int(details.get("cached_tokens") or 0)


async def _json(session: aiohttp.ClientSession, url: str, method: str = "GET") -> Any:
    async with session.request(method, url, timeout=aiohttp.ClientTimeout(total=30)) as r:
        r.raise_for_status()
        return await r.json()


async def reset_fleet(session: aiohttp.ClientSession, urls: list[str]) -> None:
    """Wait (bounded) for the replicas to be idle, then clear their caches and counters."""
    for _ in range(600):
        stats = [await _json(session, u + "/sim/stats") for u in urls]
        if all(s["running"] == 0 and s["waiting"] == 0 for s in stats):
            break
        await asyncio.sleep(0.1)
    else:
        raise RuntimeError("replicas still busy after 60 s")
    for u in urls:
        await _json(session, u + "/sim/reset", "POST")


async def fleet_totals(session: aiohttp.ClientSession, urls: list[str]) -> dict[str, float]:
    stats = [await _json(session, u + "/sim/stats") for u in urls]
    return {k: sum(s[k] for s in stats) for k in ("prefill_tokens", "preemptions", "busy_s")}


# -- the online stream ----------------------------------------------------------------------------------


async def stream_one(session: aiohttp.ClientSession, url: str, body: dict[str, Any], out: Online) -> None:
    body = {**body, "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first: float | None = None
    buf = b""
    try:
        async with session.post(
            url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
        ) as r:
            async for chunk in r.content.iter_any():
                if first is None:
                    first = time.perf_counter()
                buf += chunk
            if r.status != 200:
                out.errors += 1
                return
    except (TimeoutError, aiohttp.ClientError):
        out.errors += 1
        return
    out.ttfts.append((first or time.perf_counter()) - start)
    for event in buf.split(b"\n\n"):
        if event.startswith(b"data: {") and b'"usage"' in event:
            prompt, cached = _usage(orjson.loads(event[6:]))
            out.prompt_tokens += prompt
            out.cached_tokens += cached


async def online_stream(
    session: aiohttp.ClientSession,
    url: str,
    bodies: list[dict[str, Any]],
    rate: float,
    seed: int,
    stop: asyncio.Event,
) -> Online:
    """Poisson arrivals at ``rate`` until ``stop`` (or the bodies run out); waits for those in flight."""
    out, rng, tasks = Online(), random.Random(seed), []
    for body in bodies:
        tasks.append(asyncio.create_task(stream_one(session, url, body, out)))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), rng.expovariate(rate))
        if stop.is_set():
            break
    await asyncio.gather(*tasks)
    return out


# -- the batch, three ways -----------------------------------------------------------------------------


async def run_prefix(gw_url: str, wl: BatchWorkload, res: Result) -> None:
    client = AsyncOpenAI(base_url=gw_url + "/v1", api_key="bench", timeout=120.0, max_retries=0)
    up = await client.files.create(file=("batch.jsonl", wl.jsonl()), purpose="batch")
    t0 = time.perf_counter()
    batch = await client.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        await asyncio.sleep(0.2)
        batch = await client.batches.retrieve(batch.id)
    res.makespan_s = time.perf_counter() - t0
    if batch.status != "completed" or batch.output_file_id is None:
        raise RuntimeError(f"the batch ended {batch.status}: {batch.errors}")
    if batch.in_progress_at is not None:
        res.plan_s = float(batch.in_progress_at - batch.created_at)
    out = await client.files.content(batch.output_file_id)
    for raw in out.text.splitlines():
        line = orjson.loads(raw)
        res.ok += 1
        prompt, cached = _usage(line["response"]["body"])
        res.prompt_tokens += prompt
        res.cached_tokens += cached
    await client.close()


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], res: Result) -> None:
    try:
        async with session.post(
            url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}
        ) as r:
            data = await r.read()
            if r.status != 200:
                return
    except (TimeoutError, aiohttp.ClientError):
        return
    res.ok += 1
    prompt, cached = _usage(orjson.loads(data))
    res.prompt_tokens += prompt
    res.cached_tokens += cached


async def run_in_order(
    session: aiohttp.ClientSession,
    shards: list[tuple[str, list[dict[str, Any]]]],
    concurrency: int,
    res: Result,
) -> None:
    """Each shard's bodies POSTed to its url in order, ``concurrency`` at once per shard."""

    async def shard(url: str, bodies: list[dict[str, Any]]) -> None:
        it = iter(bodies)

        async def worker() -> None:
            for body in it:
                await _post(session, url, body, res)

        await asyncio.gather(*(worker() for _ in range(concurrency)))

    t0 = time.perf_counter()
    await asyncio.gather(*(shard(url, bodies) for url, bodies in shards))
    res.makespan_s = time.perf_counter() - t0


# -- one variant ---------------------------------------------------------------------------------------


def gateway_policy(
    urls: list[str], s: Settings, workdir: Path, share: float, reserve: int = 0
) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": 8080, "access_log": False},
        "billing": {"ledger": {"path": str(workdir / "ledger.db")}},
        "cache": {"enabled": False},  # every line is distinct: nothing for a response cache to answer
        "models": [
            {
                "name": workloads.MODEL,
                "replicas": [
                    {"url": u, "id": f"r{i}", "kv_capacity_blocks": s.kv_blocks} for i, u in enumerate(urls)
                ],
                "routing": {"policy": "prefix_affinity", "seed": s.seed},
            }
        ],
        "tenancy": {"allow_anonymous": True},
        "batch": {
            "enabled": True,
            "dir": str(workdir / "files"),
            "sqlite_path": str(workdir / "batch.db"),
            "share": share,
            "online_replicas": reserve,
            "replica_slots": s.replica_slots,
            "poll_s": 0.2,
        },
    }


async def run_variant(
    session: aiohttp.ClientSession,
    variant: str,
    urls: list[str],
    s: Settings,
    wl: BatchWorkload,
    online: list[dict[str, Any]],
    workdir: Path,
) -> Result:
    kind, given, reserve = parse_variant(variant)
    share = s.share if given is None else given
    vdir = workdir / variant.replace("/", "_reserve")
    vdir.mkdir()
    (vdir / "policy.yaml").write_text(yaml.safe_dump(gateway_policy(urls, s, vdir, share, reserve)))
    await reset_fleet(session, urls)
    gw: Proc = await asyncio.to_thread(
        start_gateway, ["--config", str(vdir / "policy.yaml")], env=SECRET, log_path=str(vdir / "gateway.log")
    )
    res = Result(variant, lines=0 if kind == "online" else len(wl))
    try:
        await asyncio.sleep(1.5)  # the first scrape of the replicas' load lands before traffic
        stop = asyncio.Event()
        stream = asyncio.create_task(
            online_stream(
                session, gw.url + "/v1/chat/completions", online, s.online_rate / s.speed, s.seed, stop
            )
        )
        bodies = [line["body"] for line in wl.lines]
        if kind == "online":
            await asyncio.sleep(s.online_s * s.speed)
        elif kind == "prefix":
            await run_prefix(gw.url, wl, res)
        elif kind == "fifo":
            total = max(1, int(s.share * s.replica_slots)) * s.replicas
            await run_in_order(session, [(gw.url + URL, bodies)], total, res)
        else:
            per = -(-len(bodies) // s.replicas)
            shards = [(u + URL, bodies[i * per : (i + 1) * per]) for i, u in enumerate(urls)]
            await run_in_order(session, shards, s.max_num_seqs, res)
        stop.set()
        res.online = await stream
    finally:
        await asyncio.to_thread(gw.stop)
    totals = await fleet_totals(session, urls)
    online_uncached = res.online.prompt_tokens - res.online.cached_tokens
    res.prefilled_tokens = int(totals["prefill_tokens"]) - online_uncached
    res.preemptions, res.busy_s = int(totals["preemptions"]), totals["busy_s"]
    return res


# -- report --------------------------------------------------------------------------------------------


def _p99(r: Result) -> float:
    return percentile(r.online.ttfts, 99) if r.online.ttfts else float("nan")


def _p50(r: Result) -> float:
    return percentile(r.online.ttfts, 50) if r.online.ttfts else float("nan")


def _online_hit(r: Result) -> float:
    o = r.online
    return o.cached_tokens / o.prompt_tokens if o.prompt_tokens else float("nan")


def render(
    results: list[Result], s: Settings, wl: BatchWorkload, oracle_hit: float, cmd: str, elapsed_s: float
) -> str:
    by = {r.variant: r for r in results}
    base, fifo = by.get("online"), by.get("fifo")
    rows = []
    for r in results:
        o = r.online
        p50 = _p50(r)
        rows.append(
            [
                r.variant,
                f"{r.ok}/{r.lines}" if r.lines else "-",
                f"{r.hit_rate:.4f}" if r.lines else "-",
                f"{r.hit_rate / oracle_hit:.3f}" if r.lines else "-",
                f"{r.makespan_s:.1f}" if r.lines else "-",
                f"{r.makespan_s / fifo.makespan_s:.2f}" if r.lines and fifo and fifo.makespan_s else "-",
                f"{r.prefilled_tokens / 1e6:.2f}" if r.lines else "-",
                r.preemptions,
                f"{r.busy_s:.0f}",
                f"{len(o.ttfts)} ({o.errors} err)",
                f"{_online_hit(r):.3f}" if o.prompt_tokens else "-",
                f"{p50 * 1000:.0f}",
                f"{_p99(r) * 1000:.0f}",
                f"{_p99(r) / _p99(base):.2f}" if base and base.online.ttfts else "-",
            ]
        )
    headers = [
        "variant", "lines ok", "hit rate", "/ oracle", "makespan s", "/ fifo", "prefilled M tok",
        "preemptions", "engine busy s", "online requests", "online hit rate", "online TTFT p50 ms", "p99 ms",
        "p99 / online only",
    ]  # fmt: skip
    out = [
        f"```\n{cmd}\n```\n",
        f"{s.requests} lines from {s.templates} templates on {s.replicas} engine-model replicas "
        f"(KV {s.kv_blocks} blocks of 16 tokens each; max_num_seqs {s.max_num_seqs}; "
        f"long_prefill_token_threshold {s.long_prefill}); batch share {s.share} of {s.replica_slots} slots "
        "(`prefix@S`: share S; `prefix/N`: N online replicas); "
        f"fifo {int(s.share * s.replica_slots) * s.replicas} in flight; online stream "
        f"{s.online_rate} requests/s; speed {s.speed}. Oracle hit rate {oracle_hit:.4f}. {platform.machine()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {elapsed_s:.0f} s in all. `prefix` makespan "
        "runs from `batches.create` to the batch seen `completed`: validation and planning included.\n",
        table(headers, rows),
    ]
    prefixes = [r for r in results if r.variant.startswith("prefix")]
    if prefixes and fifo and base and base.online.ttfts:
        checks = []
        for r in prefixes:
            hit, span, tail = r.hit_rate / oracle_hit, r.makespan_s / fifo.makespan_s, _p99(r) / _p99(base)
            checks += [
                [
                    r.variant,
                    "hit rate >= 0.95 of the oracle",
                    f"{hit:.3f}",
                    "met" if hit >= 0.95 else "**missed**",
                ],
                [
                    r.variant,
                    "makespan <= 0.6 x arrival order",
                    f"{span:.2f}",
                    "met" if span <= 0.6 else "**missed**",
                ],
                [
                    r.variant,
                    "online p99 TTFT <= 1.2 x without a batch",
                    f"{tail:.2f} ({_p99(r) * 1000:.0f} vs {_p99(base) * 1000:.0f} ms)",
                    "met" if tail <= 1.2 else "**missed**",
                ],
            ]
        out += ["### Targets\n", table(["variant", "target", "measured", ""], checks)]
        out += ["### Findings\n", "\n".join(findings(prefixes, base, s, wl))]
    return "\n\n".join(x.rstrip() for x in out) + "\n"


def findings(prefixes: list[Result], base: Result, s: Settings, wl: BatchWorkload) -> list[str]:
    """What the engine model's constants make of the online stream while a batch runs (derived from them)."""
    c = EngineCosts()
    r = next((p for p in prefixes if p.variant == "prefix"), prefixes[0])
    slots = int(s.share * s.replica_slots)
    ctx = r.prompt_tokens / r.ok + sum(line["body"]["max_tokens"] for line in wl.lines) / len(wl) / 2
    decode = slots * (c.decode_s_per_seq + ctx * c.decode_attn_s_per_ctx_token)

    def prefill_s(n: int) -> float:
        return n * c.prefill_s_per_token + n * n / 2 * c.prefill_attn_s_per_pair

    sizes = sorted(len(t.system) // 4 for t in wl.templates)  # 4 bytes a token, as the simulator counts
    warm = [prefill_s(sizes[0]), prefill_s(sizes[-1])]
    warm_share = sum(prefill_s(n) for n in sizes) / (s.replicas * r.makespan_s)  # each template once
    lines = [
        f"- **Every step carries the batch's decodes.** A replica running its share holds {slots} batch "
        f"sequences of about {ctx:,.0f} tokens of context; each step computes one token for each: {slots} x "
        f"({c.decode_s_per_seq * 1e6:.0f} us + {ctx:,.0f} x {c.decode_attn_s_per_ctx_token * 1e9:.0f} ns) = "
        f"{decode * 1000:.1f} ms on top of the {c.step_overhead_s * 1000:.1f} ms a step costs anyway (the "
        "weights are read once per step). An online request whose prompt is cached gets its first token one "
        "step after it is admitted, so that step, and the one it waits for, take about twice as long.",
        f"- **A group's first line prefills its template in one step.** The planner sends one line per group "
        f"first and the rest once it is answered (so they hit); that line's prompt is uncached: "
        f"{sizes[0]:,}-{sizes[-1]:,} tokens, {warm[0] * 1000:.0f}-{warm[1] * 1000:.0f} ms of prefill in one "
        f"step (vLLM V1 schedules it whole within the {SimConfig().max_num_batched_tokens:,}-token budget). "
        "An online request arriving during that step, or admitted into it, waits for it; with each template "
        f"prefilled once, a replica spends about {warm_share:.1%} of the `{r.variant}` run in such steps, "
        "which is where p99 sits.",
        f"- **The batch evicts the online prompts.** With {s.kv_blocks:,} blocks a replica, the batch's "
        "working set (its group's template and the private blocks of its lines) and its churn push the "
        "online prompts' idle cached blocks out of the LRU within seconds: the online stream's hit rate is "
        f"{_online_hit(base):.3f} alone and "
        + ", ".join(f"{_online_hit(p):.3f} beside `{p.variant}`" for p in prefixes)
        + ", so more online requests pay a cold prefill.",
    ]
    for q in prefixes:
        if q is r:
            continue
        _, share, reserve = parse_variant(q.variant)
        vs = (
            f"`{q.variant}`: online p50 / p99 {_p50(q) * 1000:.0f} / {_p99(q) * 1000:.0f} ms "
            f"({_p99(q) / _p99(base):.2f} x) against {_p50(r) * 1000:.0f} / {_p99(r) * 1000:.0f} ms "
            f"({_p99(r) / _p99(base):.2f} x), online hit rate {_online_hit(q):.3f} against "
            f"{_online_hit(r):.3f}, makespan {q.makespan_s:.0f} s against {r.makespan_s:.0f} s."
        )
        if reserve:
            lines.append(
                f"- **An online reserve removes all three, and concentrates the stream.** {vs} With "
                f"`batch.online_replicas: {reserve}`"
                + (f" and `batch.share: {share}`" if share is not None else "")
                + f" the batch runs on {s.replicas - reserve} replicas and "
                f"the online requests go to the other {reserve}, which carry no batch decode, no template "
                "prefill and no batch churn through their LRU; what is left is the whole stream on fewer "
                "replicas than it had alone (more of its own prefills in each step)."
            )
        elif share is not None:
            lines.append(
                f"- **A smaller share trades the batch for the stream, but not enough.** {vs} The batch's "
                "backoff reads the replicas' queues (`vllm:num_requests_waiting`), and online requests do "
                "not queue here: they are admitted at once and slowed inside the step. The share and the "
                "backoff shrink the three effects; they do not remove them."
            )
    return lines


async def main_async(args: argparse.Namespace) -> tuple[list[Result], Settings, BatchWorkload, float]:
    s = Settings(
        speed=args.speed,
        online_rate=args.online_rate,
        kv_blocks=args.kv_blocks,
        share=args.share,
        long_prefill=args.long_prefill_token_threshold,
    )
    if args.quick:
        s.requests, s.templates, s.online_s = 600, 12, 15.0
    wl = make_batch(seed=s.seed, requests=s.requests, templates=s.templates)
    oracle_hit = oracle(line["body"] for line in wl.lines).hit_rate
    online = online_requests(s.seed, 20_000)
    sim, urls = start_sim(
        s.replicas,
        extra=[
            "--mode", "engine", "--kv-capacity-blocks", str(s.kv_blocks), "--max-num-seqs", str(s.max_num_seqs),
            "--speed", str(s.speed), "--max-model-len", "16384",
            "--long-prefill-token-threshold", str(s.long_prefill),
        ],
    )  # fmt: skip
    results = []
    with running(sim), tempfile.TemporaryDirectory(prefix="bench-batch-") as tmp:
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(
            connector=connector, timeout=aiohttp.ClientTimeout(total=900)
        ) as session:
            for variant in args.variants:
                r = await run_variant(session, variant, urls, s, wl, online, Path(tmp))
                print(f"{variant}: {json.dumps(_summary(r))}", file=sys.stderr, flush=True)
                results.append(r)
    return results, s, wl, oracle_hit


def _summary(r: Result) -> dict[str, Any]:
    o = r.online
    return {
        "ok": r.ok,
        "hit": round(r.hit_rate, 4),
        "makespan_s": round(r.makespan_s, 1),
        "prefilled": r.prefilled_tokens,
        "preemptions": r.preemptions,
        "online": len(o.ttfts),
        "online_hit": round(o.cached_tokens / o.prompt_tokens, 3) if o.prompt_tokens else None,
        "p50": round(percentile(o.ttfts, 50), 3) if o.ttfts else None,
        "p99": round(percentile(o.ttfts, 99), 3) if o.ttfts else None,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="600 lines from 12 templates (a smoke run)")
    ap.add_argument("--speed", type=float, default=1.0, help="multiplies the engine model's delays")
    ap.add_argument("--online-rate", type=float, default=4.0, help="online requests per second (at speed 1)")
    ap.add_argument("--kv-blocks", type=int, default=1536, help="KV blocks of each replica")
    ap.add_argument("--share", type=float, default=0.5, help="batch.share of each replica's 64 slots")
    ap.add_argument(
        "--long-prefill-token-threshold", type=int, default=0, help="the engines' cap of one prefill chunk"
    )
    ap.add_argument("--variants", nargs="+", type=variant, default=list(VARIANTS), help=f"of {VARIANTS}")
    ap.add_argument("--write", action="store_true", help="replace the batch section of docs/benchmarks.md")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    results, s, wl, oracle_hit = asyncio.run(main_async(args))
    cmd = "python -m bench.batch " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a != "--write"
    )
    md = render(results, s, wl, oracle_hit, cmd.strip(), time.perf_counter() - t0)
    print(md)
    if args.write:
        write_section("batch", "## Offline batches in shared-prefix order\n\n" + md)


if __name__ == "__main__":
    main()
