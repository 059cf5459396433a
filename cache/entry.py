"""A cached answer: the complete non-stream response plus when and how it was made (pure).

An entry holds the answer the replica generated (the only prompt-derived text in it is what the answer
itself contains) and small metadata for headers (``age``), billing and metrics. No request text, no
tenant id, no PII mapping is ever part of an entry.

The answer is parsed JSON, so its objects are checked as ``dict``, not ``collections.abc.Mapping``
(whose ``isinstance`` is a Python-level ``__instancecheck__``: three calls a request, ``bench.profile
--calls``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

ENTRY_VERSION = 1
CACHEABLE_OBJECTS = frozenset({"chat.completion", "text_completion"})
CACHEABLE_FINISH = frozenset({"stop", "length", "tool_calls", "function_call"})


class EntryError(ValueError):
    """Bytes that are not an entry of this version."""


@dataclass(slots=True)
class Entry:
    response: dict[str, Any]
    created_at: float = field(default_factory=time.time)
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. {"source": "stream", "completion_tokens": 12}

    def age_s(self, now: float | None = None) -> float:
        return max(0.0, (time.time() if now is None else now) - self.created_at)

    def to_bytes(self) -> bytes:
        return orjson.dumps({"v": ENTRY_VERSION, "t": self.created_at, "m": self.meta, "r": self.response})

    @classmethod
    def from_bytes(cls, raw: bytes) -> Entry:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EntryError("entry is not JSON") from exc
        if not isinstance(obj, dict) or obj.get("v") != ENTRY_VERSION or not isinstance(obj.get("r"), dict):
            raise EntryError("entry of an unknown version")
        return cls(response=obj["r"], created_at=float(obj["t"]), meta=obj.get("m") or {})


def storable(response: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether a complete response may be cached, and why not (a metric label).

    Only successful completions are cached: every choice finished for a normal reason (not ``abort``,
    ``error`` or missing).
    """
    if response.get("object") not in CACHEABLE_OBJECTS:
        return False, "object"
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices:
        return False, "no_choices"
    for c in choices:
        if not isinstance(c, dict) or c.get("finish_reason") not in CACHEABLE_FINISH:
            return False, "finish_reason"
    return True, "ok"


def aborted(response: Mapping[str, Any]) -> bool:
    """A choice ended with ``finish_reason: "abort"``: vLLM's word for a request its engine gave up
    (the engine died, or the request was cancelled inside it). The answer is incomplete."""
    choices = response.get("choices")
    if isinstance(choices, list):  # a loop, not ``any`` over a generator: 3 calls less an answer
        for c in choices:
            if isinstance(c, dict) and c.get("finish_reason") == "abort":
                return True
    return False


def make_entry(response: dict[str, Any], *, source: str = "upstream", now: float | None = None) -> Entry:
    """An entry for ``response``; usage token counts go into the metadata (billing of hits)."""
    meta: dict[str, Any] = {"source": source}
    usage = response.get("usage")
    if isinstance(usage, dict):
        for k in ("prompt_tokens", "completion_tokens"):
            if isinstance(usage.get(k), int):
                meta[k] = usage[k]
    return Entry(response=response, created_at=time.time() if now is None else now, meta=meta)
