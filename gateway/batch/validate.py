"""Validation of a batch's input file, all of it before any line runs.

One streaming pass over the JSONL file (never the whole file in memory): each line must be a JSON
object ``{custom_id, method, url, body}`` within ``max_line_bytes``, with a unique ``custom_id``,
``method`` POST, ``url`` the batch's endpoint, and a ``body`` naming one model the policy serves (one
model per batch, as OpenAI requires) with the field its endpoint needs. Any error fails the whole batch
in ``validating`` with OpenAI's ``errors`` (code, message, param, 1-based line); nothing is half run.
Sampling parameters are not checked here: each line goes through the gateway's own request path,
whose 400 lands in the error file as OpenAI's would.

What passes is an index of the lines (offset, length, custom_id): the runner reads each body back by
offset when it sends it, so a batch of 50,000 lines costs its index, not its bodies, in memory.
Error codes are OpenAI's where it has one (``invalid_json_line``, ``duplicate_custom_id``,
``url_mismatch``, ``model_mismatch``, ``empty_file``, ``too_many_tasks``, ``model_not_found``,
``missing_required_parameter``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gateway.batch.objects import ENDPOINTS, batch_error

_REQUIRED = {"chat": "messages", "completions": "prompt", "embeddings": "input"}


@dataclass(frozen=True, slots=True)
class InputLine:
    number: int  # 1-based line number in the file
    offset: int
    length: int
    custom_id: str


@dataclass(slots=True)
class Validated:
    lines: list[InputLine] = field(default_factory=list)
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


def _scan(path: Path, max_line_bytes: int) -> Iterator[tuple[int, int, bytes | None, int]]:
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
            if line.strip():
                yield number, start, line, len(line)


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
    """Check every line of ``path`` for a batch on ``endpoint`` (a path such as ``/v1/chat/completions``)."""
    out = Validated()

    def error(code: str, message: str, line: int | None = None, param: str | None = None) -> None:
        out.error_count += 1
        if len(out.errors) < max_reported_errors:
            out.errors.append(batch_error(code, message, line=line, param=param))

    size = path.stat().st_size
    if size > max_file_bytes:
        error("file_too_large", f"the input file is {size} bytes, more than the limit of {max_file_bytes}")
        return out
    seen: dict[str, int] = {}
    model_line = 0
    for count, (number, offset, raw, length) in enumerate(_scan(path, max_line_bytes), start=1):
        if count > max_lines:
            error("too_many_tasks", f"a batch holds at most {max_lines} requests", line=number)
            break
        try:
            if raw is None or length > max_line_bytes:
                raise _LineError(
                    "line_too_large", f"this line is {length} bytes, more than the limit of {max_line_bytes}"
                )
            custom_id, model = _check_line(raw, endpoint, max_custom_id_chars)
            if custom_id in seen:
                raise _LineError(
                    "duplicate_custom_id",
                    f"custom_id {custom_id!r} is already used on line {seen[custom_id]}",
                    "custom_id",
                )
            seen[custom_id] = number
            if not serves(model):
                raise _LineError("model_not_found", f"the model {model!r} is not served here", "body.model")
            if out.model is None:
                out.model, model_line = model, number
            elif model != out.model:
                raise _LineError(
                    "model_mismatch",
                    f"a batch uses one model: line {model_line} uses {out.model!r}, this line {model!r}",
                    "body.model",
                )
        except _LineError as exc:
            error(exc.code, exc.message, line=number, param=exc.param)
            continue
        out.lines.append(InputLine(number, offset, length, custom_id))
    if not out.lines and not out.error_count:
        error("empty_file", "the input file holds no requests")
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
