"""The semantic cache on the independent set of issue 25, per split, language and mode.

    python -m bench.semantic_independent [--split tune|heldout|both|dev|heldout2|heldout3|A+B] [--show] [--write]
        [--modes fingerprint guarded@0.9 ...] [--embed-cache FILE] [--policy-root DIR]

Each pair of bench/data/semantic_independent.jsonl (``bench.semantic_independent_source``) runs under
its own policy (``policy`` field: the e-commerce, airline, mobile-plan or bank-card example; read under
``--policy-root`` to measure another version of them), in a fresh layer and store
(nothing of one pair reaches another), through ``cache.semantic.layer.SemanticLayer``, the code the
gateway's request path calls: the ``cached`` question is looked up and its answer filled, then the
``probe`` is looked up. Modes: ``fingerprint`` (the policy as shipped), ``guarded@T`` (embedding
mode at threshold T, every guard on, the compatible rule too; all-MiniLM-L6-v2 served by the
simulator's ``/v1/embeddings``, called through the gateway's embedder client) and ``verified@T`` (the
same without the compatible rule: only complete, equal fingerprints). A hit on a ``different`` pair is a
false hit, and its rate has a one-sided 95 % Clopper-Pearson upper bound (0 of 49 is at most 5.9 %);
both rates also get a two-sided 95 % Wilson interval, and each mode a row over all domains.
``gateway`` runs a sample of the split's pairs through a real gateway process (``bench.semantic_gateway``).
``--split dev`` runs round 3's development split (bench/data/semantic_dev.jsonl,
``bench.semantic_dev_source``), ``tune+dev`` both. ``--split heldout2`` runs the fourth pass's second
held-out set (bench/data/semantic_heldout2.jsonl, ``bench.semantic_heldout2_source``), meant to be run
once, totals only; ``--split heldout3`` the fifth pass's (bench/data/semantic_heldout3.jsonl,
``bench.semantic_heldout3_source``), the same way; ``--split tune4`` and ``heldout4`` the sixth pass's two
parts of bench/data/semantic_heldout4.jsonl (``bench.semantic_heldout4_source``, split by a seeded hash):
``tune4`` to change rules on, ``heldout4`` run once. Round 7 promoted ``heldout2`` and ``heldout3`` (each
run and reported once) to development sets and added ``heldout5`` (bench/data/semantic_heldout5.jsonl,
``bench.semantic_heldout5_source``), run once; round 8 promoted ``heldout5`` (run once) to a development
set and added ``heldout6`` (bench/data/semantic_heldout6.jsonl, ``bench.semantic_heldout6_source``, with a
fifth domain, a hotel), run once; round 9 added ``heldout7`` (bench/data/semantic_heldout7.jsonl,
``bench.semantic_heldout7_source``, with a sixth domain, a car rental company), run once; round 10 added
``heldout8`` (bench/data/semantic_heldout8.jsonl, ``bench.semantic_heldout8_source``, with a seventh domain,
a food delivery app), run once; round 11 added ``heldout9`` (bench/data/semantic_heldout9.jsonl,
``bench.semantic_heldout9_source``, with an eighth domain, an electricity and gas utility), run once
(not in ``SHOWN``). Mode
``phrases`` is fingerprint mode without the intent-word rule (``intent_words: false``), to compare the two in one run.
``--show`` lists the pairs that hit wrongly or missed (on ``SHOWN``: ``tune``, ``dev``, ``tune4``, ``heldout2``,
``heldout3``, ``heldout5``, ``heldout6`` (round 9 promoted it), ``heldout7`` and ``heldout8`` (run once each, then
promoted); never a held-out set); ``--write`` runs both
splits and writes the tables to docs/benchmarks.md (section ``semantic-independent``).
"""

from __future__ import annotations

import argparse
import asyncio
import math
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import semantic_gateway
from bench.report import write_section
from bench.semantic import EMBED_MODEL, MODEL, SALT, SECRET, MemoEmbedder, answer, chat, embedding_config
from cache.semantic.embedder import Embedder
from cache.semantic.layer import SemanticLayer
from cache.semantic.route import SemanticRoute
from cache.semantic.store import MemorySemanticStore
from config import load_policy
from config.semantic import SemanticConfig
from sim import SimConfig, start_replicas

