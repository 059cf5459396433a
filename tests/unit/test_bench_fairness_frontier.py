from __future__ import annotations

import pytest

from bench.fairness import CALM, simulate, workload
from bench.fairness_frontier import _kw, _one, parse_point, report


def test_a_point_names_its_levers_and_leaves_the_rest_at_their_defaults():
    p = parse_point("headroom=2,reserved=1,tokens=1024")
    assert (p["headroom"], p["reserved"], p["tokens"]) == (2, 1, 1024)
    assert (p["prefill"], p["long"], p["batch"], p["slots"]) == (None, 0, None, 8)
    kw = _kw(parse_point("prefill=0,long=64,batch=12"))
    assert (kw["max_prefill"], kw["long_prefill"], kw["engine_batch"], kw["max_batched_tokens"]) == (
        0,
        64,
        12,
        8192,
    )
    for bad in ("headroom", "speed=3", "tokens=0", "reserved=-1"):
        with pytest.raises(ValueError):
            parse_point(bad)


def test_the_engine_flags_reach_the_engines_a_long_prefill_cap_splits_the_prefill():
    """``long_prefill`` is vLLM's --long-prefill-token-threshold: a 128-token uncached prefill capped
    at 32 a step takes four steps to its first token, so the well-behaved requests' own steps grow."""
    own = {}
    for long in (0, 32):
        reqs = workload(3.0, 1.0, 0.0, 0, seed=5)
        run = simulate("alone", reqs, 1, 4, 3.0, long_prefill=long)
        xs = [
            r.first - r.scheduled
            for r in run.reqs
            if r.tenant in CALM and r.first is not None and r.scheduled is not None
        ]
        assert len(xs) >= 8
        own[long] = sorted(xs)[len(xs) // 2]
    assert own[32] > 2.5 * own[0]


def test_reserved_slots_cut_the_floods_output_the_frontier_reports_it_against_fcfs():
    flood = 120.0
    res = {
        "alone": [_one("alone", _kw(parse_point("")), 6, flood, 6.0)],
        "FCFS": [_one("fifo", _kw(parse_point("")), 6, flood, 6.0)],
    }
    for text in ("headroom=2", "headroom=2,reserved=2"):
        p = parse_point(text)
        res[text] = [_one("fair", _kw(p), 6, flood, 6.0)]
        same = dict(
            _kw(p),
            slots=p["slots"] + p["headroom"],
            headroom=0,
            reserved=0,
            max_prefill=None,
            engine_batch=10,
        )
        res[f"FIFO@{text}"] = [_one("fifo", same, 6, flood, 6.0)]
    assert res["headroom=2,reserved=2"][0].tokens_per_s < 0.9 * res["headroom=2"][0].tokens_per_s
    md = report(res, ["headroom=2", "headroom=2,reserved=2"])
    first, parts = md.split("Where the well-behaved requests' time went")
    rows = [line for line in first.splitlines() if line.startswith("| headroom=2")]
    assert len(rows) == 2
    split = [line for line in parts.splitlines() if line.startswith(("| alone", "| headroom=2"))]
    assert len(split) == 3 and all(line.count(" of ") == 1 for line in split)  # off-home count per point
    out = [float(r.split("|")[6]) for r in rows]  # output x FCFS
    assert out[1] < out[0]
