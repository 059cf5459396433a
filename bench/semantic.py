"""Semantic cache: paraphrase hit rate, false-hit rate and cost per request, per mode, side by side.

    python -m bench.semantic [--data bench/data/semantic_eval.jsonl] [--policy config/examples/semantic-ecommerce.yaml]

For every labelled pair of the evaluation set, a fresh cache stores the answer to the ``cached``
question and is then asked the ``probe``: a hit on a ``same`` pair is a paraphrase hit, a hit on a
``different`` pair a false hit. Modes, all through ``cache.semantic.layer.SemanticLayer``:

* ``fingerprint``: the example policy as shipped;
* ``guarded@T``: embedding mode (admission rules and guard features on) at threshold T;
* ``cosine@T``: plain cosine at T, the way GPTCache and LiteLLM do it (no admission, no guards).

Embeddings come from all-MiniLM-L6-v2 served by the simulator's ``/v1/embeddings`` on 127.0.0.1,
called through the gateway's own embedder client (``cache.semantic.embedder``). Every distinct text is
embedded once (its latency is reported as the embedder's cost); the modes then reuse those vectors.
A last part replays business events against racing fills, in memory and in a real Redis, and counts
stale serves with its own oracle (must be 0).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench.redis_server import RedisServer
from cache.semantic.embedder import Embedder
from cache.semantic.layer import SemanticLayer
from cache.semantic.route import SemanticRoute
from cache.semantic.store import MemorySemanticStore
from cache.semantic.store_redis import RedisSemanticStore
from cache.store_redis import connect
from config import load_policy
from config.semantic import AdmissionConfig, EmbeddingConfig, GuardConfig, SemanticConfig
from sim import SimConfig, start_replicas

MODEL = "sim-llama"
EMBED_MODEL = "all-minilm-l6-v2"
SALT = "bench-tenant-salt"
SECRET = b"bench-tag-secret"
NO_GUARDS = GuardConfig(numbers=False, negations=False, entities=False, slots=False)


def chat(text: str) -> dict[str, Any]:
    return {"model": MODEL, "temperature": 0, "messages": [{"role": "user", "content": text}]}


def answer(text: str) -> dict[str, Any]:
    return {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


class MemoEmbedder(Embedder):
    """The real client, each distinct text asked once; ``calls_s`` the latency of every real call."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.memo: dict[str, list[float]] = {}
        self.calls_s: list[float] = []

    async def embed(self, text: str) -> list[float]:
        if text not in self.memo:
            t0 = time.perf_counter()
            self.memo[text] = await super().embed(text)
            self.calls_s.append(time.perf_counter() - t0)
        return self.memo[text]


def embedding_config(base: SemanticConfig, threshold: float, guarded: bool) -> SemanticConfig:
    emb = EmbeddingConfig(url="http://127.0.0.1:1", model="minilm", threshold=threshold, timeout_s=30.0)
    update: dict[str, Any] = {"mode": "embedding", "embedding": emb}
    if not guarded:
        update["admission"] = AdmissionConfig(rules=[], otherwise="allow")
        update["embedding"] = emb.model_copy(update={"guards": NO_GUARDS})
    return base.model_copy(update=update)


async def run_mode(
    cfg: SemanticConfig, pairs: list[dict[str, Any]], embedder: Embedder | None
) -> dict[str, Any]:
    route = SemanticRoute(cfg, SECRET)
    hits: Counter[tuple[str, str, str]] = Counter()  # (split, label, kind)
    totals: Counter[tuple[str, str, str]] = Counter()
    reasons: Counter[str] = Counter()
    lost: Counter[str] = Counter()  # why a paraphrase missed
    cost_s: list[float] = []
    false_hits: list[str] = []
    for p in pairs:
        layer = SemanticLayer({MODEL: route}, MemorySemanticStore(), {MODEL: embedder} if embedder else {})
        first = await layer.lookup(MODEL, route.analyse("chat", chat(p["cached"])), SALT)
        if first.outcome == "miss":
            await layer.fill(first, answer(p["cached"]))
        t0 = time.perf_counter()
        analysis = layer.analyse(MODEL, "chat", chat(p["probe"]))
        assert analysis is not None
        found = await layer.lookup(MODEL, analysis, SALT)
        cost_s.append(time.perf_counter() - t0)
        k = (p["split"], p["label"], p["kind"])
        totals[k] += 1
        if found.outcome == "hit":
            hits[k] += 1
            if p["label"] == "different":
                false_hits.append(p["id"])
        else:
            reasons[found.reason] += 1
            if p["label"] == "same":
                why = found.reason if found.outcome == "bypass" else "no_candidate_above_threshold"
                if found.vetoes:
                    why = f"veto_{found.vetoes[0]}"
                elif found.outcome == "miss" and found.mode == "fingerprint":
                    why = "other_key"
                lost[why] += 1
    return {
        "hits": hits, "totals": totals, "cost_s": cost_s, "false_hits": false_hits, "reasons": reasons,
        "lost": lost,
    }  # fmt: skip


def rate(hits: Counter[Any], totals: Counter[Any], pred: Any) -> tuple[int, int]:
    h = sum(v for k, v in hits.items() if pred(k))
    t = sum(v for k, v in totals.items() if pred(k))
    return h, t


def pct(h: int, t: int) -> str:
    return f"{100 * h / t:5.1f} % ({h}/{t})" if t else "-"


