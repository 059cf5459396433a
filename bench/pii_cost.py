"""Cost of PII detection per 10 KB of prompt: clean text, and text with PII sprinkled in.

    python -m bench.pii_cost [--kb 10] [--rounds 200]

Prints microseconds per 10 KB (median and p90 of ``rounds`` runs) for ``detect`` and ``mask_request``.
The texts are synthetic: English prose, Python-like code, and a number-dense mix (versions, dates,
ports, long order numbers, times: the things that tempt a detector into false positives, so that
figure includes the validators' work), each clean and with PII values sprinkled in.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from cache.pii import detect, mask_request

_WORDS = [
    "the",
    "model",
    "should",
    "answer",
    "in",
    "a",
    "concise",
    "way",
    "using",
    "the",
    "context",
    "below",
    "and",
    "cite",
    "the",
    "section",
    "number",
    "version",
    "2.4.1",
    "was",
    "released",
    "on",
    "2024-01-15",
    "with",
    "12345",
    "downloads",
    "and",
    "port",
    "8080",
    "at",
    "3.14159",
    "ratio",
    "def",
    "handler(request):",
    "return",
    "{'status':",
    "200,",
    "'items':",
    "[1,",
    "2,",
    "3]}",
    "#",
    "TODO",
    "refactor",
    "std::vector",
    "order",
    "1234567890123456",
    "total",
    "99.95",
    "EUR",
    "at",
    "12:30:45",
    "on",
    "15/01/2024",
    "see",
    "RFC",
    "7231",
    "section",
    "6.5.1",
]

_PROSE = [
    "When",
    "the",
    "committee",
    "reviewed",
    "the",
    "proposal",
    "it",
    "asked",
    "whether",
    "the",
    "approach",
    "would",
    "scale",
    "beyond",
    "a",
    "single",
    "region",
    "and",
    "whether",
    "the",
    "operational",
    "burden",
    "of",
    "running",
    "another",
    "service",
    "was",
    "justified",
    "by",
    "the",
    "savings",
    "in",
    "compute",
    "that",
    "the",
    "design",
    "promised",
    "over",
    "the",
    "course",
    "of",
    "the",
    "following",
    "year",
]

_CODE = [
    "for",
    "item",
    "in",
    "items:",
    "if",
    "item.key",
    "not",
    "in",
    "seen:",
    "seen.add(item.key);",
    "result.append(transform(item))",
    "return",
    "sorted(result,",
    "key=lambda",
    "r:",
    "(r.priority,",
    "r.name))",
    "class",
    "Handler:",
    "def",
    "__init__(self,",
    "cfg):",
    "self.cfg",
    "=",
    "cfg;",
    "self.retries",
    "=",
    "cfg.get('retries',",
    "3)",
    "#",
    "see",
    "docs/config.md",
    "x[0]",
    "=",
    "y[-1]",
    "+",
    "z[i",
    "+",
    "1]",
]

_PII = (
    "jane.roe@example.com",
    "+44 20 7946 0958",
    "(415) 555-2671",
    "4111 1111 1111 1111",
    "DE89 3704 0044 0532 0130 00",
    "11010519491231002X",
    "536-22-1234",
    "192.168.10.20",
    "2001:db8::8a2e:370:7334",
    "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789",
)


def make_text(
    n_bytes: int, pii_every: int | None, rng: random.Random, words: tuple[str, ...] | list[str] = _WORDS
) -> str:
    out: list[str] = []
    size = 0
    i = 0
    while size < n_bytes:
        i += 1
        w = rng.choice(_PII) if pii_every and i % pii_every == 0 else rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_bytes]


def measure(fn, rounds: int) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kb", type=int, default=10, help="prompt size in KB (results are scaled to 10 KB)")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = ap.parse_args()
    rng = random.Random(7)
    n = args.kb * 1024
    scale = 10 * 1024 / n
    cases = {
        "prose, clean": make_text(n, None, rng, _PROSE),
        "code, clean": make_text(n, None, rng, _CODE),
        "prose, pii 1/40 words": make_text(n, 40, rng, _PROSE),
        "numbers, clean": make_text(n, None, rng),
        "numbers, pii 1/40": make_text(n, 40, rng),
        "numbers, pii 1/5": make_text(n, 5, rng),
    }
    print(f"PII detection cost, {args.kb} KB texts, {args.rounds} rounds, scaled to µs per 10 KB")
    print(f"{'text':<24}{'findings':>9}{'detect p50':>12}{'p90':>9}{'mask p50':>11}{'p90':>9}")
    rows = []
    for name, text in cases.items():
        findings = len(detect(text))
        body = {"messages": [{"role": "user", "content": text}]}
        d50, d90 = measure(lambda t=text: detect(t), args.rounds)
        m50, m90 = measure(lambda b=body: mask_request(b), args.rounds)
        print(
            f"{name:<24}{findings:>9}{d50 * scale:>12.0f}{d90 * scale:>9.0f}{m50 * scale:>11.0f}{m90 * scale:>9.0f}"
        )
        rows.append(
            [
                name,
                findings,
                f"{d50 * scale:.0f}",
                f"{d90 * scale:.0f}",
                f"{m50 * scale:.0f}",
                f"{m90 * scale:.0f}",
            ]
        )
    if args.write:
        import sys

        from bench.report import table, write_section

        cmd = "python -m bench.pii_cost " + " ".join(sys.argv[1:])
        md = (
            "## PII detection cost\n\n"
            f"Command: `{cmd.strip()}`: {args.kb} KB texts, {args.rounds} rounds, µs per 10 KB of prompt. "
            "`detect` finds every kind; `mask` also builds the placeholder copy of a request body (the "
            "work of `pii: mask`). A request without PII in `pii: bypass` mode pays one `detect`.\n\n"
            + table(
                ["text", "findings", "detect p50 µs", "detect p90 µs", "mask p50 µs", "mask p90 µs"], rows
            )
        )
        write_section("pii", md)


if __name__ == "__main__":
    main()
