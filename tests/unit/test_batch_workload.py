"""bench.batch_workload: the issue's batch is seeded, shaped as described, valid, and plannable."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.batch_workload import URL, make_batch, plan_stats
from gateway.batch.validate import validate_input


def shared_chars(a: str, b: str) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@pytest.fixture(scope="module")
def wl():
    return make_batch()


def test_same_seed_same_batch_other_seed_other_batch() -> None:
    a, b, c = make_batch(requests=300), make_batch(requests=300), make_batch(seed=5, requests=300)
    assert a.jsonl() == b.jsonl() and a.jsonl() != c.jsonl()


def test_shape_of_the_default_batch(wl) -> None:
    assert len(wl) == 5000 and len(wl.templates) == 50
    used = Counter(wl.template_of)
    assert set(used) == set(range(50)) and max(used.values()) > 3 * min(used.values())  # skewed, all used
    for t in wl.templates:
        assert 1000 * 4 - 64 <= len(t.system) <= 4000 * 4 + 64  # system prompts of 1-4k tokens
    with_preamble = [t for t in wl.templates if t.preamble is not None]
    assert 10 <= len(with_preamble) <= 35
    families = Counter(t.preamble for t in with_preamble)
    assert max(families.values()) >= 2
    p = next(p for p, n in families.items() if n >= 2)
    a, b = [t.system for t in with_preamble if t.preamble == p][:2]
    assert shared_chars(a, b) >= 300 * 4  # a shared preamble of 300+ tokens
    alone = [t.system for t in wl.templates if t.preamble is None]
    assert shared_chars(*alone[:2]) < 20
    users = [line["body"]["messages"][1]["content"] for line in wl.lines]
    assert len(set(users)) == len(users)
    lengths = sorted(len(u) for u in users)
    assert lengths[0] < 40 * 4 and lengths[-1] > 250 * 4  # varied
    same_as_next = sum(x == y for x, y in zip(wl.template_of, wl.template_of[1:], strict=False))
    assert same_as_next < 0.1 * len(wl)  # shuffled: neighbours rarely share a template


def test_the_batch_passes_validation(wl, tmp_path: Path) -> None:
    path = tmp_path / "batch.jsonl"
    wl.write(path)
    v = validate_input(
        path,
        endpoint=URL,
        serves=lambda m: m == "sim-llama",
        max_file_bytes=200 << 20,
        max_line_bytes=16 << 20,
        max_lines=50_000,
        max_custom_id_chars=512,
        max_reported_errors=10,
    )
    assert v.ok and len(v.lines) == 5000 and v.model == "sim-llama"


def test_the_planner_keeps_each_template_on_one_replica(wl) -> None:
    stats = plan_stats(wl, 4)
    assert stats["templates_split"] <= 3  # n - 1 cuts at most
    assert stats["planned_over_oracle"] >= 0.99
    assert stats["work_max_over_mean"] <= 1.15
    assert stats["oracle_hit_rate"] > 0.85
