"""The worked example of docs/billing.md, recomputed from the document's own input table."""

from __future__ import annotations

from pathlib import Path

import pytest

from cache.billing.ledger import aggregate
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import KINDS, ExplicitOutcome, ModelPrices, RequestUsage, Rules, bill

DOC = Path(__file__).resolve().parents[2] / "docs" / "billing.md"
PRICES = ModelPrices(3_000_000, 15_000_000, "USD", "2026-11")  # as stated in the document


def _table(marker: str) -> list[dict[str, str]]:
    text = DOC.read_text(encoding="utf-8")
    start = text.index(f"<!-- {marker} -->")
    block = text[start : text.index("<!-- end -->", start)]
    lines = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    return [dict(zip(header, [c.strip() for c in ln.strip("|").split("|")], strict=True)) for ln in lines[2:]]


def _items():
    out = []
    for i, row in enumerate(_table("worked-example-inputs")):
        explicit = None
        if row["explicit"] != "-":
            kind, n = row["explicit"].split()
            explicit = ExplicitOutcome(int(n), kind)  # type: ignore[arg-type]
        usage = RequestUsage(
            int(row["prompt"]), int(row["completion"]), int(row["cached"]), row["cached_source"]
        )  # type: ignore[arg-type]
        out.append(
            bill(
                usage,
                PRICES,
                Rules(),
                explicit,
                row["source"],
                request_id=row["req"],
                tenant="acme",
                model="llama",
                ts_ms=1_793_000_000_000 + i * 60_000,
            )
        )
    return out


def _expected() -> dict[str, dict[str, int]]:
    return {
        r["req"]: {k: int(v) for k, v in r.items() if k != "req"} for r in _table("worked-example-results")
    }


def test_doc_line_items():
    items = _items()
    expected = _expected()
    assert [it.request_id for it in items] == [k for k in expected if k != "total"]
    for it in items:
        exp = expected[it.request_id]
        assert {k: exp[k] for k in KINDS} == it.tokens.as_dict(), it.request_id
        assert (exp["cost µ"], exp["without cache µ"], exp["saved µ"]) == (
            it.total_micros,
            it.cost_without_cache_micros,
            it.saved_micros,
        ), it.request_id


async def test_doc_totals_through_a_ledger(tmp_path):
    items = _items()
    total = _expected()["total"]
    led = await SqliteLedger.open(str(tmp_path / "ledger.db"))
    try:
        for it in items:
            assert await led.record(it)
        (row,) = await led.query(tenant="acme", group_by=("tenant",))
    finally:
        await led.close()
    assert row == aggregate(items, group_by=("tenant",))[0]
    assert {k: total[k] for k in KINDS} == row.tokens.as_dict()
    assert (row.cost_micros, row.cost_without_cache_micros, row.saved_micros) == (
        total["cost µ"],
        total["without cache µ"],
        total["saved µ"],
    )
    text = DOC.read_text(encoding="utf-8")
    assert f"a saving rate of\n{row.saving_rate * 100:.2f} %" in text
    assert "paid 0.023563 USD instead of 0.033900" in text
    assert row.saving_rate == pytest.approx(10337 / 33900)
