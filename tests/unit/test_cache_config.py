"""The cache section of the policy: defaults, strictness, per-model overrides."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from config.cache import CacheConfig


def test_defaults() -> None:
    cfg = CacheConfig()
    assert cfg.enabled is True and cfg.rule == "deterministic" and cfg.pii == "bypass"
    assert cfg.key_bucket.capacity == 10 and cfg.key_bucket.refill_per_s == 1
    assert cfg.coalescing.enabled and cfg.tenant_limits.fail_mode == "open"
    assert cfg.tenant_limits.requests_per_s is None and not cfg.fill_breaker.enabled


@pytest.mark.parametrize(
    "raw",
    [
        {"unknown": 1},
        {"rule": "sometimes"},
        {"pii": "redact"},
        {"ttl_s": 0},
        {"coalescing": {"lease_ms": 10}},
        {"key_bucket": {"capacity": 0}},
        {"fill_breaker": {"fallback_status": 200}},
        {"tenant_limits": {"fail_mode": "maybe"}},
        {"overrides": [{"model": "a"}, {"model": "a"}]},
        {"overrides": [{"model": "a", "typo": True}]},
    ],
)
def test_invalid_settings_are_rejected(raw: dict) -> None:
    with pytest.raises(ValidationError):
        CacheConfig.model_validate(raw)


def test_per_model_overrides() -> None:
    cfg = CacheConfig.model_validate(
        {
            "ttl_s": 60,
            "overrides": [
                {"model": "chatty", "rule": "never"},
                {"model": "fixed", "ttl_s": 5, "pii": "mask"},
            ],
        }
    )
    assert cfg.for_model("chatty").rule == "never" and cfg.for_model("chatty").ttl_s == 60
    fixed = cfg.for_model("fixed")
    assert fixed.ttl_s == 5 and fixed.pii == "mask" and fixed.rule == "deterministic"
    assert cfg.for_model("other") is cfg
