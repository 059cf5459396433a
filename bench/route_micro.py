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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--replicas", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=8192)
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--policy", default="prefix_affinity")
    ap.add_argument("--cold", action="store_true", help="measure never-seen prompts (no match anywhere)")
    args = ap.parse_args()

    rng = random.Random(1)
    cfg = RoutingConfig(policy=args.policy, seed=1)
    replicas = [
        ReplicaState(id=f"r{i}", url=f"http://127.0.0.1:{9000 + i}", kv_capacity_blocks=30000)
        for i in range(args.replicas)
    ]
    router = PoolRouter(replicas, cfg)
    warm = make_requests(rng, 200, args.tokens)
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

    if args.cold:  # a unique first message: nothing matches, every decision is a CHWBL placement
        follow = [
            RouteRequest(
                "chat",
                "m",
                {**req.body, "messages": [{"role": "user", "content": f"cold {i}"}, *req.body["messages"]]},
                tenant_salt="tenant-a",
            )
            for i, req in enumerate(follow * (args.iters // len(follow) + 1))
        ]

    samples: list[float] = []
    reasons: dict[str, int] = {}
    matched = 0
    for i in range(args.iters):
        req = follow[i % len(follow)]
        t0 = time.perf_counter_ns()
        d = router.route(req)
        t1 = time.perf_counter_ns()
        router.release(d)
        samples.append((t1 - t0) / 1000)
        reasons[d.reason] = reasons.get(d.reason, 0) + 1
        matched += d.matched_tokens
    samples.sort()
    median = statistics.median(samples)
    p99 = samples[int(0.99 * (len(samples) - 1))]
    print(
        f"policy={args.policy} replicas={args.replicas} prompt_tokens={d.prompt_tokens} "
        f"hashed_blocks={len(d.block_hashes)} iters={args.iters} cold={args.cold}"
    )
    print(f"route() median {median:.1f} us  p99 {p99:.1f} us  (target median <= 100 us)")
    print(f"reasons {reasons}  mean matched tokens {matched / args.iters:.0f}")
    print(f"index {router.stats().index.entries} entries")


if __name__ == "__main__":
    main()
