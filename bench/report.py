"""Write a named section of docs/benchmarks.md in place, so each benchmark owns its own part."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path

DEFAULT_DOC = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"

HEADER = """# Benchmarks

Every table below was written by the command printed above it, on the machine named there. Numbers
from one table were measured side by side in one run; compare ratios, not absolute values, across
tables (the machine is small and shared).
"""


def write_section(name: str, markdown: str, path: Path = DEFAULT_DOC) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{markdown.rstrip()}\n{end}"
    text = path.read_text() if path.exists() else HEADER
    if start in text and end in text:
        before, rest = text.split(start, 1)
        _, after = rest.split(end, 1)
        text = before + block + after
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, round(q / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


def median(values: list[float]) -> float:
    return statistics.median(values)


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)
