"""Validation of a batch's input file, all of it before any line runs.

One streaming pass over the JSONL file (never the whole file in memory): each line must be a JSON
object ``{custom_id, method, url, body}`` within ``max_line_bytes``, with a unique ``custom_id``,
``method`` POST, ``url`` the batch's endpoint, and a ``body`` naming one model the policy serves (one
model per batch, as OpenAI requires) with the field its endpoint needs. Any error fails the whole batch
in ``validating`` with OpenAI's ``errors`` (code, message, param, 1-based line); nothing is half run.
Sampling parameters are not checked here: each line goes through the gateway's own request path,
whose 400 lands in the error file as OpenAI's would.

What passes is an index of the lines (offset, length, custom_id), kept as columns (``LineIndex``): the
runner reads each body back by offset when it sends it, so a batch of 50,000 lines costs its index, not
its bodies, in memory. ``validate_input`` is the pass in one call; ``validate_file`` (what the gateway
runs) is the same pass on the event loop, lines read ``READ_BYTES`` at a time in a thread and checked
in slices of ``gateway.batch.pace.YIELD_S``.
Error codes are OpenAI's where it has one (``invalid_json_line``, ``duplicate_custom_id``,
``url_mismatch``, ``model_mismatch``, ``empty_file``, ``too_many_tasks``, ``model_not_found``,
``missing_required_parameter``).
"""

from __future__ import annotations

import asyncio
from array import array
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from gateway.batch.objects import ENDPOINTS, batch_error
from gateway.batch.pace import READ_BYTES, READ_LINES, Pacer

_REQUIRED = {"chat": "messages", "completions": "prompt", "embeddings": "input"}


@dataclass(frozen=True, slots=True)
class InputLine:
    """A validated line's place in the file, made on demand from a ``LineIndex``."""

    number: int  # 1-based line number in the file
    offset: int
    length: int
    custom_id: str


@dataclass(slots=True)
class LineIndex:
    """The validated lines as columns: three int arrays and a list of strings, four objects whatever the
    batch's size. The collector walks only objects that can hold references: one object per line (an
    ``InputLine`` each, as before, with the plan's per-line objects beside it) made every old-generation
    collection walk 150,000-200,000 objects with the GIL held, 95-150 ms each, while a 50,000-line batch
    was validated and planned (in threads, but the event loop needs the GIL): a 300-770 ms ``/health``
    answer (``python -m bench.batch_memory``). Arrays of ints and a list of ``str`` are not walked."""

    numbers: array[int] = field(default_factory=lambda: array("q"))
    offsets: array[int] = field(default_factory=lambda: array("q"))
    lengths: array[int] = field(default_factory=lambda: array("q"))
    custom_ids: list[str] = field(default_factory=list)

    def append(self, number: int, offset: int, length: int, custom_id: str) -> None:
        self.numbers.append(number)
        self.offsets.append(offset)
        self.lengths.append(length)
        self.custom_ids.append(custom_id)

    def __len__(self) -> int:
        return len(self.numbers)

    def __getitem__(self, i: int) -> InputLine:
        return InputLine(self.numbers[i], self.offsets[i], self.lengths[i], self.custom_ids[i])

    def __iter__(self) -> Iterator[InputLine]:
        return map(InputLine, self.numbers, self.offsets, self.lengths, self.custom_ids)


@dataclass(slots=True)
class Validated:
    lines: LineIndex = field(default_factory=LineIndex)
    model: str | None = None
    errors: list[dict[str, Any]] = field(default_factory=list)  # the first max_reported_errors
    error_count: int = 0

    @property
    def ok(self) -> bool:
        return self.error_count == 0


class _LineError(Exception):
    def __init__(self, code: str, message: str, param: str | None = None):
        super().__init__(message)
        self.code, self.message, self.param = code, message, param


def _scan(path: Path, max_line_bytes: int) -> Generator[tuple[int, int, bytes | None, int]]:
    """(line number, offset, line without its newline or None when longer than ``max_line_bytes``, its
    length) of every non-blank line. Reads at most ``max_line_bytes`` of a line into memory."""
    offset = number = 0
    cap = max_line_bytes + 2  # room for the line and its CRLF
    with open(path, "rb") as f:
        while raw := f.readline(cap):
            number += 1
            start, length = offset, len(raw)
            if len(raw) == cap and not raw.endswith(b"\n"):  # too long: skip to its end, unread
                while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
                    length += len(rest)
                length += len(rest)
                offset += length
                yield number, start, None, length - len(rest) + len(rest.rstrip(b"\r\n"))
                continue
            offset += length
            line = raw.rstrip(b"\r\n")
            if line and not line.isspace():  # (strip() would copy a line of max_line_bytes)
                yield number, start, line, len(line)


