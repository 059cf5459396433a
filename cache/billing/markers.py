"""Explicit prompt-cache markers (``"cache_control": {"type": "ephemeral"}``): find them, strip them.

Pure functions over the client's parsed JSON body; the input is never mutated. The body is parsed
JSON, so its objects are ``dict``, its arrays ``list``: the checks are by those concrete types, not the
``collections.abc`` ABCs, whose ``isinstance`` is a Python-level ``__instancecheck__`` (12 of a
request's ~1,000 Python calls before, ``python -m bench.profile --calls``; none now).

Where a marker may sit (chat bodies):
- on a content part of a message whose ``content`` is a list (any role, system included);
- on a message object itself (Anthropic style: the whole message ends the prefix);
- on a tool definition in ``tools``: the prefix is then the tools alone (no messages).

The marked prefix runs from the start of the prompt to the *last* marker (in prompt order: tools, then
messages in order, parts in order). ``find_markers`` returns it as a truncated body, markers removed,
that the gateway renders and tokenizes with the same prompt renderer it routes with.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config.billing import RulesConfig

MARKER_KEY = "cache_control"
DEFAULT_MAX_MARKERS = RulesConfig().max_markers


class MarkerError(ValueError):
    """A request whose markers cannot be honoured: the gateway answers 400 invalid_request_error."""


class TooManyMarkers(MarkerError):
    def __init__(self, count: int, limit: int):
        self.count = count
        self.limit = limit
        super().__init__(f"at most {limit} cache_control markers are allowed per request, got {count}")


class InvalidMarker(MarkerError):
    pass


@dataclass(frozen=True, slots=True)
class MarkerPosition:
    """``message`` is the message index (-1 for a tool marker); ``part`` the content-part index or None."""

    message: int
    part: int | None


@dataclass(frozen=True, slots=True)
class MarkedPrefix:
    body: dict[str, Any]
    """The request truncated after the last marker, markers removed: render and tokenize it."""
    count: int
    positions: tuple[MarkerPosition, ...]

    @property
    def last(self) -> MarkerPosition:
        return self.positions[-1]


def _check_marker(value: Any, where: str) -> None:
    if not isinstance(value, dict) or value.get("type") != "ephemeral":
        raise InvalidMarker(f'{where}: cache_control must be {{"type": "ephemeral"}}')


def _positions(body: Mapping[str, Any]) -> list[MarkerPosition]:
    found: list[MarkerPosition] = []
    if "tools" in body and isinstance(tools := body["tools"], list):  # mostly absent: ``in``, no call
        for t, tool in enumerate(tools):
            if isinstance(tool, dict) and MARKER_KEY in tool:
                _check_marker(tool[MARKER_KEY], f"tools[{t}]")
                found.append(MarkerPosition(-1, None))
    messages = body.get("messages")
    if not isinstance(messages, list):
        return found
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            continue
        content = msg.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if isinstance(part, dict) and MARKER_KEY in part:
                    _check_marker(part[MARKER_KEY], f"messages[{i}].content[{j}]")
                    found.append(MarkerPosition(i, j))
        if MARKER_KEY in msg:
            _check_marker(msg[MARKER_KEY], f"messages[{i}]")
            found.append(MarkerPosition(i, None))
    return found


def find_markers(body: Mapping[str, Any], max_markers: int = DEFAULT_MAX_MARKERS) -> MarkedPrefix | None:
    """The marked prefix of a chat body, or None without markers.

    Raises ``TooManyMarkers`` past ``max_markers`` and ``InvalidMarker`` for a marker that is not
    ``{"type": "ephemeral"}`` (both ``ValueError``: the gateway maps them to 400).
    """
    positions = _positions(body)
    if not positions:
        return None
    if len(positions) > max_markers:
        raise TooManyMarkers(len(positions), max_markers)
    last = positions[-1]
    truncated = {k: v for k, v in body.items() if k != "messages"}
    if last.message < 0:
        truncated["messages"] = []
    else:
        messages = list(body["messages"][: last.message + 1])
        if last.part is not None:
            msg = dict(messages[-1])
            msg["content"] = list(msg["content"][: last.part + 1])
            messages[-1] = msg
        truncated["messages"] = messages
    return MarkedPrefix(body=strip_markers(truncated), count=len(positions), positions=tuple(positions))


def _without_key(d: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k != MARKER_KEY}


def _strip_list(items: Any, strip_item: Any) -> Any:
    if not isinstance(items, list):
        return items
    return [strip_item(x) for x in items]


def _strip_message(msg: Any) -> Any:
    if not isinstance(msg, dict):
        return msg
    out = _without_key(msg) if MARKER_KEY in msg else msg
    content = msg.get("content")
    if isinstance(content, list) and any(isinstance(p, dict) and MARKER_KEY in p for p in content):
        out = dict(out)
        out["content"] = [_without_key(p) if isinstance(p, dict) else p for p in content]
    return out


def _strip_tool(tool: Any) -> Any:
    return _without_key(tool) if isinstance(tool, dict) and MARKER_KEY in tool else tool


def strip_markers(body: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of ``body`` without any ``cache_control`` key on messages, content parts or tools.

    The input is not mutated. The top-level dict is always new; objects that had no marker are shared
    with the input (copy-on-write), so do not mutate nested values of the result in place.
    Key order and message order are kept.
    """
    out = dict(body)
    if "messages" in out:
        out["messages"] = _strip_list(out["messages"], _strip_message)
    if "tools" in out:
        out["tools"] = _strip_list(out["tools"], _strip_tool)
    return out
