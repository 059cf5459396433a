"""Round-robin vs approximate vs precise prefix routing, on two real vLLM CPU replicas under eviction.

    python -m bench.real_vllm [--workloads docs14x1k docs6x3k] [--requests 300] [--repeat 2]
        [--concurrency 4] [--kv-bytes 16M] [--write]

Needs ``scripts/vllm_cpu/setup.sh`` (once). Starts two vLLM CPU replicas of the tiny model (one core
each, ``--block-size 32``, a small KV cache: ``--kv-cache-memory-bytes 16M`` = 256 blocks = 8,192
tokens each), publishing KV-cache events to the gateway's socket with replay buffers. A workload: long
shared system prompts ("documents": 14 of ~1,150 tokens, or 6 of ~2,900) asked random short questions,
by tenants that share one salt group per document, closed loop with ``--concurrency`` clients; the
documents together exceed what one replica holds and about fill both, so where a document goes decides
whether it is still cached. Each policy runs on the same seeded request sequence, after
``POST /reset_prefix_cache`` on both replicas, through a fresh in-process gateway:

- ``round_robin``;
- ``prefix_affinity`` with the approximate index, its capacity bound set to the real one (from
  ``vllm:cache_config_info``), and ``approximate_nocap`` without it (the default bound, 8,192 blocks:
  the index never forgets what the replica evicted);
- ``prefix_affinity`` with the precise index (the replicas' KV events);
- the router's picture of the replica wrong (issue 24): ``unpublished`` (no capacity in the policy and
  the replicas' metrics unreachable, ``scrape.enabled: false``, as for an engine that publishes no
  ``vllm:cache_config_info`` or a vLLM whose metrics the gateway cannot read: only the answers'
  ``cached_tokens`` tell it what is cached), ``published_x0.5`` and ``published_x2`` (the capacity
  written in the policy half and twice the truth; a written capacity wins over the scraped one);
- the peers, as processes from their side venvs (``bench.peers``): ``smg`` and ``sglang-router``, each
  with its ``cache_aware`` policy in front of the same two replicas;
- ``pooled`` (``--pooled``, after the others): one replica with the fleet's KV (``2 x --kv-bytes``)
  answering every request directly: the bound a router of two replicas approaches.

A workload: ``docs*`` spreads its questions evenly over its documents; ``zipf16x3k`` asks 16 documents of
~2.9k tokens with Zipf popularity (s = 0.9), about 2.8 of which fit a replica: the issue's tight cache over
shared prompts, on a real engine's eviction.

Measured: the replicas' own ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`` (token
hit rate, summed over both), TTFT at the client (first content byte of a streamed answer) p50 / p90,
the ``cached_tokens`` the replicas reported in usage, and requests per replica (the replicas' own
``vllm:request_success_total``, so a peer's rows count the same way as the gateway's).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families
from tokenizers import Tokenizer

from bench.peers import PEERS, PeerProc, start_peer
from bench.procs import free_port
from bench.report import percentile, table, write_section
from bench.vllm_workloads import WORKLOADS, documents, plan
from config.policy import Policy
from gateway.fleet.vllm_info import parse_cache_config
from gateway.server.app import create_app, runner_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.vllm_cpu import replicas as R

BLOCK = 32
SETUPS = (
    "round_robin",
    "approximate",
    "approximate_nocap",
    "precise",
    "unpublished",
    "published_x0.5",
    "published_x2",
    "smg",
    "sglang-router",
)
# A setup's capacity written in the policy, as a multiple of the real one; absent: none written.
CAPACITY_FACTOR = {"approximate": 1.0, "precise": 1.0, "published_x0.5": 0.5, "published_x2": 2.0}
DEFAULT_WORKLOADS = ("docs14x1k", "docs6x3k")
DEFAULT_SETUPS = ("round_robin", "approximate", "approximate_nocap", "precise")


@dataclass
class RunResult:
    name: str
    hits: float
    queries: float
    ttft: list[float]
    cached_tokens: int
    prompt_tokens: int
    per_replica: dict[str, float]
    errors: int
    wall_s: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def policy(setup: str, replicas: list[R.Replica], bind: str, capacity: int, n_docs: int) -> Policy:
    reps: list[dict[str, Any]] = [{"url": r.url, "id": r.spec.replica_id} for r in replicas]
    if setup in CAPACITY_FACTOR:  # the capacity written in the policy, right or wrong
        for rep in reps:
            rep["kv_capacity_blocks"] = max(1, round(capacity * CAPACITY_FACTOR[setup]))
    routing: dict[str, Any] = {
        "policy": "round_robin" if setup == "round_robin" else "prefix_affinity",
        "block_size": BLOCK,
        "tokenizer": {"kind": "hf", "path": str(R.MODEL_DIR / "tokenizer.json")},
        "seed": 11,
    }
    if setup == "precise":
        routing |= {
            "index": "precise",
            "engine_block_size": BLOCK,
            "kv_events": {
                "bind": bind,
                "replay": {r.spec.replica_id: r.spec.replay_endpoint for r in replicas},
                "replay_timeout_s": 5.0,
            },
        }
    # One tenant per document, all in one group per document (they share that document's salt).
    tenants = [
        {"id": f"t{i}", "api_key_sha256": [hashlib.sha256(f"key-{i}".encode()).hexdigest()], "group": f"g{i}"}
        for i in range(n_docs)
    ]
    return Policy.model_validate(
        {
            "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
            "scrape": {"enabled": setup != "unpublished", "interval_s": 0.5, "timeout_s": 2.0},
            "health": {"interval_s": 2.0, "timeout_s": 2.0},
            "timeouts": {"first_byte_s": 120.0, "total_s": 300.0},
            "cache": {"enabled": False},
            "billing": {"ledger": {"path": ":memory:"}},
            "tenancy": {"allow_anonymous": False, "tenants": tenants},
            "models": [{"name": R.SERVED_NAME, "backend": "vllm", "replicas": reps, "routing": routing}],
        }
    )


async def counters(session: aiohttp.ClientSession, url: str) -> dict[str, float]:
    async with session.get(url + "/metrics") as r:
        text = await r.text()
    out = {"hits": 0.0, "queries": 0.0, "requests": 0.0}
    names = {
        "vllm:prefix_cache_hits_total": "hits",
        "vllm:prefix_cache_queries_total": "queries",
        "vllm:request_success_total": "requests",
    }
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name in names:
                out[names[s.name]] += s.value
    return out


async def one(
    session: aiohttp.ClientSession, url: str, doc: str, question: str, key: str, res: RunResult
) -> None:
    body = {
        "model": R.SERVED_NAME,
        "messages": [{"role": "system", "content": doc}, {"role": "user", "content": question}],
        "max_tokens": 4,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first: float | None = None
    async with session.post(
        url + "/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {key}"}
    ) as r:
        if r.status != 200:
            res.errors += 1
            await r.read()
            return
        async for line in r.content:
            if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                continue
            if first is None:
                first = time.perf_counter() - t0
            obj = orjson.loads(line[6:])
            usage = obj.get("usage")
            if usage:
                res.prompt_tokens += usage["prompt_tokens"]
                res.cached_tokens += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
    if first is not None:
        res.ttft.append(first)


async def serving(session: aiohttp.ClientSession, url: str, timeout_s: float = 120.0) -> None:
    """Wait until ``url`` answers a chat request: a peer registers its workers after its ``/health``
    answers (sglang-router 0.3.2 discovers each worker's metadata first and answers 503 until then)."""
    body = {"model": R.SERVED_NAME, "messages": [{"role": "user", "content": "ready?"}], "max_tokens": 1}
    deadline = time.monotonic() + timeout_s
    while True:
        async with session.post(
            url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer key-0"}
        ) as r:
            if r.status == 200:
                return
            text = await r.text()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} not serving after {timeout_s} s: {text[:200]}")
        await asyncio.sleep(0.5)


