"""The hand-written labelled sets regenerate byte for byte from their sources, and a set drops only the
repeats of sets written before it (bench/semantic_sets.py)."""

from __future__ import annotations

import orjson
import pytest

from bench import semantic_heldout6_source, semantic_heldout7_source
from bench.semantic_independent import DOMAINS, FILES, domain_order
from bench.semantic_sets import WRITTEN, earlier_texts, labelled_rows


@pytest.mark.parametrize("source", [semantic_heldout6_source, semantic_heldout7_source])
def test_a_source_regenerates_its_committed_file(source) -> None:
    rows = source.rows()
    assert b"".join(orjson.dumps(r) + b"\n" for r in rows) == source.OUT.read_bytes()


def test_only_sets_written_before_count_as_earlier() -> None:
    h6, h7 = semantic_heldout6_source.OUT, semantic_heldout7_source.OUT
    assert WRITTEN.index(h6) < WRITTEN.index(h7)
    first7 = orjson.loads(h7.read_text(encoding="utf-8").splitlines()[0])
    pair = (first7["cached"].lower(), first7["probe"].lower())
    assert pair not in earlier_texts(h6)  # a later set's text never drops an earlier set's row
    assert pair not in earlier_texts(h7)  # nor its own


def test_a_repeat_of_an_earlier_set_is_dropped_either_order_and_case() -> None:
    earlier = orjson.loads(semantic_heldout6_source.OUT.read_text(encoding="utf-8").splitlines()[0])
    pairs = [
        ("shop", "en", "same", "frame", earlier["probe"].upper(), earlier["cached"]),  # a repeat, swapped
        ("shop", "en", "same", "frame", "an unseen question", "another unseen question"),
    ]
    rows = labelled_rows(
        pairs, out=semantic_heldout7_source.OUT, split="t", prefix="t", seed=1, round_=0, policy={"shop": "p"}
    )
    assert [r["id"] for r in rows] == ["t-shop-001"]


def test_every_domain_of_every_set_gets_its_own_row() -> None:
    for path in FILES.values():
        pairs = [orjson.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
        order = domain_order(pairs)
        assert set(order) == {p["domain"] for p in pairs}, path
        assert all(d in DOMAINS for d in order), f"{path}: a domain without a name in DOMAINS"
    pairs = [{"domain": "x"}, {"domain": "shop"}, {"domain": "x"}]
    assert domain_order(pairs) == ["shop", "x"]  # named first, an unnamed one still listed
