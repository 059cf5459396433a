"""The replicas' token counters at window edges (``gateway.fleet.counters``) and one replica's line of
a reconciliation: which readings a span uses, a restarted replica, estimated rows apart."""

from __future__ import annotations

from cache.billing.ledger import ReplicaTotals
from gateway.fleet.counters import CounterLog, Reading, compare

K = ("m", "r0")


def log_with(*readings: tuple[int, int, int], window_s: float = 1.0, kept: int = 10) -> CounterLog:
    log = CounterLog(window_s, kept)
    for ts, p, g in readings:
        log.observe("m", "r0", ts, p, g)
    return log


def test_edges_are_the_first_reading_of_each_window_and_the_latest_is_kept() -> None:
    log = log_with((1000, 0, 0), (1400, 5, 1), (2100, 9, 2), (2600, 12, 3), (3050, 20, 4))
    assert [r.ts_ms for r in log.readings(K)] == [1000, 2100, 3050]
    log.observe("m", "r0", 3500, 21, 5)
    assert [r.ts_ms for r in log.readings(K)] == [1000, 2100, 3050, 3500]
    assert log.last_window(K) == (Reading(2100, 9, 2), Reading(3050, 20, 4))
    assert log.latest_ms() == 3500


def test_a_span_runs_from_the_last_reading_at_or_before_since_to_the_last_at_or_before_until() -> None:
    log = log_with((1000, 0, 0), (2100, 9, 2), (3050, 20, 4), (3500, 21, 5))
    assert log.span(K, 2500, None) == (Reading(2100, 9, 2), Reading(3500, 21, 5))
    assert log.span(K, 500, 3100) == (Reading(1000, 0, 0), Reading(3050, 20, 4))
    assert log.span(K, 3500, None) is None  # one reading: no span
    assert log.span(("m", "other"), None, None) is None


def test_edges_kept_are_bounded() -> None:
    log = log_with(*((1000 * i, i, i) for i in range(1, 30)), kept=5)
    assert len(log.readings(K)) == 5


def test_drift_is_counted_minus_billed_and_estimated_rows_are_named() -> None:
    billed = ReplicaTotals("m", "r0")
    billed.add("x", 100, 10, False)
    billed.add("y", 40, 2, True)
    line = compare(K, Reading(0, 1000, 100), Reading(1, 1150, 115), billed, 1.0)
    assert line["replica_counters"] == {"prompt_tokens": 150, "generation_tokens": 15}
    assert line["drift"] == {"prompt_tokens": 10, "generation_tokens": 3}
    assert line["estimated"] == {"rows": 1, "prompt_tokens": 40, "generation_tokens": 2, "request_ids": ["y"]}
    assert line["exceeded"]  # 10 of 150 is above 1 %
    exact = compare(K, Reading(0, 0, 0), Reading(1, 140, 12), billed, 1.0)
    assert exact["drift"] == {"prompt_tokens": 0, "generation_tokens": 0} and not exact["exceeded"]


def test_a_restarted_replica_is_no_drift_and_rows_without_counters_are_shown() -> None:
    line = compare(K, Reading(0, 1000, 100), Reading(1, 20, 2), None, 1.0)
    assert line["counter_reset"] and line["drift"] is None and not line["exceeded"]
    billed = ReplicaTotals("m", "r0")
    billed.add("x", 5, 1, False)
    alone = compare(K, None, None, billed, 1.0)
    assert alone["replica_counters"] is None and alone["ledger"]["rows"] == 1
    nothing_counted = compare(K, Reading(0, 0, 0), Reading(1, 0, 0), billed, 1.0)
    assert nothing_counted["drift_pct"]["prompt_tokens"] is None and nothing_counted["exceeded"]
