"""A ``Tally`` (the per-request counters, kept as a dict and read at scrape time) writes exactly what a
prometheus_client ``Counter`` with the same increments writes: HELP, TYPE, ``_total`` and ``_created``
per series in first-seen order; and it refuses what a ``Counter`` refuses."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, generate_latest

from gateway.observability.metrics import NS, GatewayMetrics, Tally

CREATED = re.compile(r"^(\S+_created\{.*\}) \S+$", re.M)


def _exposition(registry: CollectorRegistry) -> str:
    return CREATED.sub(r"\1 TIME", generate_latest(registry).decode())


def test_a_tally_writes_what_a_counter_with_the_same_increments_writes() -> None:
    reg_c, reg_t = CollectorRegistry(), CollectorRegistry()
    counter = Counter("x_requests_total", "Requests.", ("model", "status"), registry=reg_c)
    tally = Tally("x_requests_total", "Requests.", ("model", "status"), registry=reg_t)
    Counter("x_empty_total", "Nothing yet.", ("reason",), registry=reg_c)
    Tally("x_empty_total", "Nothing yet.", ("reason",), registry=reg_t)
    for model, status, by in (("m", "200", 1), ("m", "429", 1), ("m", "200", 2.5), ("n", "200", 7)):
        counter.labels(model, status).inc(by)
        tally.inc(model, status, by=by)
    text = _exposition(reg_t)
    assert text == _exposition(reg_c)
    assert 'x_requests_total{model="m",status="200"} 3.5' in text
    assert reg_t.get_sample_value("x_requests_total", {"model": "n", "status": "200"}) == 7
    assert tally.value("m", "429") == 1 and tally.value("m", "500") == 0


def test_a_tally_refuses_what_a_counter_refuses() -> None:
    tally = Tally("y_total", "Y.", ("a", "b"), registry=CollectorRegistry())
    with pytest.raises(ValueError):
        tally.inc("only-one")
    with pytest.raises(ValueError):
        tally.inc("a", 200)  # type: ignore[arg-type]  # a label value that is not a string
    with pytest.raises(ValueError):
        tally.inc("a", "b", by=-1)
    assert tally.values == {}
    with pytest.raises(ValueError):  # the same name twice in one registry, as for a Counter
        reg = CollectorRegistry()
        Tally("z_total", "Z.", (), registry=reg)
        Counter("z_total", "Z.", registry=reg)


def test_the_gateway_registry_serves_the_per_request_counters_from_their_tallies() -> None:
    m = GatewayMetrics()
    m.requests.inc("m", "r1", "200")
    m.billed_tokens.inc("t", "output", by=12)
    m.billed_cost.inc("t", by=30)
    value = m.registry.get_sample_value
    assert value(f"{NS}_requests_total", {"model": "m", "replica": "r1", "status": "200"}) == 1
    assert value(f"{NS}_billed_tokens_total", {"tenant": "t", "kind": "output"}) == 12
    assert value(f"{NS}_billed_cost_micros_total", {"tenant": "t"}) == 30
    text = generate_latest(m.registry).decode()
    assert f"# TYPE {NS}_requests_total counter" in text
    assert f"# TYPE {NS}_routing_decisions_total counter" in text  # declared, no series yet
