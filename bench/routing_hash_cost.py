"""CPU of the router's hashing path per request, by prompt length and ``max_prefix_tokens``.

    python -m bench.routing_hash_cost [--chars 2000 8000 32000 128000 512000] [--limits 4096 16384 65536]
        [--iters N] [--write]

For each prompt length (a chat request: a system prompt and one user message of that many characters,
approx tokenizer: 4 bytes a token) and each hash bound, the CPU (``time.process_time``) of one routing
decision's prefix work, in two parts: **hash** (render the pieces, tokenize, chain the block hashes:
``PoolRouter._prefix``) and **route** (the whole ``route`` + ``release`` on 4 replicas whose indexes
hold earlier requests, so match, pick and insert of those hashes are counted too). Issue 24's long-prompt
question: the Mooncake conversation trace has prompts up to 15,399 tokens at 1/8 scale (about 120k at
full scale), and the bound decides both what a match can see and what each request costs (issue 30's
per-request overhead).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from bench.report import table, write_section
from config.routing import RoutingConfig
from router.policies.base import PickContext
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest

WORDS = ["alpha", "beta", "gamma", "delta", "kernel", "cache", "token", "prefix", "route", "replica"]


def text(rng: random.Random, chars: int) -> str:
    out: list[str] = []
    n = 0
    while n < chars:
        w = rng.choice(WORDS)
        out.append(w)
        n += len(w) + 1
    return " ".join(out)[:chars]


def request(rng: random.Random, chars: int, k: int) -> RouteRequest:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": text(rng, 1000)},
            {"role": "user", "content": f"conversation {k}: " + text(rng, chars)},
        ],
    }
    return RouteRequest("chat", "m", body, tenant_salt="t")


def measure(chars: int, limit: int, iters: int) -> tuple[float, float, int]:
    """(hash µs, route µs, blocks hashed) per request, CPU time, median of 3 passes."""
    rng = random.Random(chars)
    cfg = RoutingConfig(policy="prefix_affinity", seed=1, max_prefix_tokens=limit)
    replicas = [ReplicaState(id=f"r{i}", url="", kv_capacity_blocks=1 << 20) for i in range(4)]
    router = PoolRouter(replicas, cfg)
    reqs = [request(rng, chars, k) for k in range(8)]
    for r in reqs:  # warm indexes: each measured request matches an earlier one of its own
        router.release(router.route(r))
    hashes: list[float] = []
    routes: list[float] = []
    n = 0
    for _ in range(3):
        t0 = time.process_time()
        for i in range(iters):
            r = reqs[i % len(reqs)]
            n = len(router._prefix(r, PickContext(request=r, candidates=replicas, block_size=cfg.block_size)))
        hashes.append((time.process_time() - t0) / iters * 1e6)
        t0 = time.process_time()
        for i in range(iters):
            router.release(router.route(reqs[i % len(reqs)]))
        routes.append((time.process_time() - t0) / iters * 1e6)
    return sorted(hashes)[1], sorted(routes)[1], n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chars", type=int, nargs="+", default=[2000, 8000, 32000, 128000, 512000])
    p.add_argument("--limits", type=int, nargs="+", default=[4096, 16384, 65536])
    p.add_argument("--iters", type=int, default=0, help="requests a pass (0: by length, about 0.2 s a pass)")
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    rows = []
    for chars in args.chars:
        row = [f"{chars:,}"]
        for limit in args.limits:
            iters = args.iters or max(20, 4_000_000 // (chars + 4000))
            h, r, n = measure(chars, limit, iters)
            row += [f"{n}", f"{h:.0f}", f"{r:.0f}"]
            print(
                f"chars={chars} max_prefix_tokens={limit} blocks={n} hash={h:.0f}us route={r:.0f}us",
                flush=True,
            )
        rows.append(row)
    headers = ["user message chars"]
    for limit in args.limits:
        headers += [f"{limit}: blocks", f"{limit}: hash µs", f"{limit}: route µs"]
    md = "\n".join([
        "### Hashing cost per request by max_prefix_tokens", "",
        f"Command: `python -m bench.routing_hash_cost {' '.join(sys.argv[1:] if argv is None else argv)}` "
        "(CPU µs per request, median of 3 passes; approx tokenizer).", "", table(headers, rows),
    ])  # fmt: skip
    print(md)
    if args.write:
        write_section("routing-hash-cost", md)


if __name__ == "__main__":
    main()
