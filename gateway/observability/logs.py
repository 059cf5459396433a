"""Structured JSON logs. Every line is one JSON object; prompt text never goes in one.

An exception logged with ``exc_info`` is written as its frames and types only
(``traceback_without_messages``): a message may quote the client's text (a JSON decoder's error quotes
the body, a key error names the key), and a log line is the wrong place to decide which ones do."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
import traceback
from typing import Any

import orjson

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", (), None).__dict__) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value
        if record.exc_info and record.exc_info[1] is not None:  # frames and types, never the messages
            out["exc"] = traceback_without_messages(record.exc_info[1])
        return orjson.dumps(out, default=str).decode()


def traceback_without_messages(exc: BaseException) -> str:
    """Where ``exc`` and the exceptions it was raised from were raised, each named by its type only: an
    exception's message may hold the client's text (a prompt, a header, a key), which no log line may
    carry, while its type and frames are the code's own."""
    parts: list[str] = []
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        frames = "".join(traceback.format_tb(current.__traceback__))
        parts.append(f"{frames}{type(current).__qualname__} (message withheld)")
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return "\n\nwhich was raised while handling:\n\n".join(parts)


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    configure_access_log()


class _AccessLog:
    """The access log's writer: lines of one event-loop iteration leave in one ``write`` to stderr.

    The stdlib path (``Logger.info`` → record → handler lock → ``write`` + ``flush`` per line) was 2.3 %
    of the gateway's CPU at concurrency 32 in a py-spy profile, and one syscall per request; here a line
    is serialised once (orjson) and appended, and the first line of an iteration schedules the flush
    with ``call_soon``, so a line is on its way before the loop waits again (no timer, nothing lost to a
    later crash but the lines of the iteration that crashed). ``enabled`` follows ``configure_access_log``
    (the process's CLI logging: an app embedded in another program logs no access lines unless it asks);
    lines go to the then-current ``sys.stderr``."""

    def __init__(self) -> None:
        self.enabled = False  # until the process configures its logging
        self.stream: Any = None  # a binary stream; None: the then-current sys.stderr
        self._lines: list[bytes] = []

    def write(self, fields: dict[str, object]) -> None:
        if not self.enabled:
            return
        fields["ts"] = round(time.time(), 3)
        fields["logger"] = "prefix_gateway.access"
        if not self._lines:
            try:
                asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a script): write at once
                self._lines.append(orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE))
                self.flush()
                return
        self._lines.append(orjson.dumps(fields, option=orjson.OPT_APPEND_NEWLINE))

    def flush(self) -> None:
        if not self._lines:
            return
        data = b"".join(self._lines)
        self._lines.clear()
        try:
            if self.stream is not None:
                self.stream.write(data)
                return
            sys.stderr.flush()  # what logging wrote before stays before
            sys.stderr.buffer.write(data)
            sys.stderr.flush()
        except (OSError, ValueError):  # stderr closed or gone: an access log must never fail a request
            pass


ACCESS_LOG = _AccessLog()


def configure_access_log(enabled: bool = True) -> None:
    ACCESS_LOG.enabled = enabled


def log_access(fields: dict[str, object]) -> None:
    """One JSON line per request: ids, tenant, model, replica, status, timings; no prompt, no PII."""
    ACCESS_LOG.write(fields)