async def run_setup(
    setup: str,
    replicas: list[R.Replica],
    bind: str,
    capacity: int,
    docs: list[str],
    requests: list[tuple[int, str]],
    concurrency: int,
) -> RunResult:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as s:
        runner: web.AppRunner | None = None
        peer: PeerProc | None = None
        if setup == "pooled":  # one replica holding the fleet's KV, asked directly
            url = replicas[0].url
        elif setup in PEERS:
            peer = await asyncio.to_thread(start_peer, PEERS[setup], [r.url for r in replicas])
            url = peer.proc.url
        else:
            pol = policy(setup, replicas, bind, capacity, len(docs))
            runner = runner_for(create_app(pol, secret=b"bench-secret"), pol)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        res = RunResult(setup, 0, 0, [], 0, 0, {}, 0, 0.0)
        queue = list(enumerate(requests))

        async def client() -> None:
            while queue:
                _, (d, q) = queue.pop(0)
                await one(s, url, docs[d], q, f"key-{d}", res)

        try:
            await serving(s, url)
            for r in replicas:  # every run starts from empty caches
                async with s.post(r.url + "/reset_prefix_cache") as resp:
                    assert resp.status == 200, await resp.text()
            before = [await counters(s, r.url) for r in replicas]
            t0 = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(concurrency)))
            res.wall_s = time.perf_counter() - t0
        finally:
            if runner is not None:
                await runner.cleanup()
            if peer is not None:
                peer.proc.stop()
        await asyncio.sleep(1.5)  # the engines publish their last step's stats
        after = [await counters(s, r.url) for r in replicas]
        res.hits = sum(a["hits"] - b["hits"] for a, b in zip(after, before, strict=True))
        res.queries = sum(a["queries"] - b["queries"] for a, b in zip(after, before, strict=True))
        for r, a, b in zip(replicas, after, before, strict=True):
            res.per_replica[r.spec.replica_id] = a["requests"] - b["requests"]
        return res


