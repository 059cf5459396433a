"""A ``Tally`` (the per-request counters, kept as a dict and read at scrape time) writes exactly what a
prometheus_client ``Counter`` with the same increments writes: HELP, TYPE, ``_total`` and ``_created``
per series in first-seen order; and it refuses what a ``Counter`` refuses. The same for a ``Level``
against a ``Gauge`` and a ``Spread`` against a ``Histogram`` (issue 30, round 9)."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from gateway.observability.metrics import (
    FRACTION_BUCKETS,
    LATENCY_BUCKETS,
    NS,
    GatewayMetrics,
    Level,
    Spread,
    Tally,
)

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


def test_a_level_writes_what_a_gauge_moved_the_same_way_writes() -> None:
    reg_g, reg_l = CollectorRegistry(), CollectorRegistry()
    gauge = Gauge("x_in_flight", "In flight.", ("replica",), registry=reg_g)
    level = Level("x_in_flight", "In flight.", ("replica",), registry=reg_l)
    for replica, by in (("r0", 1), ("r1", 1), ("r0", 1), ("r0", -1), ("r1", -1), ("r2", 1), ("r2", -1)):
        gauge.labels(replica).inc(by)
        level.add(replica, by=by)
    gauge.remove("r2")
    level.remove("r2")
    text = _exposition(reg_l)
    assert text == _exposition(reg_g)
    assert 'x_in_flight{replica="r0"} 1.0' in text and 'x_in_flight{replica="r1"} 0.0' in text
    assert "r2" not in text and level.value("r0") == 1
    with pytest.raises(KeyError):
        level.remove("never")
    with pytest.raises(ValueError):
        level.add("a", "b")


@pytest.mark.parametrize("buckets", [LATENCY_BUCKETS, FRACTION_BUCKETS, (-1.0, 0.0, 1.0)])
def test_a_spread_writes_what_a_histogram_with_the_same_observations_writes(
    buckets: tuple[float, ...],
) -> None:
    reg_h, reg_s = CollectorRegistry(), CollectorRegistry()
    hist = Histogram("x_seconds", "Latency.", ("model",), buckets=buckets, registry=reg_h)
    spread = Spread("x_seconds", "Latency.", ("model",), buckets=buckets, registry=reg_s)
    Histogram("x_empty", "Nothing yet.", ("model",), buckets=buckets, registry=reg_h)
    Spread("x_empty", "Nothing yet.", ("model",), buckets=buckets, registry=reg_s)
    # on a bound, between bounds, below the first, above the last, 0, negative, a large one
    values = [0.001, 0.0011, 0.0, 0.5, 0.9, 1.0, 0.99, 400.0, 2.5, -0.5, 1e9, 0.25, 0.1]
    for i, v in enumerate(values):
        model = "m" if i % 3 else "n"
        hist.labels(model).observe(v)
        spread.observe(v, model)
    text = _exposition(reg_s)
    assert text == _exposition(reg_h)
    assert 'x_seconds_bucket{le="+Inf",model="m"} 8.0' in text
    with pytest.raises(ValueError):
        spread.observe(float("nan"), "m")
    with pytest.raises(ValueError):
        spread.observe(1.0, "m", "extra")
    with pytest.raises(ValueError):
        Spread("x_unsorted", "U.", (), buckets=(1.0, 0.5), registry=CollectorRegistry())


def test_the_gateway_registry_serves_in_flight_and_the_request_histograms_from_its_collectors() -> None:
    m = GatewayMetrics()
    m.in_flight.add("r1")
    m.duration.observe(0.02, "m")
    m.match_fraction.observe(0.5, "m")
    value = m.registry.get_sample_value
    assert value(f"{NS}_in_flight", {"replica": "r1"}) == 1
    assert value(f"{NS}_request_duration_seconds_bucket", {"model": "m", "le": "0.025"}) == 1
    assert value(f"{NS}_request_duration_seconds_bucket", {"model": "m", "le": "0.01"}) == 0
    assert value(f"{NS}_prefix_match_fraction_sum", {"model": "m"}) == 0.5
    text = generate_latest(m.registry).decode()
    assert f"# TYPE {NS}_time_to_first_byte_seconds histogram" in text  # declared, no series yet
    assert f"# TYPE {NS}_in_flight gauge" in text
