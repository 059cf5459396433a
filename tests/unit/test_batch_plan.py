"""router.batch_plan: requests that share a prefix run together, on one replica, balanced by work."""

from __future__ import annotations

import random
from array import array
from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from config.routing import RoutingConfig
from router.batch_plan import LinePrefix, Plan, expected_output_tokens, line_prefix, plan
from router.tokenizers import ApproxTokenizer

BS = 16


def _key(blocks: list[int]) -> bytes:
    return array("Q", blocks).tobytes()


def _lcp(a: LinePrefix, b: LinePrefix) -> int:
    n = 0
    for x, y in zip(array("Q", a.hashes), array("Q", b.hashes), strict=False):
        if x != y:
            break
        n += 1
    return n


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[LinePrefix], dict[int, int], int]:
    """Templates (some behind a shared preamble) of chained-looking block ids, lines of each with a
    unique suffix, shuffled. Returns the lines, each line's template, and the replica count."""
    rng = random.Random(draw(st.integers(0, 2**32)))
    preambles = [
        [rng.getrandbits(63) for _ in range(draw(st.integers(1, 8)))] for _ in range(draw(st.integers(0, 3)))
    ]
    lines: list[LinePrefix] = []
    template_of: dict[int, int] = {}
    for t in range(draw(st.integers(1, 8))):
        head = rng.choice(preambles) if preambles and rng.random() < 0.6 else []
        body = head + [rng.getrandbits(63) for _ in range(draw(st.integers(1, 12)))]
        for _ in range(draw(st.integers(1, 9))):
            blocks = body + [rng.getrandbits(63) for _ in range(rng.randint(0, 4))]
            key = len(lines)
            template_of[key] = t
            lines.append(
                LinePrefix(key, _key(blocks), len(blocks) * BS + rng.randint(0, BS - 1), rng.randint(0, 40))
            )
    rng.shuffle(lines)
    return lines, template_of, draw(st.integers(1, 5))


def _by_key(lines: list[LinePrefix]) -> dict[int, LinePrefix]:
    return {x.key: x for x in lines}


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.1, 0.3]))
def test_lines_sharing_a_prefix_are_grouped_together(case: tuple, tolerance: float) -> None:
    lines, template_of, n = case
    replicas = [f"r{i}" for i in range(n)]
    p = plan(lines, replicas, block_size=BS, warm_tokens=64, tolerance=tolerance)
    by = _by_key(lines)
    keys = [pl.key for r in p.ranges.values() for pl in r]
    assert sorted(keys) == sorted(by)  # every line exactly once
    assert list(p.ranges) == replicas
    for seq in p.ranges.values():
        x = [by[pl.key] for pl in seq]
        # Every shared prefix is one contiguous run on its replica: nothing that shares less with a
        # line sits between that line and one that shares more with it (a depth-first trie walk).
        for i, k, j in combinations(range(len(x)), 3):
            assert _lcp(x[i], x[j]) <= _lcp(x[i], x[k])
    # A template is split over replicas only where a cut falls: n - 1 at most.
    pairs = {(template_of[pl.key], r) for r, seq in p.ranges.items() for pl in seq}
    assert len(pairs) <= len(set(template_of.values())) + n - 1


@settings(max_examples=150, deadline=None)
@given(batches(), st.sampled_from([0.0, 0.1, 0.3]))
def test_ranges_balance_work_and_waits_point_back_within_a_range(case: tuple, tolerance: float) -> None:
    lines, _, n = case
    p = plan(lines, [f"r{i}" for i in range(n)], block_size=BS, warm_tokens=64, tolerance=tolerance)
    by = _by_key(lines)
    total = sum(p.work(r) for r in p.ranges)
    mean = total / n
    biggest = max(x.prompt_tokens + x.output_tokens for x in lines)
    for r, seq in p.ranges.items():
        assert p.work(r) <= mean * (1 + 2 * tolerance) + biggest
        pos = {pl.key: i for i, pl in enumerate(seq)}
        for i, pl in enumerate(seq):
            prev = _lcp(by[seq[i - 1].key], by[pl.key]) if i else 0
            assert pl.cached_tokens == min(prev * BS, by[pl.key].prompt_tokens)
            assert pl.work == by[pl.key].prompt_tokens - pl.cached_tokens + by[pl.key].output_tokens
            if pl.after is not None:
                assert pl.after in pos and pos[pl.after] < i  # an earlier line of the same replica
                lead = by[pl.after]
                assert _lcp(lead, by[pl.key]) * BS >= 64  # it brings the waiting line what it waits for
    assert p.cached_tokens <= p.oracle_cached_tokens <= p.prompt_tokens


def _template_lines(templates: int, per: int, prefix_blocks: int, seed: int = 7) -> list[LinePrefix]:
    rng = random.Random(seed)
    out = []
    for _t in range(templates):
        head = [rng.getrandbits(63) for _ in range(prefix_blocks)]
        for _ in range(per):
            blocks = head + [rng.getrandbits(63) for _ in range(2)]
            out.append(LinePrefix(len(out), _key(blocks), len(blocks) * BS, 10))
    rng.shuffle(out)
    return out


