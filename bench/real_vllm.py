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
- ``prefix_affinity`` with the precise index (the replicas' KV events).

Measured: the replicas' own ``vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total`` (token
hit rate, summed over both), TTFT at the client (first content byte of a streamed answer) p50 / p90,
the ``cached_tokens`` the replicas reported in usage, and requests per replica.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import platform
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from bench.procs import free_port
from bench.report import percentile, table, write_section
from config.policy import Policy
from gateway.fleet.vllm_info import parse_cache_config
from gateway.server.app import create_app, runner_for

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from scripts.vllm_cpu import replicas as R

BLOCK = 32
SETUPS = ("round_robin", "approximate", "approximate_nocap", "precise")
# name -> (documents, words per document): ~1.2k-token documents that about fill the fleet's cache, and
# ~2.9k-token ones (prefill costs more) that exceed it.
WORKLOADS = {"docs14x1k": (14, 400), "docs6x3k": (6, 1000)}


@dataclass
class RunResult:
    name: str
    hits: float
    queries: float
    ttft: list[float]
    cached_tokens: int
    prompt_tokens: int
    per_replica: dict[str, int]
    errors: int
    wall_s: float

    @property
    def hit_rate(self) -> float:
        return self.hits / self.queries if self.queries else 0.0


def documents(n: int, seed: int, words: int = 400) -> list[str]:
    rng = random.Random(seed)
    return [f"Document {i}. " + " ".join(rng.choice(R.WORDS) for _ in range(words)) for i in range(n)]


def plan(n_requests: int, n_docs: int, seed: int) -> list[tuple[int, str]]:
    rng = random.Random(seed + 1)
    return [
        (rng.randrange(n_docs), f"question {k}: " + " ".join(rng.choices(R.WORDS, k=6)))
        for k in range(n_requests)
    ]


def policy(setup: str, replicas: list[R.Replica], bind: str, capacity: int, n_docs: int) -> Policy:
    reps = [{"url": r.url, "id": r.spec.replica_id} for r in replicas]
    if setup != "approximate_nocap":  # the others know each replica's real KV capacity
        for rep in reps:
            rep["kv_capacity_blocks"] = capacity
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
            "scrape": {"enabled": True, "interval_s": 0.5, "timeout_s": 2.0},
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
    out = {"hits": 0.0, "queries": 0.0}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "vllm:prefix_cache_hits_total":
                out["hits"] += s.value
            elif s.name == "vllm:prefix_cache_queries_total":
                out["queries"] += s.value
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
        rid = r.headers.get("x-gateway-replica", "?")
        res.per_replica[rid] = res.per_replica.get(rid, 0) + 1
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
        for r in replicas:  # every run starts from empty caches
            async with s.post(r.url + "/reset_prefix_cache") as resp:
                assert resp.status == 200, await resp.text()
        pol = policy(setup, replicas, bind, capacity, len(docs))
        app = create_app(pol, secret=b"bench-secret")
        runner = runner_for(app, pol)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        before = [await counters(s, r.url) for r in replicas]
        res = RunResult(setup, 0, 0, [], 0, 0, {}, 0, 0.0)
        queue = list(enumerate(requests))
        t0 = time.perf_counter()

        async def client() -> None:
            while queue:
                _, (d, q) = queue.pop(0)
                await one(s, url, docs[d], q, f"key-{d}", res)

        try:
            await asyncio.gather(*(client() for _ in range(concurrency)))
        finally:
            res.wall_s = time.perf_counter() - t0
            await runner.cleanup()
        await asyncio.sleep(1.5)  # the engines publish their last step's stats
        after = [await counters(s, r.url) for r in replicas]
        res.hits = sum(a["hits"] - b["hits"] for a, b in zip(after, before, strict=True))
        res.queries = sum(a["queries"] - b["queries"] for a, b in zip(after, before, strict=True))
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


def report_table(name: str, results: list[RunResult], docs: int, doc_tokens: int, capacity: int) -> str:
    rows = []
    for r in results:
        rows.append(
            [
                r.name,
                f"{100 * r.hit_rate:.1f} %",
                f"{1000 * percentile(r.ttft, 50):.0f}",
                f"{1000 * percentile(r.ttft, 90):.0f}",
                f"{100 * r.cached_tokens / max(1, r.prompt_tokens):.1f} %",
                " / ".join(f"{r.per_replica.get(k, 0)}" for k in ("r0", "r1")),
                r.errors,
                f"{r.wall_s:.1f}",
            ]
        )
    head = (
        f"### Workload {name}: {docs} documents of about {doc_tokens} tokens "
        f"({docs * doc_tokens} tokens in all, {2 * capacity * BLOCK} tokens of KV cache in the fleet)\n\n"
    )
    return head + table(
        [
            "routing",
            "hit rate",
            "TTFT p50 ms",
            "TTFT p90 ms",
            "cached (usage)",
            "requests r0 / r1",
            "errors",
            "wall s",
        ],
        rows,
    )


