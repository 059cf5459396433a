"""Batch lines are billed like online requests at billing.batch_price_factor (source ``batch``); the ledger
rows of a batch run through the gateway: tests/integration/test_batch_api.py."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cache.billing.pricing import (
    ExplicitOutcome,
    ModelPrices,
    RequestUsage,
    Rules,
    bill,
    price_micros,
)
from config.billing import BillingConfig

PRICES = ModelPrices(input_micros_per_1m=3_000_000, output_micros_per_1m=15_000_000)


def _bill(usage: RequestUsage, source: str, factor_bp: int = 10_000, explicit: ExplicitOutcome | None = None):
    return bill(
        usage,
        PRICES,
        Rules(),
        explicit,
        source,
        request_id="r",
        tenant="t",
        model="m",
        ts_ms=1,
        price_factor_bp=factor_bp,
    )


def test_price_factor_is_exact_and_the_default_is_unchanged() -> None:
    assert price_micros(1_000_000, 3_000_000, 100) == 3_000_000
    assert price_micros(1_000_000, 3_000_000, 100, 5000) == 1_500_000
    assert price_micros(1, 3, 100, 5000) == 0  # 1.5e-6 micros rounds to 0
    assert price_micros(333_333, 3_000_000, 20, 5000) == 100_000  # 99_999.9 rounded half up once
    # the factor is applied to the exact amount, not to an already rounded one
    assert price_micros(5, 1_000_000, 100, 5000) == 3  # 2.5 -> 3; rounding first then halving would give 2


@given(
    prompt=st.integers(0, 100_000),
    cached=st.integers(0, 100_000),
    completion=st.integers(0, 20_000),
    prefix=st.none() | st.integers(0, 100_000),
)
def test_a_batch_line_is_an_upstream_request_at_half_price(prompt, cached, completion, prefix) -> None:
    usage = RequestUsage(prompt, completion, cached, "replica")
    explicit = None if prefix is None else ExplicitOutcome(prefix, "hit")
    online = _bill(usage, "upstream", explicit=explicit)
    batch = _bill(usage, "batch", 5000, explicit=explicit)
    assert batch.source == "batch"
    assert batch.tokens == online.tokens  # the same rules split the tokens the same way
    for kind, micros in online.micros.as_dict().items():
        assert abs(getattr(batch.micros, kind) * 2 - micros) <= 1, kind
    assert abs(batch.cost_without_cache_micros * 2 - online.cost_without_cache_micros) <= 2
    assert batch.total_micros == batch.micros.total()
    assert batch.saved_micros <= online.saved_micros // 2 + 4


def test_only_batch_lines_take_a_factor() -> None:
    with pytest.raises(ValueError, match="price factor"):
        _bill(RequestUsage(10, 1), "upstream", 5000)
    assert (
        _bill(RequestUsage(10, 1), "batch").total_micros
        == _bill(RequestUsage(10, 1), "upstream").total_micros
    )


def test_batch_price_factor_policy_field() -> None:
    cfg = BillingConfig()
    assert cfg.batch_price_factor == Decimal("0.5") and cfg.batch_price_factor_bp == 5000
    assert BillingConfig(batch_price_factor="1.25").batch_price_factor_bp == 12_500
    for bad in ("0.12345", "-0.1", "11"):
        with pytest.raises(ValidationError):
            BillingConfig(batch_price_factor=bad)
