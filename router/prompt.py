"""Canonical prompt of a request: one string in the order the model reads it.

Only the router reads the rendering (it is tokenized and hashed, never logged or stored). The format is
built from self-delimiting pieces so that a conversation's next turn renders as the previous turn plus
more text: ``render(messages + [m]) == render(messages) + render([m])`` minus the shared tools header.

Layout of a chat request::

    \\x02tools\\x1f<tools JSON, sorted keys>          (only when tools are given)
    \\x1e<role>\\x1f<content>[\\x1d<key>=<JSON>...]   (once per message, in order)

Content parts: text verbatim; image, audio and file parts by an xxh3-128 digest of their URL or data,
so a 5 MB data URL costs one hash and a few bytes of rendering. Separators are ASCII control characters;
a prompt containing them could in principle render like another, which costs at worst a routing
mismatch, never a wrong answer (the replica sees the real request).

The rendering is produced piece by piece (``prompt_pieces``): its consumers (the router's tokenizer,
which keeps only the tokens it hashes; billing's digest of a marked prefix) read it as a stream, so a
4 MB prompt never becomes a 4 MB string plus its 4 MB encoding plus a list of every piece.
``render_prompt`` joins the pieces, for callers that want the string.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import orjson
import xxhash

_SORTED = orjson.OPT_SORT_KEYS
# Keys of a message that do not change what the model reads.
_SKIP_MESSAGE_KEYS = frozenset(("role", "content", "cache_control"))
# A separator token id between the prompts of a batched token-id completions request.
BATCH_SEPARATOR_ID = 0xFFFFFFFF


# The field holding the text of each endpoint that is not chat (vLLM's pass-through endpoints too).
_TEXT_FIELD = {
    "completions": "prompt",
    "tokenize": "prompt",
    "detokenize": "tokens",
    "rerank": "query",
    "score": "text_1",
}


def prompt_pieces(endpoint: str, body: Mapping[str, Any]) -> Iterator[str] | list[int]:
    """A request's rendering as a stream of string pieces; token-id completions prompts come back as a
    list of ids."""
    if endpoint == "chat" or (endpoint in ("tokenize", "pooling") and "messages" in body):
        messages = body.get("messages")
        if not isinstance(messages, list):  # malformed: still rendered, the gateway rejects it anyway
            messages = [messages] if messages is not None else []
        return chat_pieces(messages, body.get("tools"))
    prompt = render_completion_prompt(body.get(_TEXT_FIELD.get(endpoint, "input")))
    return prompt if isinstance(prompt, list) else iter((prompt,))


def render_prompt(endpoint: str, body: Mapping[str, Any]) -> str | list[int]:
    """Render a request's prompt; token-id completions prompts come back as a list of ids."""
    pieces = prompt_pieces(endpoint, body)
    return pieces if isinstance(pieces, list) else "".join(pieces)


def render_chat(messages: Sequence[Any], tools: Any = None) -> str:
    """Tools first (sorted-key JSON), then each message as role + content, in order."""
    return "".join(chat_pieces(messages, tools))


def chat_pieces(messages: Sequence[Any], tools: Any = None) -> Iterator[str]:
    """``render_chat``, piece by piece."""
    if tools:
        yield "\x02tools\x1f"
        if isinstance(tools, list):  # a cache_control marker on a tool does not change what the model reads
            tools = [
                {k: v for k, v in t.items() if k != "cache_control"} if isinstance(t, Mapping) else t
                for t in tools
            ]
        yield _json(tools)
    for message in messages:
        # The usual message, ``{"role": ..., "content": "<text>"}``: its two pieces here, as
        # ``_message_pieces`` renders them (no other key is rendered for a two-key message with a
        # content), without a generator of its own (3 calls a message, ``python -m bench.profile
        # --calls``; tests/unit/test_prompt.py compares both ways).
        if (
            isinstance(message, dict)
            and len(message) == 2
            and isinstance(content := message.get("content"), str)
        ):
            yield f"\x1e{message.get('role', '')}\x1f"
            yield content
            continue
        yield from _message_pieces(message)


def render_completion_prompt(prompt: Any) -> str | list[int]:
    """A completions prompt: a string, a list of strings, token ids, or a list of token-id lists."""
    if prompt is None:
        return ""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(_is_id(t) for t in prompt):
            return [t & 0xFFFFFFFF for t in prompt]
        if all(isinstance(p, str) for p in prompt):
            return "\x1e".join(prompt)
        if all(isinstance(p, list) and all(_is_id(t) for t in p) for p in prompt):
            ids: list[int] = []
            for i, part in enumerate(prompt):
                if i:
                    ids.append(BATCH_SEPARATOR_ID)
                ids.extend(t & 0xFFFFFFFF for t in part)
            return ids
    return _json(prompt)


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _message_pieces(message: Any) -> Iterator[str]:
    # ``dict`` first: a parsed body's messages are dicts, and ``isinstance(x, Mapping)`` alone is an ABC
    # check (two Python-level calls each time, ``python -m bench.profile --calls``).
    if not isinstance(message, (dict, Mapping)):
        yield "\x1e?\x1f"
        yield _json(message)
        return
    yield f"\x1e{message.get('role', '')}\x1f"
    content = message.get("content")
    if isinstance(content, str):
        yield content
    elif isinstance(content, list):
        for part in content:
            yield _render_part(part)
    elif content is not None:
        yield _json(content)
    if len(message) > 2 or "content" not in message:
        for key in sorted(k for k in message if k not in _SKIP_MESSAGE_KEYS):
            yield f"\x1d{key}="
            yield _json(message[key])


def _render_part(part: Any) -> str:
    """One content part: text verbatim, media by digest, anything else as sorted JSON."""
    if isinstance(part, str):
        return part
    if not isinstance(part, Mapping):
        return _json(part)
    kind = part.get("type")
    if kind == "text":
        return str(part.get("text", ""))
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url", "") if isinstance(image, Mapping) else image
        detail = image.get("detail", "") if isinstance(image, Mapping) else ""
        return f"\x1cimage:{_digest(url)}:{detail}\x1c"
    if kind == "input_audio":
        audio = part.get("input_audio")
        data = audio.get("data", "") if isinstance(audio, Mapping) else audio
        fmt = audio.get("format", "") if isinstance(audio, Mapping) else ""
        return f"\x1caudio:{_digest(data)}:{fmt}\x1c"
    if kind in ("file", "video_url", "audio_url"):
        return f"\x1c{kind}:{_digest(part.get(kind))}\x1c"
    return "\x1c" + _json({k: v for k, v in part.items() if k != "cache_control"}) + "\x1c"


def _digest(value: Any) -> str:
    """xxh3-128 of a URL, a base64 payload or any JSON value: fixed size whatever the media size."""
    data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else _json(value).encode()
    return xxhash.xxh3_128_hexdigest(data)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=_SORTED).decode()
    except TypeError:
        return repr(value)
