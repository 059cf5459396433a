"""Anthropic's Messages API (``POST /v1/messages``), as vLLM serves it: mapped onto chat completions.

vLLM's own ``/v1/messages`` is a translation onto its chat serving (``AnthropicServingMessages``); the
gateway does the same translation so that every backend serves it and the pipeline applies once.

``cache_control`` is Anthropic's own explicit prompt-cache syntax, so it is kept where the client put
it (on system blocks, content blocks, tools): the explicit billing rules (``cache.billing.markers``)
find the marked prefix in the chat request as in any chat request, the markers are stripped before
the replica unless the pool accepts them, and the answer's ``usage`` comes from the request's ledger
line item: ``cache_creation_input_tokens`` (the marked prefix written), ``cache_read_input_tokens``
(read back: an explicit hit, or the replica's own prefix-cache hit), ``input_tokens`` (the rest, at the
full price). The request is checked against Anthropic's documented schema first
(``anthropic_schema``). Errors come in Anthropic's shape; a stream is Anthropic's events (``message_start``,
``content_block_start``, ``content_block_delta``, ``content_block_stop``, ``message_delta`` with the
final usage, ``message_stop``), each with its ``event:`` line as the Anthropic clients require.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from cache.billing.markers import strip_markers
from gateway.errors import GatewayError
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.protocols.anthropic_schema import validate_messages
from gateway.pipeline.protocols.base import FrontEnd

if TYPE_CHECKING:
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.protocols.base import Prepared

_STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    529: "overloaded_error",
}
MARKER = "cache_control"


def _bad(message: str, param: str) -> GatewayError:
    return GatewayError(400, message, param=param, code="invalid_request")


def error_response(err: GatewayError) -> web.Response:
    """``{"type": "error", "error": {"type", "message"}}`` with the status."""
    kind = _ERROR_TYPES.get(err.status, "api_error" if err.status >= 500 else "invalid_request_error")
    body = {"type": "error", "error": {"type": kind, "message": err.message}}
    return web.Response(
        status=err.status, body=orjson.dumps(body), content_type="application/json", headers=err.headers
    )


# -- the request: Anthropic messages → chat messages -----------------------------------------------
def _marked(part: dict[str, Any], block: dict[str, Any]) -> dict[str, Any]:
    if MARKER in block:
        part[MARKER] = block[MARKER]
    return part


def _image_url(source: Any) -> str:
    if isinstance(source, dict) and source.get("type") == "url":
        return str(source.get("url", ""))
    source = source if isinstance(source, dict) else {}
    return f"data:{source.get('media_type', 'image/jpeg')};base64,{source.get('data', '')}"


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _message(msg: dict[str, Any], where: str, out: list[dict[str, Any]]) -> None:
    role, content = msg["role"], msg.get("content")
    if isinstance(content, str):
        out.append({"role": role, "content": content})
        return
    parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(content or ()):
        kind = block.get("type")
        if kind == "text":
            parts.append(_marked({"type": "text", "text": block.get("text", "")}, block))
        elif kind == "image":
            parts.append(
                _marked({"type": "image_url", "image_url": {"url": _image_url(block.get("source"))}}, block)
            )
        elif kind == "tool_use":
            arguments = orjson.dumps(block.get("input") or {}).decode()
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {"name": block.get("name"), "arguments": arguments},
                }
            )
        elif kind == "tool_result":
            tool = {
                "role": "tool",
                "tool_call_id": block.get("tool_use_id"),
                "content": _text_of(block.get("content")),
            }
            out.append(_marked(tool, block))
        elif kind in ("thinking", "redacted_thinking"):
            continue  # earlier reasoning is not shown to the model again
        else:
            raise _bad(f"{where}.content[{j}]: content blocks of type {kind!r} are not supported", where)
    if parts or calls:
        message: dict[str, Any] = {"role": role, "content": parts or None}
        if calls:
            message["tool_calls"] = calls
        out.append(message)


def to_chat(body: dict[str, Any]) -> dict[str, Any]:
    """The chat-completions request of an Anthropic Messages request, ``cache_control`` kept in place."""
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    if isinstance(system, str) and system:
        messages.append({"role": "system", "content": system})
    elif isinstance(system, list) and system:
        parts = [
            _marked({"type": "text", "text": b.get("text", "")}, b) for b in system if isinstance(b, dict)
        ]
        messages.append({"role": "system", "content": parts})
    for i, msg in enumerate(body["messages"]):
        _message(msg, f"messages[{i}]", messages)
    chat: dict[str, Any] = {"model": body["model"], "messages": messages, "max_tokens": body["max_tokens"]}
    for name in ("temperature", "top_p", "top_k", "stream"):
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    tools = body.get("tools")
    if tools:
        chat["tools"] = [
            _marked(
                {
                    "type": "function",
                    "function": {
                        "name": t.get("name"),
                        "description": t.get("description", ""),
                        "parameters": t.get("input_schema") or {"type": "object"},
                    },
                },
                t,
            )
            for t in tools
            if isinstance(t, dict)
        ]
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        kind = choice.get("type")
        chat["tool_choice"] = (
            {"type": "function", "function": {"name": choice.get("name")}}
            if kind == "tool"
            else {"auto": "auto", "any": "required", "none": "none"}.get(str(kind), "auto")
        )
    return chat


async def prepare(ctx: RequestContext) -> Prepared:
    assert ctx.parsed is not None
    body = ctx.parsed.body
    if body.get("stop_sequences") is not None and not (
        isinstance(body["stop_sequences"], list) and all(isinstance(s, str) for s in body["stop_sequences"])
    ):
        raise _bad("stop_sequences: must be an array of strings", "stop_sequences")
    validate_messages(body)
    parsed = ctx.parsed
    chat = ParsedRequest("chat", to_chat(body), parsed.model, parsed.stream, parsed.prompt_chars)
    return chat, "msg_" + os.urandom(12).hex()


# -- the answer ------------------------------------------------------------------------------------
def anthropic_usage(ctx: RequestContext) -> dict[str, int]:
    """The usage of Anthropic's API, from the request's ledger line item (else the replica's usage)."""
    item = ctx.line_item
    if item is not None:
        t = item.tokens
        return {
            "input_tokens": t.uncached + t.served_input,
            "cache_creation_input_tokens": t.explicit_create,
            "cache_read_input_tokens": t.explicit_hit + t.implicit_hit,
            "output_tokens": t.output + t.served_output,
        }
    usage = ctx.usage or {}
    details = usage.get("prompt_tokens_details")
    cached = int((details.get("cached_tokens") if isinstance(details, dict) else 0) or 0)
    return {
        "input_tokens": int(usage.get("prompt_tokens") or 0) - cached,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "output_tokens": int(usage.get("completion_tokens") or 0),
    }


def content_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        blocks.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    if message.get("content"):
        blocks.append({"type": "text", "text": message["content"]})
    for call in message.get("tool_calls") or ():
        fn = call.get("function") or {}
        try:
            arguments = orjson.loads(fn.get("arguments") or "{}")
        except orjson.JSONDecodeError:
            arguments = {}
        blocks.append({"type": "tool_use", "id": call.get("id"), "name": fn.get("name"), "input": arguments})
    return blocks


def message_object(ctx: RequestContext, content: list[dict[str, Any]], finish: str | None) -> dict[str, Any]:
    assert ctx.parsed is not None
    return {
        "id": ctx.exchange,
        "type": "message",
        "role": "assistant",
        "model": ctx.parsed.model,
        "content": content,
        "stop_reason": _STOP_REASONS.get(finish or "stop", "end_turn") if finish is not None else None,
        "stop_sequence": None,
        "usage": anthropic_usage(ctx),
    }


async def answer(ctx: RequestContext, chat: dict[str, Any]) -> dict[str, Any]:
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    return message_object(ctx, content_blocks(message), choice.get("finish_reason") or "stop")


# -- the stream ------------------------------------------------------------------------------------
def event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class MessagesEncoder:
    """One content block open at a time (text, or a tool call's JSON), as Anthropic streams them."""

    def __init__(self, ctx: RequestContext):
        self.ctx = ctx
        self.index = -1  # the open block's
        self.open: str | None = None  # "text" or the open tool call's chat index (as a string)
        self.finish: str | None = None

    def start(self) -> bytes:
        d = self.ctx.decision
        message = message_object(self.ctx, [], None)
        message["usage"] = {"input_tokens": d.prompt_tokens if d is not None else 0, "output_tokens": 0}
        return event("message_start", {"message": message})

    def _switch(self, to: str, block: dict[str, Any]) -> bytes:
        out = self._close()
        self.index += 1
        self.open = to
        return out + event("content_block_start", {"index": self.index, "content_block": block})

    def _close(self) -> bytes:
        if self.open is None:
            return b""
        self.open = None
        return event("content_block_stop", {"index": self.index})

    def chunk(self, chunk: Any) -> bytes:
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not choices:
            return b""
        choice = choices[0]
        delta = choice.get("delta") or {}
        out = b""
        text = delta.get("content")
        if isinstance(text, str) and text:
            if self.open != "text":
                out += self._switch("text", {"type": "text", "text": ""})
            out += event(
                "content_block_delta", {"index": self.index, "delta": {"type": "text_delta", "text": text}}
            )
        for call in delta.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            key = f"call{call.get('index', 0)}"
            fn = call.get("function") or {}
            if self.open != key:
                block: dict[str, Any] = {
                    "type": "tool_use",
                    "id": call.get("id"),
                    "name": fn.get("name"),
                    "input": {},
                }
                out += self._switch(key, block)
            piece = fn.get("arguments")
            if isinstance(piece, str) and piece:
                delta_json = {"type": "input_json_delta", "partial_json": piece}
                out += event("content_block_delta", {"index": self.index, "delta": delta_json})
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        return out

    async def end(self, ctx: RequestContext, *, done: bool, error: str | None) -> bytes:
        if error is not None:
            return event("error", {"error": {"type": "api_error", "message": error}})
        if not done:
            return b""
        stop = _STOP_REASONS.get(self.finish or "stop", "end_turn")
        delta = {"delta": {"stop_reason": stop, "stop_sequence": None}, "usage": anthropic_usage(ctx)}
        return self._close() + event("message_delta", delta) + event("message_stop", {})


FRONTEND = FrontEnd(
    name="messages",
    prepare=prepare,
    answer=answer,
    encoder=MessagesEncoder,
    error=error_response,
)


# -- count_tokens: the same request, counted by the replica's tokenizer ---------------------------
async def prepare_count(ctx: RequestContext) -> Prepared:
    """``POST /v1/messages/count_tokens`` (Claude Code asks it before long turns) as vLLM's
    ``/tokenize`` of the chat request: the replica's own chat template counts the tokens."""
    assert ctx.parsed is not None
    body = ctx.parsed.body
    validate_messages(body, count=True)
    chat = strip_markers(to_chat({**body, "max_tokens": 1}))
    tokenize = {"model": body["model"], "messages": chat["messages"], "add_generation_prompt": True}
    if "tools" in chat:
        tokenize["tools"] = chat["tools"]
    parsed = ctx.parsed
    return ParsedRequest("tokenize", tokenize, parsed.model, False, parsed.prompt_chars), None


async def answer_count(ctx: RequestContext, tokenized: dict[str, Any]) -> dict[str, Any]:
    return {"input_tokens": int(tokenized.get("count") or 0)}


COUNT_TOKENS = FrontEnd(
    name="count_tokens",
    prepare=prepare_count,
    answer=answer_count,
    encoder=MessagesEncoder,
    error=error_response,
)
