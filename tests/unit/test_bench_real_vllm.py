"""bench.real_vllm's pure parts: the request plans, and what each setup tells the gateway."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import pytest

from bench import real_vllm as B
from scripts.vllm_cpu import replicas as R


def test_a_uniform_plan_is_the_sequence_earlier_runs_used() -> None:
    # docs14x1k / docs6x3k rows stay comparable with the runs in docs/benchmarks.md: randrange per request.
    rng = random.Random(3 + 1)
    expected = []
    for _ in range(50):
        expected.append(rng.randrange(14))
        rng.choices(R.WORDS, k=6)
    assert [d for d, _ in B.plan(50, 14, 3)] == expected


def test_a_zipf_plan_asks_the_head_most() -> None:
    counts = Counter(d for d, _ in B.plan(2000, 16, 3, zipf_s=0.9))
    assert set(counts) <= set(range(16))
    # Zipf(0.9) over 16: rank 1 has 1 / sum(1 / k^0.9) ~ 0.24 of the requests, rank 16 ~ 0.02.
    assert 0.19 < counts[0] / 2000 < 0.29
    assert counts[0] > 3 * counts[7] > 0 and counts[15] < counts[0] / 6


def test_pooled_kv_doubles_the_bytes_and_keeps_the_unit() -> None:
    assert B.pooled_kv("16M") == "32M"
    assert B.pooled_kv("512k") == "1024k"


def _replicas() -> list:
    return [
        SimpleNamespace(url=f"http://127.0.0.1:{9000 + i}", spec=SimpleNamespace(replica_id=f"r{i}"))
        for i in range(2)
    ]


@pytest.mark.parametrize(
    ("setup", "capacity", "scrapes"),
    [
        ("approximate", 256, True),
        ("approximate_nocap", None, True),
        ("unpublished", None, False),
        ("published_x0.5", 128, True),
        ("published_x2", 512, True),
    ],
)
def test_each_setup_tells_the_gateway_what_it_says(setup: str, capacity: int | None, scrapes: bool) -> None:
    pol = B.policy(setup, _replicas(), "tcp://127.0.0.1:1", 256, 3)
    reps = pol.models[0].replicas
    assert [r.kv_capacity_blocks for r in reps] == [capacity, capacity]
    assert pol.scrape.enabled is scrapes
