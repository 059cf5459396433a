"""The question of a chat request and everything around it (pure).

A semantic key is made of two parts: the *question* (the last user turn, normalised) that the
fingerprint or the embedding reads, and the *context* (everything else that changes the answer: model,
system prompt, earlier turns, tools, sampling parameters), which must be byte-for-byte equal for two
requests to share an answer. The context is ``cache.keys.canonical_request`` of the request without its
last turn, so it follows exactly the exact cache's rules of what matters.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from cache.keys import CanonicalError, canonical_request


@dataclass(frozen=True, slots=True)
class Question:
    raw: str  # the last user turn as sent (used for guard features, never stored or logged)
    context: bytes  # canonical JSON of the request without its last user turn


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and content:
        parts = []
        for p in content:
            if not isinstance(p, Mapping) or p.get("type") != "text" or not isinstance(p.get("text"), str):
                return None
            parts.append(p["text"])
        return "\n".join(parts)
    return None


def split_question(endpoint: str, body: Mapping[str, Any], max_chars: int) -> Question | str:
    """The question and its context, or the reason the request has none (a metric label)."""
    if endpoint != "chat":
        return "not_chat"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no_messages"
    last = messages[-1]
    if not isinstance(last, Mapping) or last.get("role") != "user":
        return "last_turn_not_user"
    text = _text_of(last.get("content"))
    if text is None:
        return "non_text_content"
    if len(text) > max_chars:
        return "too_long"
    if not text.strip():
        return "empty"
    try:
        rest = canonical_request(endpoint, {**body, "messages": messages[:-1]})
        context = orjson.dumps(rest, option=orjson.OPT_SORT_KEYS)
    except (CanonicalError, TypeError):
        return "not_canonical"
    return Question(raw=text, context=context)
