"""What the hand-written labelled sets of the semantic cache share (``bench/semantic_heldout*_source.py``):
the rows' shape, the check that drops a pair an earlier set already holds, and the file's writing.

A pair is ``(domain, lang, label, kind, cached, probe)``. A set drops the pairs whose two texts repeat a
pair of the sets written *before* it (``WRITTEN``, in the order they were written; a text-only check,
either order, case folded), never of a later one, so a source regenerates its committed file byte for
byte whatever was written after it (a glob of ``bench/data`` would let a later set's texts drop rows).
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

DATA = Path("bench/data")
WRITTEN = tuple(
    DATA / f"semantic_{name}.jsonl"
    for name in (
        "eval",
        "independent",
        "dev",
        "heldout2",
        "heldout3",
        "heldout4",
        "heldout5",
        "heldout6",
        "heldout7",
        "heldout8",
        "heldout9",
        "heldout10",
    )
)

Pair = tuple[str, str, str, str, str, str]  # (domain, lang, label, kind, cached, probe)


def earlier_texts(out: Path) -> set[tuple[str, str]]:
    """Every (cached, probe) text pair, both orders, case folded, of the sets written before ``out``."""
    seen: set[tuple[str, str]] = set()
    for path in WRITTEN[: WRITTEN.index(out)]:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line:
                r = orjson.loads(line)
                seen.add((r["cached"].lower(), r["probe"].lower()))
                seen.add((r["probe"].lower(), r["cached"].lower()))
    return seen


def labelled_rows(
    pairs: list[Pair], *, out: Path, split: str, prefix: str, seed: int, round_: int, policy: dict[str, str]
) -> list[dict[str, object]]:
    """The set's rows: ids ``{prefix}-{domain}-NNN`` in written order, repeats of earlier sets dropped,
    shuffled by ``seed``."""
    seen = earlier_texts(out)
    rows: list[dict[str, object]] = [
        {
            "id": f"{prefix}-{domain}-{i:03d}", "split": split, "seed": seed, "round": round_,
            "domain": domain, "policy": policy[domain], "lang": lang, "label": label, "kind": kind,
            "cached": cached, "probe": probe,
        }
        for i, (domain, lang, label, kind, cached, probe) in enumerate(pairs)
        if (cached.lower(), probe.lower()) not in seen
    ]  # fmt: skip
    random.Random(seed).shuffle(rows)
    return rows


def write_set(out: Path, rows: list[dict[str, object]], written: int) -> None:
    """Write ``rows`` as JSON lines and say what was kept of the ``written`` pairs."""
    out.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    same = sum(r["label"] == "same" for r in rows)
    split = rows[0]["split"] if rows else "?"
    print(
        f"{out} {split}: {len(rows)} pairs ({same} same, {len(rows) - same} different), {written - len(rows)} dropped"
    )
