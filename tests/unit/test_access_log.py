"""The access log writer: one JSON line per request, the lines of one loop iteration in one write."""

from __future__ import annotations

import asyncio
import logging

import orjson
import pytest

from gateway.observability import logs


class _Stream:
    def __init__(self) -> None:
        self.data = b""
        self.writes = 0

    def write(self, data: bytes) -> int:
        self.writes += 1
        self.data += data
        return len(data)


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> _Stream:
    fake = _Stream()
    monkeypatch.setattr(logs.ACCESS_LOG, "stream", fake)
    monkeypatch.setattr(logs.ACCESS_LOG, "enabled", True)
    return fake


async def test_lines_of_one_iteration_leave_in_one_write(stderr: _Stream) -> None:
    for i in range(50):
        logs.log_access({"request_id": f"r{i}", "status": 200})
    assert stderr.writes == 0  # nothing written while the iteration runs
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert stderr.writes == 1
    lines = stderr.data.splitlines()
    assert [orjson.loads(x)["request_id"] for x in lines] == [f"r{i}" for i in range(50)]
    assert all(orjson.loads(x)["logger"] == "prefix_gateway.access" for x in lines)
    logs.log_access({"request_id": "next"})
    await asyncio.sleep(0)
    assert stderr.writes == 2


def test_without_a_loop_a_line_is_written_at_once(stderr: _Stream) -> None:
    logs.log_access({"request_id": "sync"})
    assert orjson.loads(stderr.data)["request_id"] == "sync"


async def test_disabled_writes_nothing(stderr: _Stream, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs.ACCESS_LOG, "enabled", False)
    logs.log_access({"request_id": "x"})
    await asyncio.sleep(0)
    assert stderr.data == b""


def test_a_logged_exception_keeps_its_frames_and_types_not_its_messages() -> None:
    ssn, card = "-".join(("078", "05", "1120")), " ".join(["4111"] * 4)  # not in any source line

    def parse() -> None:
        try:
            {}[f"patient SSN {ssn}"]
        except KeyError as exc:
            raise ValueError(f"could not read 'my card is {card}'") from exc

    try:
        parse()
    except ValueError as exc:
        record = logging.LogRecord(
            "batch", logging.WARNING, __file__, 1, "batch: running a batch failed", (), None
        )
        record.exc_info = (type(exc), exc, exc.__traceback__)
    line = orjson.loads(logs.JsonFormatter().format(record))
    assert "ValueError" in line["exc"] and "KeyError" in line["exc"] and "in parse" in line["exc"]
    assert ssn not in line["exc"] and card not in line["exc"]