def _templates_per_replica(p: Plan, per: int) -> dict[str | None, set[int]]:
    return {r: {pl.key // per for pl in seq} for r, seq in p.ranges.items()}


def test_whole_templates_go_to_one_replica_when_a_boundary_is_within_tolerance() -> None:
    p = plan(_template_lines(8, 20, 64), ["a", "b", "c", "d"], block_size=BS, tolerance=0.1)
    placed = _templates_per_replica(p, 20)
    assert all(len(t) == 2 for t in placed.values())  # 8 templates, 2 whole ones each
    assert set().union(*placed.values()) == set(range(8))
    assert p.cached_tokens == p.oracle_cached_tokens  # no template prefix is prefilled twice
    works = [p.work(r) for r in p.ranges]
    assert max(works) == min(works)


def test_one_hot_prefix_is_spread_and_prefilled_once_per_replica() -> None:
    lines = _template_lines(1, 100, 128)
    p = plan(lines, ["a", "b", "c", "d"], block_size=BS, warm_tokens=256)
    assert [len(seq) for seq in p.ranges.values()] == [25, 25, 25, 25]
    assert p.oracle_cached_tokens - p.cached_tokens == 3 * 128 * BS  # 3 cuts: 3 more prefills of the prefix
    for seq in p.ranges.values():
        lead = seq[0]
        assert lead.after is None and lead.cached_tokens == 0
        assert all(pl.after == lead.key for pl in seq[1:])  # the rest wait for the replica's first line


def test_a_template_waits_for_its_preamble_only_when_the_preamble_is_worth_it() -> None:
    rng = random.Random(3)
    pre = [rng.getrandbits(63) for _ in range(4)]  # 64 tokens of shared preamble
    lines = []
    for _t in range(2):
        head = pre + [rng.getrandbits(63) for _ in range(32)]  # 512 tokens of template
        for _ in range(3):
            blocks = [*head, rng.getrandbits(63)]
            lines.append(LinePrefix(len(lines), _key(blocks), len(blocks) * BS, 0))
    (seq,) = plan(lines, ["a"], block_size=BS, warm_tokens=256).ranges.values()
    leads = [pl for pl in seq if pl.after is None]
    assert len(leads) == 2  # each template's first line: the 64-token preamble is not worth a wait
    assert leads[1].cached_tokens == 64
    for pl in seq:
        if pl.after is not None:
            assert pl.after in {x.key for x in leads} and pl.cached_tokens == 512 + 64
    (seq,) = plan(lines, ["a"], block_size=BS, warm_tokens=64).ranges.values()
    assert sum(pl.after is None for pl in seq) == 1  # now the second template waits for the preamble


def test_weights_and_no_replicas() -> None:
    lines = _template_lines(1, 90, 4)
    p = plan(lines, ["big", "small"], block_size=BS, tolerance=0.0, weights={"big": 2.0, "small": 1.0})
    assert abs(p.work("big") - 2 * p.work("small")) <= 2 * (6 * BS + 10)
    p = plan(lines, [], block_size=BS)
    assert list(p.ranges) == [None] and len(p) == 90
    assert len(plan([], ["a", "b"], block_size=BS)) == 0


def test_line_prefix_uses_the_routers_rendering_and_hashing() -> None:
    cfg = RoutingConfig()
    tok = ApproxTokenizer()
    system = {"role": "system", "content": "You are a careful translator. " * 40}

    def body(q: str) -> dict:
        return {"model": "m", "messages": [system, {"role": "user", "content": q}], "max_tokens": 7}

    a = line_prefix(1, "chat", body("first question"), "m", tok, cfg)
    b = line_prefix(2, "chat", body("second question"), "m", tok, cfg)
    c = line_prefix(3, "chat", body("first question"), "m", tok, cfg, salt="tenant salt")
    assert a.output_tokens == 7 and a.prompt_tokens > 256
    assert _lcp(a, b) * cfg.block_size >= 280  # the system prompt (300 tokens) is shared
    assert _lcp(a, b) < len(a.hashes) // 8
    assert a.hashes != c.hashes and len(a.hashes) == len(c.hashes)  # salted, same shape
    ids = line_prefix(4, "completions", {"model": "m", "prompt": list(range(100))}, "m", tok, cfg)
    assert ids.prompt_tokens == 100 and len(ids.hashes) == 6 * 8


def test_expected_output_tokens() -> None:
    assert expected_output_tokens("chat", {"max_completion_tokens": 9, "max_tokens": 5}, 256) == 9
    assert expected_output_tokens("chat", {"max_tokens": 5, "n": 3}, 256) == 15
    assert expected_output_tokens("completions", {"max_completion_tokens": 9}, 16) == 16
    assert expected_output_tokens("chat", {"max_tokens": True}, 256) == 256
    assert expected_output_tokens("embeddings", {"max_tokens": 5}, 256) == 0
