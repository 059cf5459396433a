"""The offline batch of issue 16: chat requests from shared templates, shuffled. Seeded, pure.

Defaults: 5,000 requests from 50 templates (system prompts of 1-4k tokens; 40 % of the templates start
with one of 5 shared preambles of 300-800 tokens), a varied user input of 20-300 tokens each, template
popularity skewed (Zipf 0.5, every template used), lines shuffled as a real export arrives. Lines are
OpenAI batch input lines ``{custom_id, method, url, body}``; text is the routing workloads' pseudo-words
(``bench.workloads.TextGen``: 4 bytes a token, as the gateway's and the simulator's approximation).

    python -m bench.batch_workload -o batch.jsonl              # write the batch
    python -m bench.batch_workload --plan 4                    # what the planner makes of it on 4 replicas

``--plan`` prints analytic numbers (no fleet): the oracle (one infinite prefix cache seeing the whole
batch in the best order), what the plan can hit with one cache per replica that keeps the group it
works on, the work per replica, and how long planning took. The fleet benchmark (prefix-ordered vs
arrival order vs one replica, with online TTFT) runs on the engine-model simulator of the routing issue.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import orjson

from bench.workloads import MODEL, TextGen, zipf_weights
from config.batch import BatchConfig
from config.routing import RoutingConfig
from router.batch_plan import line_prefix, plan
from router.tokenizers import ApproxTokenizer

URL: Final = "/v1/chat/completions"


@dataclass(frozen=True, slots=True)
class Template:
    index: int
    preamble: int | None  # the shared preamble it starts with
    system: str


@dataclass(slots=True)
class BatchWorkload:
    templates: list[Template]
    preambles: list[str]
    lines: list[dict[str, Any]] = field(default_factory=list)  # in file order (shuffled)
    template_of: list[int] = field(default_factory=list)  # the template of each line

    def __len__(self) -> int:
        return len(self.lines)

    def jsonl(self) -> bytes:
        return b"".join(orjson.dumps(line) + b"\n" for line in self.lines)

    def write(self, path: str | Path) -> None:
        Path(path).write_bytes(self.jsonl())


def make_batch(
    seed: int = 16,
    requests: int = 5000,
    templates: int = 50,
    system_tokens: tuple[int, int] = (1000, 4000),
    preambles: int = 5,
    preamble_share: float = 0.4,
    preamble_tokens: tuple[int, int] = (300, 800),
    user_tokens: tuple[int, int] = (20, 300),
    max_tokens: tuple[int, int] = (16, 128),
    zipf_s: float = 0.5,
    model: str = MODEL,
) -> BatchWorkload:
    """A batch of ``requests`` lines over ``templates`` system prompts (see the module)."""
    if requests < templates:
        raise ValueError("every template is used at least once: requests >= templates")
    rng = random.Random(seed)
    gen = TextGen(rng)
    shared = [f"Preamble {p}. " + gen.tokens(*preamble_tokens) for p in range(preambles)]
    temps: list[Template] = []
    for t in range(templates):
        p = rng.randrange(preambles) if preambles and rng.random() < preamble_share else None
        head = f"{shared[p]}\n\n" if p is not None else ""
        own = max(16, rng.randint(*system_tokens) - len(head) // 4)
        temps.append(Template(t, p, f"{head}Template {t}. " + gen.text(own)))
    picks = list(range(templates)) + rng.choices(
        range(templates), weights=zipf_weights(templates, zipf_s), k=requests - templates
    )
    rng.shuffle(picks)
    out = BatchWorkload(temps, shared)
    for i, t in enumerate(picks):
        body = {
            "model": model,
            "messages": [
                {"role": "system", "content": temps[t].system},
                {"role": "user", "content": f"Request {i}: " + gen.tokens(*user_tokens)},
            ],
            "max_tokens": rng.randint(*max_tokens),
        }
        out.lines.append({"custom_id": f"req-{i:05d}", "method": "POST", "url": URL, "body": body})
        out.template_of.append(t)
    return out


def plan_stats(wl: BatchWorkload, replicas: int) -> dict[str, Any]:
    """Plan the batch as the gateway would (default routing config, approx tokenizer) and describe it."""
    cfg, batch = RoutingConfig(), BatchConfig()
    tok = ApproxTokenizer(cfg.tokenizer.bytes_per_token)
    names = [f"r{i}" for i in range(replicas)]
    t0 = time.perf_counter()
    prefixes = [
        line_prefix(
            i,
            "chat",
            line["body"],
            line["body"]["model"],
            tok,
            cfg,
            default_output_tokens=batch.default_output_tokens,
        )
        for i, line in enumerate(wl.lines)
    ]
    t1 = time.perf_counter()
    p = plan(
        prefixes,
        names,
        block_size=cfg.block_size,
        warm_tokens=batch.warm_prefix_tokens,
        tolerance=batch.balance_tolerance,
    )
    t2 = time.perf_counter()
    works = [p.work(r) for r in names]
    split = sum(
        len({p_.replica for seq in p.ranges.values() for p_ in seq if wl.template_of[p_.key] == t}) > 1
        for t in range(len(wl.templates))
    )
    return {
        "lines": len(wl),
        "templates": len(wl.templates),
        "prompt_tokens": p.prompt_tokens,
        "oracle_hit_rate": round(p.oracle_cached_tokens / p.prompt_tokens, 4),
        "planned_hit_rate": round(p.cached_tokens / p.prompt_tokens, 4),
        "planned_over_oracle": round(p.cached_tokens / p.oracle_cached_tokens, 4),
        "templates_split": split,
        "work_max_over_mean": round(max(works) / (sum(works) / len(works)), 4),
        "hash_ms": round((t1 - t0) * 1000, 1),
        "plan_ms": round((t2 - t1) * 1000, 1),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--requests", type=int, default=5000)
    ap.add_argument("--templates", type=int, default=50)
    ap.add_argument("-o", "--output", help="write the batch as JSONL here")
    ap.add_argument(
        "--plan", type=int, metavar="REPLICAS", help="print the plan's numbers for this many replicas"
    )
    args = ap.parse_args(argv)
    wl = make_batch(args.seed, args.requests, args.templates)
    if args.output:
        wl.write(args.output)
        print(f"wrote {len(wl)} lines to {args.output}")
    if args.plan:
        print(orjson.dumps(plan_stats(wl, args.plan), option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