def merge(runs: list[RunResult]) -> RunResult:
    """Repeats of one setup pooled: summed counters, all TTFTs."""
    out = RunResult(runs[0].name, 0, 0, [], 0, 0, {}, 0, 0.0)
    for r in runs:
        out.hits += r.hits
        out.queries += r.queries
        out.ttft += r.ttft
        out.cached_tokens += r.cached_tokens
        out.prompt_tokens += r.prompt_tokens
        out.errors += r.errors
        out.wall_s += r.wall_s
        for k, v in r.per_replica.items():
            out.per_replica[k] = out.per_replica.get(k, 0) + v
    return out


def report_table(
    name: str, results: list[RunResult], docs: int, doc_tokens: int, capacity: int, zipf_s: float | None
) -> str:
    pooled = next((r.hit_rate for r in results if r.name == "pooled"), None)
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                f"{100 * r.hit_rate:.1f} %",
                *([f"{r.hit_rate / pooled:.3f}" if pooled else "-"] if pooled is not None else []),
                f"{1000 * percentile(r.ttft, 50):.0f}",
                f"{1000 * percentile(r.ttft, 90):.0f}",
                f"{100 * r.cached_tokens / max(1, r.prompt_tokens):.1f} %",
                " / ".join(f"{r.per_replica.get(k, 0):.0f}" for k in ("r0", "r1")),
                r.errors,
                f"{r.wall_s:.1f}",
            ]
        )
    popularity = f", Zipf popularity s = {zipf_s}" if zipf_s else ""
    head = (
        f"### Workload {name}: {docs} documents of about {doc_tokens} tokens{popularity} "
        f"({docs * doc_tokens} tokens in all, {2 * capacity * BLOCK} tokens of KV cache in the fleet)\n\n"
    )
    return head + table(
        [
            "routing",
            "hit rate",
            *(["of pooled"] if pooled is not None else []),
            "TTFT p50 ms",
            "TTFT p90 ms",
            "cached (usage)",
            "requests r0 / r1",
            "errors",
            "wall s",
        ],
        rows,
    )


def command_line(args: argparse.Namespace) -> str:
    cmd = (
        f"python -m bench.real_vllm --workloads {' '.join(args.workloads)} --requests {args.requests} "
        f"--repeat {args.repeat} --concurrency {args.concurrency} --kv-bytes {args.kv_bytes}"
    )
    if tuple(args.setups) != DEFAULT_SETUPS:
        cmd += f" --setups {' '.join(args.setups)}"
    if args.pooled:
        cmd += " --pooled"
    if args.section != "real-vllm":
        cmd += f" --section {args.section}"
    return cmd + " --write"


def report_head(args: argparse.Namespace, capacity: int) -> str:
    title = (
        "round-robin vs approximate vs precise prefix routing"
        if args.section == "real-vllm"
        else "the router's picture of the replica wrong, and the peers (issue 24)"
    )
    return (
        f"## Real vLLM: {title}\n\n"
        f"`{command_line(args)}` on {platform.machine()}, Python {platform.python_version()}, 2 cores shared "
        f"with the gateway and the clients. Two vllm-cpu 0.32.0 replicas (tiny Llama, dummy weights, one core "
        f"each, block size {BLOCK}, KV cache {args.kv_bytes} = {capacity} blocks = {capacity * BLOCK} tokens "
        f"each). Per row: {args.requests} streamed chat requests × {args.repeat} repeats (rows interleaved), "
        f"{args.concurrency} concurrent clients, the same seeded sequence (random document, short random "
        "question, one tenant group per document), prefix caches reset (`POST /reset_prefix_cache`) "
        "before each run.\n\n"
        "Hit rate: the replicas' own `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` "
        "(tokens, both replicas, all repeats). TTFT: first content chunk at the client, pooled over the "
        "repeats. Cached: `usage.prompt_tokens_details.cached_tokens` / prompt tokens. Requests: the "
        "replicas' `vllm:request_success_total`. `approximate`: the index bounded by each replica's real "
        "capacity, written in the policy; `approximate_nocap`: none written, the gateway reads it from the "
        "scraped `vllm:cache_config_info`; `unpublished`: none written and no scrape (only `cached_tokens` "
        "tells the router what is cached); `published_x0.5` / `published_x2`: the capacity written half / "
        "twice the truth; `precise`: KV events; `smg` / `sglang-router`: the peers' `cache_aware` "
        "processes in front of the same replicas; `pooled`: one replica with both replicas' KV, asked "
        "directly (after the others; TTFT not comparable: one core serves every request).\n\n"
    )


