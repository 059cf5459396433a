"""Billing rules: thresholds, exclusivity, sources, rounding, policy conversion."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from cache.billing.pricing import (
    KINDS,
    ExplicitOutcome,
    LineItem,
    ModelPrices,
    RequestUsage,
    Rules,
    bill,
    billing_headers,
    explicit_eligible,
    format_micros,
    price_micros,
    prices_from_config,
    rules_from_config,
    usage_extension,
    usage_from_response,
)
from config.billing import BillingConfig
from config.loader import PolicyError, parse_policy

PRICES = ModelPrices(input_micros_per_1m=3_000_000, output_micros_per_1m=15_000_000, price_version="v1")
RULES = Rules()


def _bill(
    usage: RequestUsage, explicit: ExplicitOutcome | None = None, source: str = "upstream", rules=RULES
):
    return bill(usage, PRICES, rules, explicit, source, request_id="r1", tenant="t1", model="m", ts_ms=1000)


# (case, usage, explicit, source, expected non-zero tokens, expected non-zero micros)
# micros = tokens * 3_000_000 (input) or 15_000_000 (output) * pct / 1e8, rounded half-up.
CASES = [
    (
        "implicit at threshold 256: cached discounted",
        RequestUsage(256, 10, 200, "replica"),
        None,
        "upstream",
        {"uncached": 56, "implicit_hit": 200, "output": 10},
        {"uncached": 168, "implicit_hit": 120, "output": 150},
    ),
    (
        "implicit below threshold 255: all at 100 %",
        RequestUsage(255, 10, 200, "replica"),
        None,
        "upstream",
        {"uncached": 255, "output": 10},
        {"uncached": 765, "output": 150},
    ),
    (
        "explicit create at 1024",
        RequestUsage(1500, 0, 1000, "replica"),
        ExplicitOutcome(1024, "created"),
        "upstream",
        {"explicit_create": 1024, "uncached": 476},
        {"explicit_create": 3840, "uncached": 1428},
    ),
    (
        "explicit hit at 1024 (307.2 rounds to 307), no implicit discount on the rest",
        RequestUsage(1500, 0, 1400, "replica"),
        ExplicitOutcome(1024, "hit"),
        "upstream",
        {"explicit_hit": 1024, "uncached": 476},
        {"explicit_hit": 307, "uncached": 1428},
    ),
    (
        "explicit prefix 1023 not eligible: billed as implicit",
        RequestUsage(1500, 0, 1000, "gateway_index"),
        ExplicitOutcome(1023, "created"),
        "upstream",
        {"implicit_hit": 1000, "uncached": 500},
        {"implicit_hit": 600, "uncached": 1500},
    ),
    (
        "explicit hit 1023 not eligible either",
        RequestUsage(1500, 0, 0, "none"),
        ExplicitOutcome(1023, "hit"),
        "upstream",
        {"uncached": 1500},
        {"uncached": 4500},
    ),
    (
        "explicit prefix longer than the prompt is clamped to the prompt",
        RequestUsage(1100, 0, 0, "none"),
        ExplicitOutcome(1200, "created"),
        "upstream",
        {"explicit_create": 1100},
        {"explicit_create": 4125},
    ),
    (
        "cached count above the prompt is clamped",
        RequestUsage(300, 0, 900, "replica"),
        None,
        "upstream",
        {"implicit_hit": 300},
        {"implicit_hit": 180},
    ),
    (
        "response cache hit: served tokens at 0 % by default",
        RequestUsage(1500, 10, 1500, "replica"),
        None,
        "response_cache",
        {"served_input": 1500, "served_output": 10},
        {},
    ),
    (
        "coalesced follower: served tokens, explicit ignored",
        RequestUsage(1500, 10, 0, "none"),
        ExplicitOutcome(1024, "hit"),
        "coalesced",
        {"served_input": 1500, "served_output": 10},
        {},
    ),
]


@pytest.mark.parametrize(
    ("case", "usage", "explicit", "source", "tokens", "micros"), CASES, ids=[c[0] for c in CASES]
)
def test_bill_table(case, usage, explicit, source, tokens, micros):
    item = _bill(usage, explicit, source)
    assert item.tokens.as_dict() == {k: tokens.get(k, 0) for k in KINDS}
    assert item.micros.as_dict() == {k: micros.get(k, 0) for k in KINDS}
    assert item.total_micros == sum(micros.values())
    expected_without = price_micros(usage.prompt_tokens, 3_000_000, 100) + price_micros(
        usage.completion_tokens, 15_000_000, 100
    )
    assert item.cost_without_cache_micros == expected_without
    assert item.saved_micros == expected_without - item.total_micros
    assert item.source == source
    assert item.price_version == "v1"
    assert (item.request_id, item.tenant, item.model, item.ts_ms) == ("r1", "t1", "m", 1000)


def test_short_prompt_records_cached_count_without_discount():
    item = _bill(RequestUsage(255, 0, 200, "replica"))
    assert item.reported_cached_tokens == 200
    assert item.cached_source == "replica"
    assert item.tokens.implicit_hit == 0


def test_response_cache_rule_is_configurable():
    rules = Rules(response_cache_input_pct=50, response_cache_output_pct=10, coalesced_input_pct=100)
    rc = _bill(RequestUsage(1000, 100, 0), source="response_cache", rules=rules)
    assert rc.micros.served_input == 1500  # 1000 * 3 * 0.5
    assert rc.micros.served_output == 150  # 100 * 15 * 0.1
    co = _bill(RequestUsage(1000, 100, 0), source="coalesced", rules=rules)
    assert co.micros.served_input == 3000
    assert co.micros.served_output == 0


def test_unknown_source_rejected():
    with pytest.raises(ValueError, match="source"):
        _bill(RequestUsage(10, 1), source="cache")


@pytest.mark.parametrize(
    ("tokens", "price", "pct", "expected"),
    [
        (1, 1_000_000, 50, 1),  # 0.5 rounds up
        (1, 1_000_000, 49, 0),  # 0.49 rounds down
        (3, 1_000_000, 50, 2),  # 1.5 rounds up (half-up, not banker's)
        (4, 1_000_000, 10, 0),  # 0.4
        (1024, 3_000_000, 10, 307),  # 307.2
        (1_000_000, 3_000_000, 100, 3_000_000),  # 1M tokens cost the list price exactly
        (10**12, 10**9, 1000, 10**16),  # big numbers stay exact (no float)
        (0, 3_000_000, 100, 0),
    ],
)
def test_price_micros_rounding(tokens, price, pct, expected):
    assert price_micros(tokens, price, pct) == expected


def test_price_micros_rejects_negative():
    with pytest.raises(ValueError):
        price_micros(-1, 1, 1)


def test_explicit_eligible_threshold():
    assert not explicit_eligible(1023, RULES)
    assert explicit_eligible(1024, RULES)
    assert explicit_eligible(10, Rules(explicit_min_tokens=10))


@given(
    prompt=st.integers(0, 200_000),
    cached=st.integers(0, 250_000),
    completion=st.integers(0, 50_000),
    prefix=st.none() | st.integers(0, 250_000),
    kind=st.sampled_from(["created", "hit"]),
    source=st.sampled_from(["upstream", "response_cache", "coalesced"]),
)
def test_bill_invariants(prompt, cached, completion, prefix, kind, source):
    explicit = None if prefix is None else ExplicitOutcome(prefix, kind)
    item = _bill(RequestUsage(prompt, completion, cached, "replica"), explicit, source)
    t = item.tokens
    assert t.uncached + t.implicit_hit + t.explicit_create + t.explicit_hit + t.served_input == prompt
    assert t.output + t.served_output == completion
    assert item.total_micros == item.micros.total()
    # explicit and implicit never both apply
    assert not (t.implicit_hit and (t.explicit_create or t.explicit_hit))
    if source == "upstream" and not t.explicit_create:
        assert item.total_micros <= item.cost_without_cache_micros
    assert LineItem.from_dict(item.to_dict()) == item


def test_usage_from_response_prefers_replica_count():
    u = usage_from_response(
        {"prompt_tokens": 900, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 512}}, 256
    )
    assert (u.prompt_tokens, u.completion_tokens, u.cached_tokens, u.cached_source) == (
        900,
        5,
        512,
        "replica",
    )
    u = usage_from_response(
        {"prompt_tokens": 900, "completion_tokens": 5, "prompt_tokens_details": None}, 256
    )
    assert (u.cached_tokens, u.cached_source) == (256, "gateway_index")
    u = usage_from_response({"prompt_tokens": 900, "completion_tokens": 5}, None)
    assert (u.cached_tokens, u.cached_source) == (0, "none")
    # a replica reporting 0 cached tokens is still the authority
    u = usage_from_response({"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 0}}, 8)
    assert (u.cached_tokens, u.cached_source) == (0, "replica")


def test_headers_and_usage_extension():
    item = _bill(RequestUsage(1500, 10, 0), ExplicitOutcome(1024, "hit"))
    h = billing_headers(item)
    assert h["x-gateway-billing-cost"] == format_micros(item.total_micros) == "0.001885"
    assert h["x-gateway-billing-cost-without-cache"] == "0.004650"
    assert "explicit_hit=1024" in h["x-gateway-billing-input-tokens"]
    assert all(k.startswith("x-gateway-billing-") for k in h)
    ext = usage_extension(item)
    assert ext["saved_micros"] == 4650 - 1885
    assert ext["tokens"]["explicit_hit"] == 1024
    assert format_micros(-1_500_000) == "-1.500000"


POLICY = """
version: 1
models:
  - name: llama
    replicas: [{url: "http://127.0.0.1:9100"}]
