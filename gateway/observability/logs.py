"""Structured JSON logs. Every line is one JSON object; prompt text never goes in one."""

from __future__ import annotations

import logging
import sys
import time

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
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def configure_logging(level: str = "info") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    configure_access_log()


class RawFormatter(logging.Formatter):
    """For lines that are already JSON (the access log): no second serialisation."""

    def format(self, record: logging.LogRecord) -> str:
        return record.getMessage()


access_log = logging.getLogger("prefix_gateway.access")


def configure_access_log() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RawFormatter())
    access_log.handlers[:] = [handler]
    access_log.propagate = False
    access_log.setLevel(logging.INFO)


def log_access(fields: dict[str, object]) -> None:
    """One JSON line per request: ids, tenant, model, replica, status, timings; no prompt, no PII.

    Serialised once with orjson (the per-request path is hot; ``logging``'s ``extra`` costs more)."""
    if access_log.isEnabledFor(logging.INFO):
        fields["ts"] = round(time.time(), 3)
        fields["logger"] = "prefix_gateway.access"
        access_log.info(orjson.dumps(fields).decode())