def pooled_kv(kv_bytes: str) -> str:
    """Twice ``--kv-bytes`` (``16M`` -> ``32M``)."""
    digits = kv_bytes.rstrip("KMGkmg")
    return f"{2 * int(digits)}{kv_bytes[len(digits) :]}"


async def amain(args: argparse.Namespace) -> int:
    bind = f"tcp://127.0.0.1:{free_port()}"
    specs = R.fleet_specs(
        2, bind, free_port=free_port, kv_bytes=args.kv_bytes, block_size=BLOCK, dev_mode=True
    )
    tok = Tokenizer.from_file(str(R.MODEL_DIR / "tokenizer.json"))
    plans = {}
    for wname in args.workloads:
        n_docs, words, zipf_s = WORKLOADS[wname]
        docs = documents(n_docs, args.seed, words)
        plans[wname] = (docs, plan(args.requests, n_docs, args.seed, zipf_s))
    runs: dict[str, dict[str, list[RunResult]]] = {w: {k: [] for k in args.setups} for w in args.workloads}

    async def fleet(specs: list[R.ReplicaSpec], setups: list[str]) -> int:
        """Start ``specs``, run ``setups`` on every workload, stop them; the replicas' KV blocks."""
        replicas = [R.start(s) for s in specs]
        try:
            R.wait_ready(replicas)
            async with aiohttp.ClientSession() as s, s.get(replicas[0].url + "/metrics") as resp:
                info = parse_cache_config(await resp.text())
            assert info is not None and info.block_size == BLOCK, info
            for wname, (docs, requests) in plans.items():
                for rep in range(args.repeat):
                    for setup in setups:
                        res = await run_setup(
                            setup, replicas, bind, info.num_blocks, docs, requests, args.concurrency
                        )
                        runs[wname].setdefault(setup, []).append(res)
                        print(
                            f"{wname} #{rep} {setup:18s} hit {100 * res.hit_rate:5.1f} %"
                            f"  ttft p50 {1000 * percentile(res.ttft, 50):5.0f} ms"
                            f"  p90 {1000 * percentile(res.ttft, 90):5.0f} ms  {res.per_replica}"
                            f"  errors {res.errors}",
                            flush=True,
                        )
            return info.num_blocks
        finally:
            for r in replicas:
                r.stop()

    capacity = await fleet(specs, list(args.setups))
    if args.pooled:
        one = R.fleet_specs(
            1, free_port=free_port, kv_bytes=pooled_kv(args.kv_bytes), block_size=BLOCK, dev_mode=True
        )
        await fleet(one, ["pooled"])
    sections = [report_head(args, capacity)]
    for wname, (docs, _) in plans.items():
        doc_tokens = round(sum(len(tok.encode(d).ids) for d in docs) / len(docs))
        merged = [merge(v) for v in runs[wname].values() if v]
        sections.append(report_table(wname, merged, len(docs), doc_tokens, capacity, WORKLOADS[wname][2]))
    md = "\n\n".join(sections)
    print(md)
    if args.write:
        write_section(args.section, md)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(DEFAULT_WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--requests", type=int, default=300, help="requests per run")
    ap.add_argument("--repeat", type=int, default=2, help="runs per (workload, setup), interleaved")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--kv-bytes", default="16M")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--setups", nargs="+", default=list(DEFAULT_SETUPS), choices=SETUPS)
    ap.add_argument("--pooled", action="store_true", help="then one replica of the fleet's KV: the bound")
    ap.add_argument("--section", default="real-vllm", help="the docs/benchmarks.md section --write replaces")
    ap.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md")
    args = ap.parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
