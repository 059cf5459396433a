"""Micro-benchmark of one routing decision: render + tokenize + hash + match + pick (+ index insert).

An 8k-token chat prompt (approx tokenizer: ~32 KB of text) over 16 replicas whose indexes are warm with
other conversations; each measured request shares its system prompt and history with an earlier one.
Not a test: prints the median and p99 in microseconds.

    python bench/route_micro.py [--replicas 16] [--tokens 8192] [--iters 2000] [--policy P] [--cold]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from config.routing import RoutingConfig
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest


def _text(rng: random.Random, chars: int) -> str:
    words = ["alpha", "beta", "gamma", "delta", "kernel", "cache", "token", "prefix", "route", "replica"]
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(words)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


def make_requests(rng: random.Random, conversations: int, tokens: int) -> list[RouteRequest]:
    """One request per conversation: a shared system prompt, a per-conversation history, a question."""
    system = _text(rng, 4 * 1024)
    out = []
    for c in range(conversations):
        history = _text(rng, 4 * tokens - len(system) - 200)
        body = {
            "model": "m",
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": f"conversation {c}: {history}"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": f"question {rng.random()}"},
            ],
        }
        out.append(RouteRequest("chat", "m", body, tenant_salt="tenant-a"))
    return out


def measure(replicas_n: int, tokens: int, iters: int, policy: str, cold: bool) -> dict[str, object]:
    """Median and p99 (µs) of ``iters`` decisions, with warm indexes."""
    rng = random.Random(1)
    cfg = RoutingConfig(policy=policy, seed=1)
    replicas = [
        ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}", kv_capacity_blocks=30000)
        for i in range(replicas_n)
    ]
    router = PoolRouter(replicas, cfg)
    warm = make_requests(rng, 200, tokens)
    # Warm every index with 200 conversations, 32 in flight at a time so that load spreads them.
    window: list = []
    for req in warm:
        window.append(router.route(req))
        if len(window) >= 32:
            router.release(window.pop(0))
    for d in window:
        router.release(d)
    # The measured requests: follow-up turns of warm conversations (a long shared prefix).
    follow = []
    for req in warm:
        msgs = [
            *req.body["messages"],
            {"role": "assistant", "content": "sure"},
            {"role": "user", "content": "more"},
        ]
        follow.append(RouteRequest("chat", "m", {**req.body, "messages": msgs}, tenant_salt="tenant-a"))

    if cold:  # a unique first message: nothing matches, every decision is a CHWBL placement
        follow = [
            RouteRequest(
                "chat",
                "m",
                {**req.body, "messages": [{"role": "user", "content": f"cold {i}"}, *req.body["messages"]]},
                tenant_salt="tenant-a",
            )
            for i, req in enumerate(follow * (iters // len(follow) + 1))
        ]

    samples: list[float] = []
    reasons: dict[str, int] = {}
    matched = 0
    for i in range(iters):
        req = follow[i % len(follow)]
        t0 = time.perf_counter_ns()
        d = router.route(req)
        t1 = time.perf_counter_ns()
        router.release(d)
        samples.append((t1 - t0) / 1000)
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
        matched += d.matched_tokens
    samples.sort()
    return {
        "policy": policy,
        "cold": cold,
        "prompt_tokens": d.prompt_tokens,
        "blocks": len(d.block_hashes),
        "median": statistics.median(samples),
        "p99": samples[int(0.99 * (len(samples) - 1))],
        "reasons": reasons,
        "matched": matched / iters,
        "entries": router.stats().index.entries,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--policy", default="prefix_affinity")
    ap.add_argument("--cold", action="store_true", help="measure never-seen prompts (no match anywhere)")
    ap.add_argument(
        "--write",
        action="store_true",
        help="measure warm and cold prefix_affinity, chwbl and round_robin; write docs/benchmarks.md",
    )
    args = ap.parse_args()
    variants = (
        [("prefix_affinity", False), ("prefix_affinity", True), ("chwbl", False), ("round_robin", False)]
        if args.write
        else [(args.policy, args.cold)]
    )
    rows = []
    for policy, cold in variants:
        r = measure(args.replicas, args.tokens, args.iters, policy, cold)
        print(
            f"policy={policy} replicas={args.replicas} prompt_tokens={r['prompt_tokens']} "
            f"hashed_blocks={r['blocks']} iters={args.iters} cold={cold}"
        )
        print(f"route() median {r['median']:.1f} us  p99 {r['p99']:.1f} us  (target median <= 100 us)")
        print(f"reasons {r['reasons']}  mean matched tokens {r['matched']:.0f}")
        print(f"index {r['entries']} entries")
        rows.append(
            [
                policy,
                "never-seen prompt" if cold else "follow-up turn",
                r["prompt_tokens"],
                r["blocks"],
                f"{r['median']:.1f}",
                f"{r['p99']:.1f}",
                f"{r['matched']:.0f}",
            ]
        )
    if args.write:
        from bench.report import table, write_section

        cmd = "python bench/route_micro.py " + " ".join(sys.argv[1:])
        md = (
            "## One routing decision\n\n"
            f"Command: `{cmd.strip()}`. Render + tokenize (approx) + hash + match + pick + speculative "
            f"index insert, {args.replicas} replicas with warm indexes (200 conversations), {args.iters} "
            "decisions each; target: median <= 100 µs for prefix_affinity on an 8k-token prompt.\n\n"
            + table(
                [
                    "policy",
                    "request",
                    "prompt tokens",
                    "hashed blocks",
                    "median µs",
                    "p99 µs",
                    "mean matched tokens",
                ],
                rows,
            )
        )
        write_section("route-micro", md)


if __name__ == "__main__":
    main()
