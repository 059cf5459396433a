"""Validation of a batch input file: every error named with its line, nothing passes half checked."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from gateway.batch.pace import Pacer
from gateway.batch.validate import read_bodies, read_body, validate_file, validate_input

URL = "/v1/chat/completions"


def line(custom_id: str, model: str = "m", url: str = URL, **body: object) -> dict:
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": url,
        "body": {"model": model, "messages": [{"role": "user", "content": custom_id}], **body},
    }


def write(tmp_path: Path, rows: list) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_bytes(b"".join((r if isinstance(r, bytes) else orjson.dumps(r)) + b"\n" for r in rows))
    return path


def check(path: Path, endpoint: str = URL, **kw: int):
    limits = {
        "max_file_bytes": 1 << 20,
        "max_line_bytes": 4096,
        "max_lines": 100,
        "max_custom_id_chars": 64,
        "max_reported_errors": 10,
    }
    limits.update(kw)
    v = validate_input(path, endpoint=endpoint, serves=lambda m: m in {"m", "other"}, **limits)
    # The gateway's driver (on the event loop, yielding between lines: here after every one) agrees.
    paced = asyncio.run(
        validate_file(
            path, endpoint=endpoint, serves=lambda m: m in {"m", "other"}, pace=Pacer(0.0), **limits
        )
    )
    assert paced == v
    return v


def codes(v) -> list[tuple[int | None, str]]:
    return [(e["line"], e["code"]) for e in v.errors]


def test_a_valid_file_yields_an_index_and_the_bodies_read_back(tmp_path: Path) -> None:
    rows = [line(f"req-{i}", max_tokens=i + 1) for i in range(5)]
    path = tmp_path / "in.jsonl"
    # CRLF line ends, a blank line and no newline at the end are all fine
    path.write_bytes(orjson.dumps(rows[0]) + b"\r\n\n" + b"\n".join(orjson.dumps(r) for r in rows[1:]))
    v = check(path)
    assert v.ok and v.model == "m" and v.errors == []
    assert [(x.number, x.custom_id) for x in v.lines] == [
        (1, "req-0"),
        (3, "req-1"),
        (4, "req-2"),
        (5, "req-3"),
        (6, "req-4"),
    ]
    assert read_body(path, v.lines[2])["max_tokens"] == 3
    assert [b["messages"][0]["content"] for _, b in read_bodies(path, v.lines)] == [
        f"req-{i}" for i in range(5)
    ]


def test_every_kind_of_bad_line_is_named_with_its_line_number(tmp_path: Path) -> None:
    rows = [
        line("ok-1"),
        b"{not json",
        b"[1, 2]",
        {"custom_id": "x", "method": "POST", "url": URL},  # no body
        line("ok-1"),  # duplicate custom_id
        line("wrong-url", url="/v1/embeddings"),
        {**line("get"), "method": "GET"},
        line("unknown-model", model="gpt-9"),
        line("other-model", model="other"),
        line("streams", stream=True),
        {"custom_id": "", "method": "POST", "url": URL, "body": {"model": "m", "messages": []}},
        {"custom_id": "no-model", "method": "POST", "url": URL, "body": {"messages": []}},
        {"custom_id": "no-messages", "method": "POST", "url": URL, "body": {"model": "m"}},
        line("long", padding="x" * 5000),
        b"\xff\xfe not utf-8",
        {"custom_id": 7, "method": "POST", "url": URL, "body": {"model": "m", "messages": []}},
        {"custom_id": "list-body", "method": "POST", "url": URL, "body": [1]},
    ]
    v = check(write(tmp_path, rows), max_reported_errors=100)
    assert not v.ok and v.error_count == 16
    assert codes(v) == [
        (2, "invalid_json_line"),
        (3, "invalid_json_line"),
        (4, "missing_required_parameter"),
        (5, "duplicate_custom_id"),
        (6, "url_mismatch"),
        (7, "invalid_request"),
        (8, "model_not_found"),
        (9, "model_mismatch"),
        (10, "invalid_request"),
        (11, "invalid_request"),
        (12, "missing_required_parameter"),
        (13, "missing_required_parameter"),
        (14, "line_too_large"),
        (15, "invalid_json_line"),
        (16, "invalid_request"),
        (17, "invalid_request"),
    ]
    by_line = {e["line"]: e for e in v.errors}
    assert by_line[5]["param"] == "custom_id" and "line 1" in by_line[5]["message"]
    assert by_line[9]["param"] == "body.model" and "line 1" in by_line[9]["message"]
    assert by_line[13]["param"] == "body.messages"
    assert by_line[10]["param"] == "body.stream"


def test_error_listing_is_bounded_but_the_count_is_exact(tmp_path: Path) -> None:
    v = check(write(tmp_path, [b"nope"] * 30), max_reported_errors=5)
    assert v.error_count == 30 and len(v.errors) == 5 and [e["line"] for e in v.errors] == [1, 2, 3, 4, 5]


def test_file_level_errors(tmp_path: Path) -> None:
    assert codes(check(write(tmp_path, []))) == [(None, "empty_file")]
    path = write(tmp_path, [line(f"r{i}") for i in range(12)])
    assert codes(check(path, max_lines=10)) == [(11, "too_many_tasks")]
    assert codes(check(path, max_file_bytes=1024)) == [(None, "file_too_large")]


def test_a_line_far_over_the_limit_is_never_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "in.jsonl"
    huge = b'{"custom_id": "huge", "pad": "' + b"x" * (3 << 20) + b'"}'
    with open(path, "wb") as f:
        f.write(orjson.dumps(line("a")) + b"\n")
        f.write(huge + b"\r\n")
        f.write(orjson.dumps(line("b")) + b"\n")
    v = check(path, max_file_bytes=8 << 20, max_line_bytes=4096)
    assert codes(v) == [(2, "line_too_large")]
    assert v.errors[0]["message"] == f"this line is {len(huge)} bytes, more than the limit of 4096"
    assert [x.custom_id for x in v.lines] == ["a", "b"]  # the line after it is indexed correctly
    assert read_body(path, v.lines[1])["messages"][0]["content"] == "b"


@pytest.mark.parametrize(
    ("endpoint", "body", "ok"),
    [
        ("/v1/completions", {"model": "m", "prompt": "hi"}, True),
        ("/v1/completions", {"model": "m", "messages": []}, False),
        ("/v1/embeddings", {"model": "m", "input": ["a", "b"]}, True),
        ("/v1/embeddings", {"model": "m", "prompt": "a"}, False),
    ],
)
def test_each_endpoint_needs_its_own_field(tmp_path: Path, endpoint: str, body: dict, ok: bool) -> None:
    v = check(
        write(tmp_path, [{"custom_id": "a", "method": "POST", "url": endpoint, "body": body}]),
        endpoint=endpoint,
    )
    assert v.ok is ok
