"""Anthropic's documented Messages schema, checked before a request is mapped onto chat completions.

The replica sees a chat request, not the client's: a text block without ``text`` became an empty text
part, ``tools: [{"name": 5}]`` a function named 5, image data that is not base64 a data URL the replica
may or may not refuse, ``temperature: 5`` and ``top_k: -5`` sampling parameters Anthropic's API refuses;
all were forwarded and answered 200 (issue 31, item 4). Here they are refused as Anthropic refuses
them: 400 ``invalid_request_error`` with the field's path in the message (the front end's
``error_response`` gives Anthropic's shape). Only what the API documents is checked: ranges
(``temperature`` and ``top_p`` 0-1, ``top_k`` >= 0, ``max_tokens`` >= 1), the required fields and types
of each content block the front end maps, tools (``name`` 1-128 of ``[a-zA-Z0-9_-]``, ``input_schema``
an object) and ``tool_choice``. Pure: the body in, an error or nothing out.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

from gateway.errors import GatewayError

IMAGE_MEDIA_TYPES = ("image/jpeg", "image/png", "image/gif", "image/webp")
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,128}")
TOOL_CHOICES = ("auto", "any", "tool", "none")


def _bad(message: str, param: str) -> GatewayError:
    return GatewayError(400, message, param=param, code="invalid_request")


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _string(block: dict[str, Any], name: str, where: str) -> None:
    if not isinstance(block.get(name), str):
        raise _bad(f"{where}.{name}: Field required (a string)", f"{where}.{name}")


def _image(block: dict[str, Any], where: str) -> None:
    source = block.get("source")
    if not isinstance(source, dict):
        raise _bad(f"{where}.source: Field required (an object)", f"{where}.source")
    kind = source.get("type")
    if kind == "url":
        _string(source, "url", f"{where}.source")
        return
    if kind != "base64":
        raise _bad(f"{where}.source.type: Input should be 'base64' or 'url'", f"{where}.source.type")
    if source.get("media_type") not in IMAGE_MEDIA_TYPES:
        allowed = ", ".join(repr(m) for m in IMAGE_MEDIA_TYPES)
        raise _bad(
            f"{where}.source.media_type: Input should be one of {allowed}", f"{where}.source.media_type"
        )
    data = source.get("data")
    try:
        if not isinstance(data, str) or not data:
            raise ValueError
        base64.b64decode(data, validate=True)
    except (ValueError, binascii.Error):
        raise _bad(f"{where}.source.data: invalid base64 image data", f"{where}.source.data") from None


def _block(block: Any, where: str, *, in_tool_result: bool = False) -> None:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _bad(f"{where}: a content block object with a 'type'", where)
    kind = block["type"]
    if kind == "text":
        _string(block, "text", where)
    elif kind == "image":
        _image(block, where)
    elif in_tool_result:
        raise _bad(f"{where}.type: a tool_result's content holds text and image blocks", f"{where}.type")
    elif kind == "tool_use":
        _string(block, "id", where)
        _string(block, "name", where)
        if not isinstance(block.get("input"), dict):
            raise _bad(f"{where}.input: Field required (an object)", f"{where}.input")
    elif kind == "tool_result":
        _string(block, "tool_use_id", where)
        content = block.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                _block(part, f"{where}.content[{j}]", in_tool_result=True)
        elif content is not None and not isinstance(content, str):
            raise _bad(f"{where}.content: a string or an array of content blocks", f"{where}.content")
    # other kinds: the front end keeps or refuses them (thinking is dropped, the rest is 400)


def _content(content: Any, where: str) -> None:
    if isinstance(content, str):
        return
    if not isinstance(content, list):
        raise _bad(f"{where}: a string or an array of content blocks", where)
    for j, block in enumerate(content):
        _block(block, f"{where}[{j}]")


def _tools(tools: Any) -> None:
    if not isinstance(tools, list):
        raise _bad("tools: must be an array", "tools")
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise _bad(f"{where}: must be an object", where)
        name = tool.get("name")
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise _bad(f"{where}.name: a string of 1 to 128 of a-z, A-Z, 0-9, _ and -", f"{where}.name")
        if "input_schema" in tool and not isinstance(tool["input_schema"], dict):
            raise _bad(f"{where}.input_schema: must be an object (a JSON schema)", f"{where}.input_schema")
        if tool.get("description") is not None and not isinstance(tool["description"], str):
            raise _bad(f"{where}.description: must be a string", f"{where}.description")


def _tool_choice(choice: Any) -> None:
    if not isinstance(choice, dict) or choice.get("type") not in TOOL_CHOICES:
        kinds = ", ".join(repr(k) for k in TOOL_CHOICES)
        raise _bad(f"tool_choice: an object whose type is one of {kinds}", "tool_choice")
    if choice["type"] == "tool":
        _string(choice, "name", "tool_choice")


def _range(body: dict[str, Any], name: str, low: float, high: float | None, integer: bool = False) -> None:
    value = body.get(name)
    if value is None:
        return
    if not (_integer(value) if integer else _number(value)):
        raise _bad(f"{name}: must be {'an integer' if integer else 'a number'}", name)
    if value < low or (high is not None and value > high):
        bounds = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise _bad(f"{name}: must be {bounds}, got {value}", name)


def validate_messages(body: dict[str, Any], *, count: bool = False) -> None:
    """Refuse (400) what Anthropic's API refuses in a Messages request (``count``: ``count_tokens``,
    which has no ``max_tokens`` nor sampling)."""
    if not count:
        _range(body, "max_tokens", 1, None, integer=True)
        _range(body, "temperature", 0.0, 1.0)
        _range(body, "top_p", 0.0, 1.0)
        _range(body, "top_k", 0, None, integer=True)
        if body.get("stream") is not None and not isinstance(body["stream"], bool):
            raise _bad("stream: must be a boolean", "stream")
    system = body.get("system")
    if isinstance(system, list):
        for j, block in enumerate(system):
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _bad(f"system[{j}]: system blocks are text blocks", f"system[{j}]")
            _string(block, "text", f"system[{j}]")
    elif system is not None and not isinstance(system, str):
        raise _bad("system: a string or an array of text blocks", "system")
    for i, msg in enumerate(body["messages"]):
        _content(msg.get("content"), f"messages[{i}].content")
    if body.get("tools") is not None:
        _tools(body["tools"])
    if body.get("tool_choice") is not None:
        _tool_choice(body["tool_choice"])