DATA = Path("bench/data/semantic_independent.jsonl")
DEV = Path("bench/data/semantic_dev.jsonl")  # round 3's development split (bench.semantic_dev_source)
HELDOUT2 = Path("bench/data/semantic_heldout2.jsonl")  # round 4, held out; dev since round 7
HELDOUT3 = Path("bench/data/semantic_heldout3.jsonl")  # round 5, held out; dev since round 7
SET4 = Path("bench/data/semantic_heldout4.jsonl")  # the sixth pass's set: tune4, and heldout4 run once
HELDOUT5 = Path("bench/data/semantic_heldout5.jsonl")  # round 7, held out; dev since round 8
HELDOUT6 = Path("bench/data/semantic_heldout6.jsonl")  # round 8's held-out set, run once
HELDOUT7 = Path("bench/data/semantic_heldout7.jsonl")  # round 9's held-out set, run once
HELDOUT8 = Path("bench/data/semantic_heldout8.jsonl")  # round 10's held-out set, run once
HELDOUT9 = Path("bench/data/semantic_heldout9.jsonl")  # round 11's held-out set, run once
HELDOUT10 = Path("bench/data/semantic_heldout10.jsonl")  # round 12's blind held-out set (semdata10), run once
FILES = {
    "dev": DEV,
    "heldout2": HELDOUT2,
    "heldout3": HELDOUT3,
    "tune4": SET4,
    "heldout4": SET4,
    "heldout5": HELDOUT5,
    "heldout6": HELDOUT6,
    "heldout7": HELDOUT7,
    "heldout8": HELDOUT8,
    "heldout9": HELDOUT9,
    "heldout10": HELDOUT10,
}
SPLITS = (
    "tune",
    "heldout",
    "dev",
    "heldout2",
    "heldout3",
    "tune4",
    "heldout4",
    "heldout5",
    "heldout6",
    "heldout7",
    "heldout8",
    "heldout9",
    "heldout10",
)
# the splits whose pairs --show may list (never a held-out split not yet run)
SHOWN = (
    "tune",
    "dev",
    "tune4",
    "heldout2",
    "heldout3",
    "heldout5",
    "heldout6",
    "heldout7",
    "heldout8",
    "heldout9",
)
DOMAINS = {
    "shop": "e-commerce",
    "air": "airline",
    "tel": "mobile plans",
    "bank": "bank cards",
    "hotel": "hotel",
    "car": "car rental",
    "food": "food delivery",
    "util": "electricity and gas",
    "pharm": "pharmacy",
}


def domain_order(pairs: list[dict[str, Any]]) -> list[str]:
    """The domains a split holds, named ones in ``DOMAINS``' order, then any other in its first pair's
    order: a domain the table does not name still gets its row (heldout10's pharmacy once had none)."""
    seen = dict.fromkeys(p["domain"] for p in pairs)
    return [d for d in DOMAINS if d in seen] + [d for d in seen if d not in DOMAINS]


async def probe(route: SemanticRoute, embedder: Embedder | None, p: dict[str, Any]) -> tuple[bool, str]:
    layer = SemanticLayer({MODEL: route}, MemorySemanticStore(), {MODEL: embedder} if embedder else {})
    first = await layer.lookup(MODEL, route.analyse("chat", chat(p["cached"])), SALT)
    if first.outcome == "miss":
        await layer.fill(first, answer(p["cached"]))
    analysis = layer.analyse(MODEL, "chat", chat(p["probe"]))
    assert analysis is not None
    found = await layer.lookup(MODEL, analysis, SALT)
    why = found.reason if not found.vetoes else f"{found.reason} veto={found.vetoes[0]}"
    return found.outcome == "hit", why


def upper95(h: int, t: int) -> float:
    """One-sided 95 % Clopper-Pearson upper bound of a rate seen h times in t (bisection on the CDF)."""
    if h >= t:
        return 1.0
    lo, hi = h / t, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        cdf = sum(math.comb(t, k) * p**k * (1 - p) ** (t - k) for k in range(h + 1))
        lo, hi = (p, hi) if cdf > 0.05 else (lo, p)
    return hi


def wilson(h: int, t: int, z: float = 1.96) -> tuple[float, float]:
    """Two-sided 95 % Wilson score interval of a rate seen h times in t."""
    if t == 0:
        return 0.0, 1.0
    p = h / t
    mid, half = p + z * z / (2 * t), z * math.sqrt(p * (1 - p) / t + z * z / (4 * t * t))
    return max(0.0, (mid - half) / (1 + z * z / t)), min(1.0, (mid + half) / (1 + z * z / t))


