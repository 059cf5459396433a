"""bench.tails: the order-statistic interval of a quantile, on cases with known answers."""

from __future__ import annotations

import math
import random

import pytest

from bench.tails import quantile_ci, quantile_ranks, ratio_ci, tenant_tails


def test_the_median_of_ten_is_bounded_by_the_second_and_ninth_values():
    # the textbook case: P(2 <= B <= 8), B ~ Bin(10, 1/2), is 1 - 2 * 11/1024 = 0.979; (3, 8) is 0.891
    assert quantile_ranks(10, 0.5) == (2, 9)
    ci = quantile_ci([float(x) for x in range(10, 0, -1)], 0.5)
    assert (ci.lo, ci.hi, ci.n) == (2.0, 9.0, 10)


def test_a_p99_has_an_upper_bound_from_368_values_at_95_percent():
    assert 0.99**367 > 0.025 >= 0.99**368  # P(every value under the p99) against the tail
    assert quantile_ranks(367, 0.99)[1] == 368  # past the sample: open
    assert quantile_ranks(368, 0.99)[1] == 368  # the max bounds it
    small = quantile_ci([float(x) for x in range(120)], 0.99)
    assert small.hi == math.inf and not small.resolved and math.isfinite(small.lo)
    big = quantile_ci([float(x) for x in range(400)], 0.99)
    assert big.resolved and big.lo <= big.value <= big.hi <= 399.0


def test_a_p95_needs_72_values():
    assert 0.95**71 > 0.025 >= 0.95**72
    assert quantile_ranks(71, 0.95)[1] == 72 and quantile_ranks(72, 0.95)[1] == 72


def test_the_interval_covers_the_true_quantile_at_least_as_often_as_it_says():
    rng = random.Random(7)
    for n, q in ((50, 0.5), (200, 0.9), (500, 0.99)):
        lo, hi = quantile_ranks(n, q)
        true = -math.log(1 - q)  # Exp(1)'s q-quantile
        covered = 0
        for _ in range(1000):
            xs = sorted(rng.expovariate(1.0) for _ in range(n))
            covered += (lo == 0 or xs[lo - 1] <= true) and (hi > n or true <= xs[hi - 1])
        assert covered >= 930, (n, q, covered)  # >= 0.95 less three binomial sd at 1000 trials


def test_a_ratio_is_met_missed_or_unresolved_by_its_whole_interval():
    alone = [0.1 * (1 + i / 1000) for i in range(1000)]  # 0.100-0.200
    same = ratio_ci(alone, alone, 0.99, 1.25)
    assert 0.9 < same.lo <= 1.0 <= same.hi < 1.1 and same.verdict == "met"
    twice = ratio_ci([2 * x for x in alone], alone, 0.99, 1.25)
    assert twice.lo > 1.25 and twice.verdict == "missed"
    few = ratio_ci([1.1 * x for x in alone[::10]], alone, 0.99, 1.25)  # 100 values: no upper bound
    assert few.hi == math.inf and few.lo < 1.25 and few.verdict == "unresolved"
    # a small sample cannot show a tail is met, but its lower bound alone can show it is missed
    assert ratio_ci([2 * x for x in alone[::10]], alone, 0.99, 1.25).verdict == "missed"
    with pytest.raises(ValueError):
        quantile_ranks(0, 0.5)


def test_the_tenant_table_has_a_row_per_tenant_with_its_verdicts():
    alone = {"a": [0.1 + i * 1e-4 for i in range(1000)], "b": [0.1 + i * 1e-4 for i in range(1000)]}
    per = {"a": [x * 1.0 for x in alone["a"]], "b": [x * 3.0 for x in alone["b"]]}
    md = tenant_tails(per, alone)
    rows = md.splitlines()[2:]
    assert len(rows) == 2 and rows[0].startswith("| a | 1000 |")
    assert rows[0].endswith("met |") and rows[1].endswith("missed |")