def report_head(args: argparse.Namespace, capacity: int) -> str:
    cmd = (
        f"python -m bench.real_vllm --workloads {' '.join(args.workloads)} --requests {args.requests} "
        f"--repeat {args.repeat} --concurrency {args.concurrency} --kv-bytes {args.kv_bytes} --write"
    )
    return (
        "## Real vLLM: round-robin vs approximate vs precise prefix routing\n\n"
        f"`{cmd}` on {platform.machine()}, Python {platform.python_version()}, 2 cores shared with the "
        f"gateway and the clients. Two vllm-cpu 0.32.0 replicas (tiny Llama, dummy weights, one core each, "
        f"block size {BLOCK}, KV cache {args.kv_bytes} = {capacity} blocks = {capacity * BLOCK} tokens each). "
        f"Per row: {args.requests} streamed chat requests × {args.repeat} repeats (rows interleaved), "
        f"{args.concurrency} concurrent clients, the same seeded sequence (random document, short random "
        "question, one tenant group per document), prefix caches reset (`POST /reset_prefix_cache`) "
        "before each run.\n\n"
        "Hit rate: the replicas' own `vllm:prefix_cache_hits_total / vllm:prefix_cache_queries_total` "
        "(tokens, both replicas, all repeats). TTFT: first content chunk at the client, pooled over the "
        "repeats. Cached: `usage.prompt_tokens_details.cached_tokens` / prompt tokens. `approximate`: the "
        "index bounded by each replica's real capacity; `approximate_nocap`: the default bound (8,192 "
        "blocks), so it never forgets what a replica evicted; `precise`: KV events.\n\n"
    )


async def amain(args: argparse.Namespace) -> int:
    bind = f"tcp://127.0.0.1:{free_port()}"
    specs = R.fleet_specs(
        2, bind, free_port=free_port, kv_bytes=args.kv_bytes, block_size=BLOCK, dev_mode=True
    )
    replicas = [R.start(s) for s in specs]
    try:
        R.wait_ready(replicas)
        async with aiohttp.ClientSession() as s, s.get(replicas[0].url + "/metrics") as resp:
            info = parse_cache_config(await resp.text())
        assert info is not None and info.block_size == BLOCK, info
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(R.MODEL_DIR / "tokenizer.json"))
        sections = [report_head(args, info.num_blocks)]
        for wname in args.workloads:
            n_docs, words = WORKLOADS[wname]
            docs = documents(n_docs, args.seed, words)
            doc_tokens = round(sum(len(tok.encode(d).ids) for d in docs) / len(docs))
            requests = plan(args.requests, n_docs, args.seed)
            runs: dict[str, list[RunResult]] = {k: [] for k in args.setups}
            for rep in range(args.repeat):
                for setup in args.setups:
                    res = await run_setup(
                        setup, replicas, bind, info.num_blocks, docs, requests, args.concurrency
                    )
                    runs[setup].append(res)
                    print(
                        f"{wname} #{rep} {setup:18s} hit {100 * res.hit_rate:5.1f} %"
                        f"  ttft p50 {1000 * percentile(res.ttft, 50):5.0f} ms"
                        f"  p90 {1000 * percentile(res.ttft, 90):5.0f} ms  {res.per_replica}  errors {res.errors}",
                        flush=True,
                    )
            merged = [merge(runs[k]) for k in args.setups]
            sections.append(report_table(wname, merged, n_docs, doc_tokens, info.num_blocks))
        md = "\n\n".join(sections)
        print(md)
        if args.write:
            write_section("real-vllm", md)
    finally:
        for r in replicas:
            r.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    ap.add_argument("--requests", type=int, default=300, help="requests per run")
    ap.add_argument("--repeat", type=int, default=2, help="runs per (workload, setup), interleaved")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--kv-bytes", default="16M")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--setups", nargs="+", default=list(SETUPS), choices=SETUPS)
    ap.add_argument("--write", action="store_true", help="write the tables into docs/benchmarks.md")
    args = ap.parse_args(argv)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