billing:
  currency: EUR
  price_version: "2026-11"
  default: {input_per_1m: 0.5, output_per_1m: 1.5}
  models:
    llama:
      input_per_1m: 3
      output_per_1m: "15.25"
      rules: {implicit_cached_pct: 50, explicit_min_tokens: 2048}
    tiny:
      input_per_1m: 0.000001
      price_version: special
  rules: {explicit_ttl_s: 60}
  ledger: {kind: redis}
  response: {headers: false, usage_extension: true}
"""


def test_policy_section_to_prices_and_rules():
    cfg = parse_policy(POLICY).billing
    assert cfg.enabled
    p = prices_from_config(cfg, "llama")
    assert (p.input_micros_per_1m, p.output_micros_per_1m, p.currency, p.price_version) == (
        3_000_000,
        15_250_000,
        "EUR",
        "2026-11",
    )
    r = rules_from_config(cfg, "llama")
    assert (r.implicit_cached_pct, r.explicit_min_tokens, r.explicit_ttl_s, r.explicit_hit_pct) == (
        50,
        2048,
        60,
        10,
    )
    assert prices_from_config(cfg, "tiny").input_micros_per_1m == 1
    assert prices_from_config(cfg, "tiny").price_version == "special"
    other = prices_from_config(cfg, "unknown")
    assert (other.input_micros_per_1m, other.output_micros_per_1m) == (500_000, 1_500_000)
    assert rules_from_config(cfg, "unknown") == Rules(explicit_ttl_s=60)
    assert cfg.ledger.kind == "redis"
    assert cfg.response.usage_extension and not cfg.response.headers


def test_defaults_match_the_documented_rules():
    cfg = BillingConfig()
    assert cfg.enabled is True
    assert rules_from_config(cfg, "any") == Rules()
    assert Rules() == Rules(20, 256, 125, 10, 300.0, 1024, 4, 0, 0, 0, 0)
    assert cfg.ledger.kind == "sqlite" and cfg.ledger.synchronous == "normal"


@pytest.mark.parametrize(
    "bad",
    [
        {"models": {"m": {"input_per_1m": "0.0000001"}}},  # below one micro
        {"models": {"m": {"input_per_1m": -1}}},
        {"rules": {"implicit_cached_pct": -5}},
        {"rules": {"typo_pct": 5}},
        {"models": {"m": {"rules": {"explicit_ttl_s": 0}}}},
        {"ledger": {"kind": "postgres"}},
    ],
)
def test_invalid_billing_sections_rejected(bad):
    with pytest.raises(ValidationError):
        BillingConfig.model_validate(bad)


def test_policy_error_names_the_path():
    text = POLICY.replace("implicit_cached_pct: 50", "implicit_cached_pc: 50")
    with pytest.raises(PolicyError) as exc:
        parse_policy(text)
    assert "billing.models.llama.rules.implicit_cached_pc" in str(exc.value)
