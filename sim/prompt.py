"""Turn request bodies into the byte string the simulated model "sees": pure, no I/O.

The chat template is fixed and simple: tools first (JSON, sorted keys), then one
``<|role|>\\n content \\n`` section per message, then the generation prompt ``<|assistant|>\\n``.
An assistant message renders as exactly that generation prompt followed by its content, so the
prompt of a conversation's next turn starts with the whole prompt of the previous turn.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any

import orjson


class PromptError(ValueError):
    """The request does not carry a usable prompt (answered with 400)."""


def _part_text(part: Any) -> str:
    if isinstance(part, str):
        return part
    if not isinstance(part, dict):
        raise PromptError("content parts must be objects")
    kind = part.get("type")
    if kind == "text":
        text = part.get("text")
        if not isinstance(text, str):
            raise PromptError("a text content part needs a string 'text'")
        return text
    # Images, audio, files: stand-ins of fixed size derived from their data, never the data itself.
    payload = orjson.dumps(part, option=orjson.OPT_SORT_KEYS)
    return f"<{kind}:{hashlib.sha256(payload).hexdigest()[:16]}>"


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_part_text(p) for p in content)
    raise PromptError("message content must be a string or a list of parts")


def render_chat(body: dict[str, Any]) -> bytes:
    """Render ``messages`` (and ``tools``) of a chat request to prompt bytes."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise PromptError("'messages' must be a non-empty list")
    out: list[str] = []
    tools = body.get("tools")
    if tools:
        out.append("<|tools|>\n")
        out.append(orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode())
        out.append("\n")
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise PromptError("each message needs a string 'role'")
        out.append(f"<|{msg['role']}|>\n")
        out.append(_content_text(msg.get("content")))
        tool_calls = msg.get("tool_calls")
        if tool_calls:
            out.append(orjson.dumps(tool_calls, option=orjson.OPT_SORT_KEYS).decode())
        out.append("\n")
    out.append("<|assistant|>\n")
    return "".join(out).encode("utf-8")


def render_completion(body: dict[str, Any], bytes_per_token: int) -> tuple[bytes, int]:
    """Prompt bytes and the bytes-per-token to count them with, for a completions request.

    A string (or a one-string list) is text; a list of token ids is packed 4 bytes per token,
    so its token count is exact. Batched prompts are not modelled.
    """
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return prompt.encode("utf-8"), bytes_per_token
    if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
        try:
            return struct.pack(f"<{len(prompt)}I", *prompt), 4
        except struct.error as exc:
            raise PromptError("token ids must be in 0..2**32-1") from exc
    if prompt is None:
        raise PromptError("'prompt' is required")
    raise PromptError("'prompt' must be a string, a list of token ids, or a one-element list of either")
