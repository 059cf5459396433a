"""GatewayMetrics.child caches a labelled child per (metric, labels); forget drops it and the series."""

from __future__ import annotations

from gateway.observability.metrics import NS, GatewayMetrics


def _value(m: GatewayMetrics, name: str, labels: dict[str, str]) -> float | None:
    return m.registry.get_sample_value(f"{NS}_{name}", labels)


def test_a_child_is_made_once_per_metric_and_labels_and_forget_drops_the_series() -> None:
    m = GatewayMetrics()
    a = m.child(m.breaker_state, "r1")
    assert m.child(m.breaker_state, "r1") is a
    assert m.child(m.breaker_state, "r2") is not a
    a.set(1)
    assert _value(m, "breaker_state", {"replica": "r1"}) == 1
    m.forget(m.breaker_state, "r1")
    assert _value(m, "breaker_state", {"replica": "r1"}) is None
    b = m.child(m.breaker_state, "r1")
    assert b is not a  # a new series, not the forgotten child
    b.set(0)
    assert _value(m, "breaker_state", {"replica": "r1"}) == 0