def interval(h: int, t: int) -> str:
    lo, hi = wilson(h, t)
    return f"{lo:.2f}–{hi:.2f}" if t else "-"


def count(hits: Counter[Any], totals: Counter[Any], pred: Any) -> tuple[int, int]:
    return sum(v for k, v in hits.items() if pred(k)), sum(v for k, v in totals.items() if pred(k))


def cell(hits: Counter[Any], totals: Counter[Any], pred: Any) -> str:
    h = sum(v for k, v in hits.items() if pred(k))
    t = sum(v for k, v in totals.items() if pred(k))
    return f"{h}/{t}" if t else "-"


class DiskMemoEmbedder(MemoEmbedder):
    """``MemoEmbedder`` whose vectors also persist in ``path`` (JSON): a rerun embeds no text twice."""

    def __init__(self, path: Path | None, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        self.path = path
        if path is not None and path.exists():
            self.memo.update(orjson.loads(path.read_bytes()))

    def save(self) -> None:
        if self.path is not None:
            self.path.write_bytes(orjson.dumps(self.memo))


def mode_config(base: SemanticConfig, mode: str) -> SemanticConfig:
    """``fingerprint``; ``phrases``: fingerprint mode without the intent-word rule (``intent_words`` off,
    round 4's fingerprints); ``guarded@T``: embedding mode at threshold T, every guard on (the compatible
    rule too); ``verified@T``: the same without the compatible rule (only complete, equal fingerprints)."""
    if mode == "fingerprint":
        return base
    if mode == "phrases":
        return base.model_copy(update={"intent_words": False})
    name, threshold = mode.split("@")
    cfg = embedding_config(base, float(threshold), True)
    assert cfg.embedding is not None and name in ("guarded", "verified")
    guards = cfg.embedding.guards.model_copy(update={"compatible": name == "guarded"})
    return cfg.model_copy(update={"embedding": cfg.embedding.model_copy(update={"guards": guards})})


async def run_split(
    split: str,
    show: bool,
    modes: list[str],
    memo: Path | None = None,
    root: Path = Path(),
    gateway_sample: int = 40,
) -> list[str]:
    data = FILES.get(split, DATA)
    pairs = [orjson.loads(line) for line in data.read_text(encoding="utf-8").splitlines() if line]
    pairs = [p for p in pairs if p["split"] == split]
    policies = {p["policy"] for p in pairs}
    base = {path: load_policy(root / path, env={}).cache.semantic for path in policies}
    fleet = await start_replicas(
        [
            SimConfig(
                models=(MODEL, EMBED_MODEL),
                speed=0,
                embedding_model="minilm" if set(modes) - {"fingerprint", "phrases", "gateway"} else None,
            )
        ],
        base_port=0,
    )
    rows = []
    notes = []
    try:
        async with aiohttp.ClientSession() as session:
            embedder = DiskMemoEmbedder(memo, session, fleet.urls[0], EMBED_MODEL, timeout_s=30.0)
            for mode in modes:
                hits: Counter[tuple[str, str, str]] = Counter()
                totals: Counter[tuple[str, str, str]] = Counter()
                shown = []
                if mode == "gateway":
                    chosen = semantic_gateway.sample(pairs, gateway_sample)
                    served = await semantic_gateway.run_pairs(chosen, fleet.urls[0], root)
                    agree = 0
                    for p in chosen:
                        hit, why = served[p["id"]]
                        route = SemanticRoute(base[p["policy"]], SECRET)
                        agree += hit == (await probe(route, None, p))[0]
                        k = (p["domain"], p["label"], p["lang"])
                        totals[k] += 1
                        hits[k] += hit
                        if hit != (p["label"] == "same"):
                            shown.append(f"  {mode} {p['id']} {p['label']} {p['kind']} [x-cache {why}]: "
                                         f"{p['cached']!r} / {p['probe']!r}")  # fmt: skip
                    notes.append(
                        f"`gateway`: {len(chosen)} of the split's pairs (seed {semantic_gateway.SEED}) through a "
                        f"real `serve` process per policy, a tenant per pair, the openai client; the layer's "
                        f"fingerprint verdict agrees on {agree}/{len(chosen)}."
                    )
                for path in sorted(policies) if mode != "gateway" else ():
                    cfg = mode_config(base[path], mode)
                    route = SemanticRoute(cfg, SECRET)
                    for p in (p for p in pairs if p["policy"] == path):
                        hit, why = await probe(
                            route, None if mode in ("fingerprint", "phrases") else embedder, p
                        )
                        k = (p["domain"], p["label"], p["lang"])
                        totals[k] += 1
                        hits[k] += hit
                        if hit != (p["label"] == "same"):
                            shown.append(f"  {mode} {p['id']} {p['label']} {p['kind']} [{why}]: "
                                         f"{p['cached']!r} / {p['probe']!r}")  # fmt: skip
                domains = domain_order(pairs)
                for domain in [*domains, None]:
                    d = lambda k, dom=domain: dom is None or k[0] == dom  # noqa: E731
                    fh, ft = count(hits, totals, lambda k, d=d: d(k) and k[1] == "different")
                    sh, st = count(hits, totals, lambda k, d=d: d(k) and k[1] == "same")
                    rows.append(
                        [DOMAINS.get(domain, domain) if domain else "**all**", mode, f"**{fh}/{ft}**",
                         f"{100 * upper95(fh, ft):.1f} %", interval(fh, ft)]
                        + [cell(hits, totals, lambda k, d=d, lg=lg: d(k) and k[1] == "different" and k[2] == lg)
                           for lg in ("en", "zh", "mixed")]
                        + [f"{sh}/{st}" + (f" ({sh / st:.2f})" if st else ""), interval(sh, st)]
                        + [cell(hits, totals, lambda k, d=d, lg=lg: d(k) and k[1] == "same" and k[2] == lg)
                           for lg in ("en", "zh", "mixed")]
                    )  # fmt: skip
                if show:
                    print("\n".join(shown))
            embedder.save()
    finally:
        await fleet.stop()
    lines = [
        f"split `{split}`: {len(pairs)} pairs",
        "",
        "| policy | mode | false hits / different | 95 % upper bound | 95 % Wilson | en | zh | mixed "
        "| hits / same | 95 % Wilson | en | zh | mixed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + (["", *notes] if notes else [])


async def main_async(args: argparse.Namespace) -> None:
    splits = ("tune", "heldout") if args.split == "both" or args.write else tuple(args.split.split("+"))
    out: list[str] = []
    for split in splits:
        out += [
            *(
                await run_split(
                    split,
                    args.show and split in SHOWN,
                    args.modes,
                    args.embed_cache,
                    args.policy_root,
                    args.gateway_sample,
                )
            ),
            "",
        ]
    print("\n".join(out))
    if args.write:
        intro = (
            f"`python -m bench.semantic_independent --write --modes {' '.join(args.modes)} --embed-cache FILE` "
            "on bench/data/semantic_independent.jsonl (issue 25: 406 pairs, e-commerce, airline, mobile plans, "
            "bank cards, en/zh/mixed; round 1 split by seed 25, round 2 by seed 2502). Each pair in a fresh "
            "layer and store; `guarded@T`: embedding mode at threshold T, all-MiniLM-L6-v2, every guard on "
            "(the compatible rule too); `verified@T`: without the compatible rule."
        )
        write_section("semantic-independent", intro + "\n\n" + "\n".join(out))


def _split(value: str) -> str:
    if value != "both" and not all(s in SPLITS for s in value.split("+")):
        raise argparse.ArgumentTypeError(f"{value!r}: both, or splits of {SPLITS} joined by +")
    return value


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--split",
        type=_split,
        default="tune",
        help=f"both, or one of {', '.join(SPLITS)}, or several joined by + (tune+dev)",
    )
    ap.add_argument("--write", action="store_true", help="both splits, written to docs/benchmarks.md")
    ap.add_argument("--show", action="store_true", help="list wrong hits and missed paraphrases")
    ap.add_argument(
        "--modes", nargs="+", default=["fingerprint", "guarded@0.9"], help="fingerprint, guarded@THRESHOLD"
    )
    ap.add_argument("--policy-root", type=Path, default=Path(), help="read the policies under this folder")
    ap.add_argument("--embed-cache", type=Path, help="a JSON file that keeps the vectors between runs")
    ap.add_argument("--gateway-sample", type=int, default=40, help="pairs per split in the gateway mode")
    asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    main()
