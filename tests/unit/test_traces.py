"""Trace readers (Mooncake, Qwen-Bailian), the prompts built from them, and the oracle and pooled bound."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from bench.oracle import oracle
from bench.traces import (
    BAILIAN,
    MOONCAKE,
    Scale,
    TraceError,
    read_lines,
    read_trace,
    trace_workload,
    working_set_blocks,
)
from sim.kvcache import block_hashes
from sim.prompt import render_chat


def lines(*objs: object) -> list[bytes]:
    return [orjson.dumps(o) for o in objs]


MOONCAKE_LINES = lines(
    {"timestamp": 0, "input_length": 1100, "output_length": 10, "hash_ids": [0, 1, 2]},
    {"timestamp": 1500, "input_length": 1600, "output_length": 20, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 2000, "input_length": 1000, "output_length": 5, "hash_ids": [9, 10]},
)


def test_mooncake_records() -> None:
    recs = list(read_lines(MOONCAKE_LINES, MOONCAKE))
    assert [r.at_s for r in recs] == [0.0, 1.5, 2.0]  # ms to seconds
    assert recs[1].hash_ids == (0, 1, 3, 4) and recs[1].input_length == 1600 and recs[1].output_length == 20
    assert recs[0].chat_id is None and recs[0].parent_chat_id is None


def test_bailian_records_and_turns() -> None:
    recs = list(
        read_lines(
            lines(
                {
                    "chat_id": 7,
                    "parent_chat_id": -1,
                    "timestamp": 61.114,
                    "input_length": 40,
                    "output_length": 3,
                    "type": "text",
                    "turn": 1,
                    "hash_ids": [1, 2, 3],
                },
                {
                    "chat_id": 8,
                    "parent_chat_id": 7,
                    "timestamp": 62.5,
                    "input_length": 70,
                    "output_length": 4,
                    "type": "search",
                    "turn": 2,
                    "hash_ids": [1, 2, 3, 4, 5],
                },
            ),
            BAILIAN,
        )
    )
    assert recs[0].at_s == 61.114 and recs[0].parent_chat_id is None and recs[0].chat_id == 7
    assert recs[1].parent_chat_id == 7 and recs[1].turn == 2 and recs[1].kind == "search"
    wl = trace_workload(recs, Scale(BAILIAN), "b", "b")
    assert wl.requests[1].after == 0  # turn 2 waits for turn 1
    assert wl.requests[0].at == 0.0 and wl.requests[1].at == pytest.approx(1.386)


@pytest.mark.parametrize(
    ("line", "needle"),
    [
        (b"{not json", "unexpected"),
        (b'{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [0]}', "timestamp"),
        (b'{"timestamp": 1, "input_length": 0, "output_length": 1, "hash_ids": []}', "input_length"),
        (b'{"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}', "hash_ids"),
        (
            b'{"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [0, 1]}',
            "2 ids for 1025 tokens",
        ),
        (b"[1, 2]", "JSON object"),
    ],
)
def test_malformed_lines_name_their_line(line: bytes, needle: str) -> None:
    with pytest.raises(TraceError) as info:
        list(read_lines([MOONCAKE_LINES[0], line], MOONCAKE, "t.jsonl"))
    assert str(info.value).startswith("t.jsonl:2: ") and needle in str(info.value)


def test_bailian_bad_parent_is_rejected() -> None:
    bad = {"chat_id": 1, "parent_chat_id": "x", "timestamp": 1, "input_length": 16, "output_length": 1,
           "hash_ids": [1]}  # fmt: skip
    with pytest.raises(TraceError, match="<trace>:1: 'parent_chat_id'"):
        list(read_lines(lines(bad), BAILIAN))


def test_read_trace_from_a_file_sorts_and_limits(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join([MOONCAKE_LINES[1], b"", MOONCAKE_LINES[0], MOONCAKE_LINES[2]]) + b"\n")
    recs = read_trace(path, MOONCAKE, limit=2)
    assert [r.at_s for r in recs] == [0.0, 1.5]


def sim_blocks(body: dict) -> list[int]:
    return block_hashes(render_chat(body), block_size=16, bytes_per_token=4)


@pytest.mark.parametrize("token_scale", [1.0, 4.0, 8.0, 32.0])
def test_equal_ids_make_equal_simulator_blocks(token_scale: float) -> None:
    """Two prompts share exactly the replica blocks of the trace blocks they share (plus the head)."""
    scale = Scale(MOONCAKE, token_scale)
    recs = list(read_lines(MOONCAKE_LINES, MOONCAKE))
    wl = trace_workload(recs, scale, "m", "m")
    a, b, c = (sim_blocks(r.body) for r in wl.requests)
    per = scale.block_tokens // 16  # replica blocks per trace block
    shared = 0
    while shared < min(len(a), len(b)) and a[shared] == b[shared]:
        shared += 1
    assert shared == 1 + 2 * per  # the head block, then trace blocks 0 and 1
    assert a[0] == c[0] and a[1] != c[1]  # only the head is common with an unrelated prompt
    # Prompt lengths follow the trace, scaled: about input_length / k tokens (+ template).
    tokens_a = len(render_chat(wl.requests[0].body)) / 4
    assert tokens_a == pytest.approx(16 + 1100 / token_scale, abs=8)
    assert wl.requests[1].body["max_tokens"] == max(1, round(20 / token_scale))


def test_same_id_same_text_across_requests_and_runs() -> None:
    scale = Scale(MOONCAKE, 8)
    recs = list(read_lines(MOONCAKE_LINES, MOONCAKE))
    one = trace_workload(recs, scale, "m", "m")
    two = trace_workload(recs, scale, "m", "m")
    assert [r.body for r in one.requests] == [r.body for r in two.requests]
    salted = trace_workload(recs, scale, "m", "m", salt="other")
    assert sim_blocks(salted.requests[0].body)[1] != sim_blocks(one.requests[0].body)[1]


def test_scale_bounds_and_exactness() -> None:
    assert Scale(MOONCAKE, 8).exact and Scale(MOONCAKE, 8).block_tokens == 64
    assert not Scale(MOONCAKE, 3).exact  # 171 tokens: not whole 16-token blocks
    assert Scale(BAILIAN).exact
    with pytest.raises(ValueError):
        Scale(MOONCAKE, 0)
    with pytest.raises(ValueError):
        Scale(BAILIAN, 32)


def test_working_set_and_pooled_bound() -> None:
    scale = Scale(MOONCAKE, 8)
    recs = list(read_lines(MOONCAKE_LINES, MOONCAKE))
    assert working_set_blocks(recs, scale) == 1 + 4 * 7  # head + 7 distinct trace blocks of 4 blocks
    bodies = [r.body for r in trace_workload(recs, scale, "m", "m").requests]
    full = oracle(bodies)
    pooled_all = oracle(bodies, capacity_blocks=working_set_blocks(recs, scale))
    pooled_small = oracle(bodies, capacity_blocks=6)
    assert pooled_all.hit_tokens == full.hit_tokens > 0  # a pool of the whole working set loses nothing
    assert pooled_small.hit_tokens < full.hit_tokens  # 6 blocks cannot keep request 0 for request 1
    assert full.per_request[1][1] == 16 + 2 * 64  # head + trace blocks 0 and 1
    with pytest.raises(ValueError):
        oracle(bodies, capacity_blocks=0)