class _Checker:
    """Validation's state over the lines of one file, fed in order (``add``), by either driver."""

    def __init__(
        self,
        endpoint: str,
        serves: Callable[[str], bool],
        max_line_bytes: int,
        max_lines: int,
        max_custom_id_chars: int,
        max_reported_errors: int,
    ):
        self.endpoint, self.serves = endpoint, serves
        self.max_line_bytes, self.max_lines = max_line_bytes, max_lines
        self.max_custom_id_chars, self.max_reported_errors = max_custom_id_chars, max_reported_errors
        self.out = Validated()
        self.seen: dict[str, int] = {}  # custom_id -> its line (str -> int: not walked by the collector)
        self.count = self.model_line = 0

    def error(self, code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        out = self.out
        out.error_count += 1
        if len(out.errors) < self.max_reported_errors:
            out.errors.append(batch_error(code, message, line=line, param=param))

    def too_big(self, size: int, max_file_bytes: int) -> bool:
        if size > max_file_bytes:
            self.error(
                "file_too_large", f"the input file is {size} bytes, more than the limit of {max_file_bytes}"
            )
        return size > max_file_bytes

    def add(self, number: int, offset: int, raw: bytes | None, length: int) -> bool:
        """Check one line; False once the file holds more than ``max_lines`` (read no further)."""
        out, seen = self.out, self.seen
        self.count += 1
        if self.count > self.max_lines:
            self.error("too_many_tasks", f"a batch holds at most {self.max_lines} requests", line=number)
            return False
        try:
            if raw is None or length > self.max_line_bytes:
                raise _LineError(
                    "line_too_large",
                    f"this line is {length} bytes, more than the limit of {self.max_line_bytes}",
                )
            custom_id, model = _check_line(raw, self.endpoint, self.max_custom_id_chars)
            if custom_id in seen:
                raise _LineError(
                    "duplicate_custom_id",
                    f"custom_id {custom_id!r} is already used on line {seen[custom_id]}",
                    "custom_id",
                )
            seen[custom_id] = number
            if not self.serves(model):
                raise _LineError("model_not_found", f"the model {model!r} is not served here", "body.model")
            if out.model is None:
                out.model, self.model_line = model, number
            elif model != out.model:
                raise _LineError(
                    "model_mismatch",
                    f"a batch uses one model: line {self.model_line} uses {out.model!r}, this line {model!r}",
                    "body.model",
                )
        except _LineError as exc:
            self.error(exc.code, exc.message, line=number, param=exc.param)
            return True
        out.lines.append(number, offset, length, custom_id)
        return True

    def result(self) -> Validated:
        if not self.out.lines and not self.out.error_count:
            self.error("empty_file", "the input file holds no requests")
        return self.out


def validate_input(
    path: Path,
    *,
    endpoint: str,
    serves: Callable[[str], bool],
    max_file_bytes: int,
    max_line_bytes: int,
    max_lines: int,
    max_custom_id_chars: int,
    max_reported_errors: int,
) -> Validated:
    """Check every line of ``path`` for a batch on ``endpoint`` (a path such as ``/v1/chat/completions``),
    in one call (``validate_file``: the same on the event loop, paced)."""
    c = _Checker(endpoint, serves, max_line_bytes, max_lines, max_custom_id_chars, max_reported_errors)
    if c.too_big(path.stat().st_size, max_file_bytes):
        return c.out
    for item in _scan(path, max_line_bytes):
        if not c.add(*item):
            break
    return c.result()


async def validate_file(
    path: Path,
    *,
    endpoint: str,
    serves: Callable[[str], bool],
    max_file_bytes: int,
    max_line_bytes: int,
    max_lines: int,
    max_custom_id_chars: int,
    max_reported_errors: int,
    pace: Pacer | None = None,
) -> Validated:
    """``validate_input`` on the event loop: lines read ``READ_BYTES`` at a time in a thread, checked on
    the loop, which runs other tasks every ``YIELD_S`` (``gateway.batch.pace``)."""
    pace = pace or Pacer()
    c = _Checker(endpoint, serves, max_line_bytes, max_lines, max_custom_id_chars, max_reported_errors)
    if c.too_big((await asyncio.to_thread(path.stat)).st_size, max_file_bytes):
        return c.out
    lines = _scan(path, max_line_bytes)
    try:
        while items := await asyncio.to_thread(_take, lines):
            for item in items:
                if not c.add(*item):
                    return c.result()
                await pace()
    finally:
        await asyncio.to_thread(lines.close)
    return c.result()


def _take(lines: Iterator[tuple[int, int, bytes | None, int]]) -> list[tuple[int, int, bytes | None, int]]:
    """The next lines of a scan, ``READ_BYTES`` of them (at least one); [] at its end."""
    out, size = [], 0
    for item in lines:
        out.append(item)
        size += item[3] if item[2] is not None else 0
        if size >= READ_BYTES or len(out) >= READ_LINES:
            break
    return out


def _check_line(raw: bytes, endpoint: str, max_custom_id_chars: int) -> tuple[str, str]:
    """The line's custom_id and model, or a ``_LineError`` naming what is wrong."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _LineError("invalid_json_line", "this line is not parseable as valid JSON") from None
    if not isinstance(obj, dict):
        raise _LineError("invalid_json_line", "this line must be a JSON object")
    for name in ("custom_id", "method", "url", "body"):
        if name not in obj:
            raise _LineError("missing_required_parameter", f"'{name}' is a required property", name)
    custom_id = obj["custom_id"]
    if not isinstance(custom_id, str) or not 0 < len(custom_id) <= max_custom_id_chars:
        raise _LineError(
            "invalid_request",
            f"custom_id must be a string of 1 to {max_custom_id_chars} characters",
            "custom_id",
        )
    if obj["method"] != "POST":
        raise _LineError("invalid_request", "method must be POST", "method")
    if obj["url"] != endpoint:
        raise _LineError(
            "url_mismatch", f"the url {obj['url']!r} is not the batch's endpoint {endpoint}", "url"
        )
    body = obj["body"]
    if not isinstance(body, dict):
        raise _LineError("invalid_request", "body must be a JSON object", "body")
    model = body.get("model")
    if model is None:
        raise _LineError("missing_required_parameter", "'body.model' is a required property", "body.model")
    if not isinstance(model, str) or not model:
        raise _LineError("invalid_request", "body.model must be a non-empty string", "body.model")
    need = _REQUIRED[ENDPOINTS[endpoint]]
    if need not in body:
        raise _LineError(
            "missing_required_parameter", f"'body.{need}' is a required property", f"body.{need}"
        )
    if body.get("stream"):
        raise _LineError("invalid_request", "a batch request cannot stream", "body.stream")
    return custom_id, model


def read_bodies(path: Path, lines: Iterable[InputLine]) -> Iterator[tuple[InputLine, dict[str, Any]]]:
    """The bodies of validated lines, read back by their offsets (the file is immutable)."""
    with open(path, "rb") as f:
        for line in lines:
            f.seek(line.offset)
            yield line, orjson.loads(f.read(line.length))["body"]


def read_body(path: Path, line: InputLine) -> dict[str, Any]:
    return next(read_bodies(path, (line,)))[1]


async def iter_lines(
    path: Path, lines: Iterable[InputLine], pace: Pacer
) -> AsyncIterator[tuple[InputLine, bytes]]:
    """The text of validated lines (``read_bodies`` parses it), for the event loop: read ``READ_BYTES``
    at a time in a thread; ``pace`` between two lines (the caller's work on each counts)."""
    f = await asyncio.to_thread(open, path, "rb")
    try:
        todo = iter(lines)
        while True:
            chunk, size = [], 0
            for line in todo:
                chunk.append(line)
                size += line.length
                if size >= READ_BYTES or len(chunk) >= READ_LINES:
                    break
            if not chunk:
                return
            for line, raw in zip(chunk, await asyncio.to_thread(_read_raw, f, chunk), strict=True):
                yield line, raw
                await pace()
    finally:
        await asyncio.to_thread(f.close)


def _read_raw(f: BinaryIO, lines: list[InputLine]) -> list[bytes]:
    out = []
    for line in lines:
        f.seek(line.offset)
        out.append(f.read(line.length))
    return out
