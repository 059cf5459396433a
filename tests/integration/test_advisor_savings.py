"""Cost-savings rate per cache layer from both billing ledgers (SQLite file, real Redis)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from cache.advisor.render import render_table
from cache.advisor.savings import LAYERS, savings_report
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import ExplicitOutcome, ModelPrices, RequestUsage, Rules, bill

DAY0 = 1_790_000_000_000 - 1_790_000_000_000 % 86_400_000
PRICES = ModelPrices(3_000_000, 15_000_000)
RULES = Rules()


def _bill(
    rid: str,
    tenant: str,
    usage: RequestUsage,
    explicit: ExplicitOutcome | None = None,
    source: str = "upstream",
):
    return bill(
        usage,
        PRICES,
        RULES,
        explicit,
        source,
        request_id=rid,
        tenant=tenant,
        model="llama",
        ts_ms=DAY0 + 1000,
    )


def items():
    u = RequestUsage(2000, 100, 0, "replica")
    return [
        _bill("a1", "acme", u),  # nothing cached
        _bill("a2", "acme", replace(u, cached_tokens=1600)),  # implicit: 1,600 at 20 %
        _bill("a3", "acme", u, ExplicitOutcome(1024, "created")),  # explicit: 1,024 at 125 % (a loss)
        _bill("a4", "acme", u, ExplicitOutcome(1024, "hit")),  # explicit: 1,024 at 10 %
        _bill("a5", "acme", u, source="response_cache"),  # served: free
        _bill("a6", "acme", u, source="coalesced"),
        _bill("b1", "beta", replace(u, cached_tokens=1000)),
        # A source the ledger has no rule for yet (the semantic cache): served at half price.
        replace(
            _bill("b2", "beta", u, source="response_cache"),
            source="semantic_cache",
            total_micros=3750,
            micros=_bill("x", "beta", u).micros,
        ),
    ]


@pytest.mark.redis
async def test_csr_per_layer_from_either_ledger(ledger) -> None:
    for it in items():
        assert await ledger.record(it)
    rows = await ledger.query(group_by=("tenant", "model", "source"))
    rep = savings_report(rows, 86_400, currency="USD", advice_micros_per_request={"acme": 250.0})
    acme, beta = rep["tenants"]
    full = 2000 * 3 + 100 * 15  # 7,500 micros a request without any cache
    assert acme["uncached_micros"] == 6 * full and beta["uncached_micros"] == 2 * full
    L = acme["layers"]
    assert set(L) >= set(LAYERS)
    assert L["implicit"]["uncached_micros"] == 1600 * 3 and L["implicit"]["paid_micros"] == 960
    assert L["explicit"]["uncached_micros"] == 2 * 1024 * 3
    assert L["explicit"]["paid_micros"] == 3840 + 307  # 1,024 x 3 x 125 % and x 10 % (rounded)
    assert L["response_cache"]["saved_micros"] == full and L["coalesced"]["saved_micros"] == full
    assert L["semantic_cache"]["saved_micros"] == 0  # the slot exists before the layer does
    # Layers add up to the tenant's CSR (rounding aside).
    assert sum(x["csr"] for x in L.values()) == pytest.approx(acme["csr"], abs=1e-4)
    assert acme["csr"] == pytest.approx(acme["saved_micros"] / acme["uncached_micros"])
    # The advice per request times the tenant's upstream requests of the period (a1-a4), not a per-day
    # extrapolation over the period.
    assert acme["advice"]["micros_in_period"] == 1000
    assert acme["advice"]["csr_with_advice"] <= 1
    assert acme["advice"]["csr_with_advice"] == pytest.approx(
        (acme["saved_micros"] + 1000) / acme["uncached_micros"]
    )
    semantic = beta["layers"]["semantic_cache"]
    assert semantic["uncached_micros"] == full and semantic["discount"] == pytest.approx(0.5)
    assert rep["overall"]["uncached_micros"] == 8 * full
    assert rep["overall"]["saved_micros"] == acme["saved_micros"] + beta["saved_micros"]
    table = render_table({"tenants": [], "currency": "USD"}, rep)
    assert "semantic_cache" in table and "acme" in table and "(all)" in table


@pytest.mark.redis
async def test_both_ledgers_give_the_same_report(tmp_path, redis_url) -> None:
    sq = await SqliteLedger.open(str(tmp_path / "l.db"))
    client = aioredis.from_url(redis_url)
    rd = RedisLedger(client, key_prefix="same")
    try:
        for it in items():
            await sq.record(it)
            await rd.record(it)
        gb = ("tenant", "model", "source")
        a = savings_report(await sq.query(group_by=gb), 3600, currency="USD")
        b = savings_report(await rd.query(group_by=gb), 3600, currency="USD")
        assert a == b
    finally:
        await sq.close()
        await client.aclose()


def test_rows_must_be_grouped_by_source() -> None:
    from cache.billing.ledger import aggregate

    rows = aggregate(items(), group_by=("tenant",))
    with pytest.raises(ValueError, match="grouped by source"):
        savings_report(rows, 3600, currency="USD")
    with pytest.raises(ValueError, match="period_s"):
        savings_report([], 0, currency="USD")