async def stale_replay(store: Any, rounds: int, seed: int = 7) -> dict[str, int]:
    """Fills racing ProductSpecUpdated events; an independent oracle counts stale serves."""
    policy = load_policy(Path("config/examples/semantic-ecommerce.yaml"), env={})
    route = SemanticRoute(policy.cache.semantic, SECRET)
    layer = SemanticLayer({MODEL: route}, store)
    rng = random.Random(seed)
    products = ["iPhone 15", "Galaxy S24", "Pixel 8", "Mate 60", "Xiaomi 14"]
    attrs = {"battery life": "battery", "screen size": "screen", "weight": "weight"}
    events_at: dict[tuple[str, str], int] = defaultdict(int)  # oracle: (product, field) -> event count
    stale_served = served = removed = refused_fills = 0
    for _ in range(rounds):
        prod, (attr, field) = rng.choice(products), rng.choice(list(attrs.items()))
        if rng.random() < 0.05:  # a spec changes between requests: its entries must go
            res = await layer.apply_event(
                {"type": "ProductSpecUpdated", "product_id": route.canonical_value("product", prod),
                 "changed_fields": [field]}
            )  # fmt: skip
            removed += res.removed
            events_at[(prod, field)] += 1
        q = f"What is the {attr} of the {prod}?"
        analysis = route.analyse("chat", chat(q))
        found = await layer.lookup(MODEL, analysis, SALT)
        if found.outcome == "hit":
            served += 1
            assert found.entry is not None
            if found.entry.response["basis"] != events_at[(prod, field)]:
                stale_served += 1
            continue
        basis = events_at[(prod, field)]  # what the "replica" saw when it started answering
        if rng.random() < 0.3:  # an event lands while this answer is being generated
            pid = route.canonical_value("product", prod)
            res = await layer.apply_event(
                {"type": "ProductSpecUpdated", "product_id": pid, "changed_fields": [field]}
            )
            removed += res.removed
            events_at[(prod, field)] += 1
        if await layer.fill(found, {**answer(q), "basis": basis}) == "stale_basis":
            refused_fills += 1
    return {
        "served": served,
        "stale_served": stale_served,
        "events_removed": removed,
        "fills_refused_stale_basis": refused_fills,
        "entries_refused_at_read": store.stats.stale,
    }


async def main_async(args: argparse.Namespace) -> None:
    pairs = [orjson.loads(line) for line in Path(args.data).read_text(encoding="utf-8").splitlines() if line]
    base = load_policy(Path(args.policy), env={}).cache.semantic
    fleet = await start_replicas(
        [SimConfig(models=(MODEL, EMBED_MODEL), speed=0, embedding_model="minilm")], base_port=0
    )
    results: dict[str, dict[str, Any]] = {}
    try:
        async with aiohttp.ClientSession() as session:
            embedder = MemoEmbedder(session, fleet.urls[0], EMBED_MODEL, timeout_s=30.0)
            texts = sorted({t for p in pairs for t in (p["cached"], p["probe"])})
            for t in texts:
                await embedder.embed(t)
            results["fingerprint"] = await run_mode(base, pairs, None)
            for t in args.guarded:
                results[f"guarded@{t}"] = await run_mode(embedding_config(base, t, True), pairs, embedder)
            for t in args.cosine:
                results[f"cosine@{t}"] = await run_mode(embedding_config(base, t, False), pairs, embedder)
    finally:
        await fleet.stop()
    emb_us = statistics.median(embedder.calls_s) * 1e6
    print(
        f"pairs: {len(pairs)} ({sum(p['label'] == 'same' for p in pairs)} paraphrase, "
        f"{sum(p['label'] == 'different' for p in pairs)} near miss); embedder (MiniLM via /v1/embeddings, "
        f"gateway client): median {emb_us:,.0f} µs per text over {len(embedder.calls_s)} texts"
    )
    header = "| mode | paraphrase hits (test) | false hits (test) | paraphrase hits (all) | false hits (all) | µs/request (p50, gateway side) |"
    print(header)
    print("|---|---|---|---|---|---|")
    for name, r in results.items():
        h, t = r["hits"], r["totals"]
        cells = [
            pct(*rate(h, t, lambda k: k[0] == "test" and k[1] == "same")),
            pct(*rate(h, t, lambda k: k[0] == "test" and k[1] == "different")),
            pct(*rate(h, t, lambda k: k[1] == "same")),
            pct(*rate(h, t, lambda k: k[1] == "different")),
            f"{statistics.median(r['cost_s']) * 1e6:,.0f}",
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nfalse hits by kind (all splits):")
    kinds = sorted({k[2] for r in results.values() for k in r["totals"] if k[1] == "different"})
    print("| mode | " + " | ".join(kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name, r in results.items():
        cells = [
            pct(*rate(r["hits"], r["totals"], lambda k, kind=kind: k[1] == "different" and k[2] == kind))
            for kind in kinds
        ]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nparaphrases missed, by cause:")
    for name, r in results.items():
        print(f"  {name}: {dict(r['lost'].most_common())}")
    for name, r in results.items():
        if r["false_hits"]:
            print(
                f"{name} false hits: {' '.join(r['false_hits'][:20])}{' ...' if len(r['false_hits']) > 20 else ''}"
            )
    mem = await stale_replay(MemorySemanticStore(), args.rounds)
    print(f"\nevent replay, memory store ({args.rounds} lookups): {mem}")
    server = RedisServer()
    server.start()
    try:
        client = connect(server.url)
        red = await stale_replay(RedisSemanticStore(client, key_prefix="bench"), args.rounds)
        await client.aclose()
    finally:
        server.stop()
    print(f"event replay, Redis store ({args.rounds} lookups): {red}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="bench/data/semantic_eval.jsonl")
    ap.add_argument("--policy", default="config/examples/semantic-ecommerce.yaml")
    ap.add_argument("--guarded", type=float, nargs="*", default=[0.7, 0.8])
    ap.add_argument("--cosine", type=float, nargs="*", default=[0.8, 0.9, 0.95])
    ap.add_argument("--rounds", type=int, default=2000, help="lookups of the event replay")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
