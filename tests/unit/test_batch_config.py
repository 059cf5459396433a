"""The policy's batch section: windows, the share and its backoff, per-pool overrides, checks."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from config.batch import BatchConfig, window_seconds
from config.loader import PolicyError
from config.loader import parse_policy as _parse


def parse_policy(raw: dict):
    return _parse(yaml.safe_dump(raw))


MODELS = [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9"}]}]


def test_completion_windows() -> None:
    assert (
        window_seconds("24h") == 86_400 and window_seconds("90m") == 5400 and window_seconds("7d") == 604_800
    )
    assert window_seconds("30s") == 30
    for bad in ("24", "0h", "1w", "h", " 24h"):
        with pytest.raises(ValueError):
            window_seconds(bad)
    with pytest.raises(ValidationError):
        BatchConfig(completion_windows=["24h", "tomorrow"])
    with pytest.raises(ValidationError):
        BatchConfig(completion_windows=[])


def test_share_shrinks_linearly_with_the_online_queue() -> None:
    p = BatchConfig(share=0.5, replica_slots=64, backoff={"waiting_start": 2, "waiting_stop": 10}).pool("m")
    assert p.slots == 32
    assert [p.allowed(w) for w in (None, 0, 2, 4, 6, 9.9, 10, 50)] == [32, 32, 32, 24, 16, 0, 0, 0]
    assert BatchConfig(share=0.01, replica_slots=10).pool("m").slots == 1  # never below one slot
    with pytest.raises(ValidationError):
        BatchConfig(backoff={"waiting_start": 5, "waiting_stop": 5})


def test_pool_overrides_inherit_unset_fields() -> None:
    cfg = BatchConfig(
        share=0.5,
        replica_slots=64,
        engine_priority=10,
        pools={"small": {"replica_slots": 8}, "online-first": {"share": 0.1, "backoff": {"waiting_stop": 2}}},
    )
    assert (cfg.pool("small").slots, cfg.pool("small").engine_priority) == (4, 10)
    first = cfg.pool("online-first")
    assert first.slots == 6 and first.backoff.waiting_stop == 2 and first.backoff.waiting_start == 1
    assert cfg.pool("other") == cfg.pool("another")


def test_policy_checks_the_batch_section() -> None:
    policy = parse_policy({"models": MODELS, "batch": {"enabled": True, "pools": {"m": {"share": 0.2}}}})
    assert policy.batch.enabled and policy.batch.pool("m").share == 0.2
    assert policy.billing.batch_price_factor_bp == 5000
    with pytest.raises(PolicyError, match=r"batch\.pools"):
        parse_policy({"models": MODELS, "batch": {"pools": {"typo": {}}}})
    with pytest.raises(PolicyError, match=r"redis\.url"):
        parse_policy({"models": MODELS, "batch": {"enabled": True, "store": "redis"}})
    assert parse_policy(
        {
            "models": MODELS,
            "redis": {"url": "redis://127.0.0.1:6379/0"},
            "batch": {"enabled": True, "store": "redis"},
        }
    )
    with pytest.raises(PolicyError, match="shares"):
        parse_policy({"models": MODELS, "batch": {"shares": 0.5}})
    with pytest.raises(PolicyError):
        parse_policy({"models": MODELS, "batch": {"share": 0}})
