"""OpenAI's Responses API (``POST /v1/responses``), with the gateway as the ``previous_response_id`` store.

Translate, not forward. The gateway maps a Responses request onto chat completions and the chat answer
back onto a response object (whole) or the Responses stream's typed events (``response.created`` …
``response.output_text.delta`` … ``response.completed``, one per chat chunk as it arrives), for every
backend. Why not forward to replicas that serve ``/v1/responses`` themselves:

- it works on every replica of the field: SGLang and older vLLM serve no ``/v1/responses`` (or one
  without the store), every one serves chat completions;
- it is what vLLM does itself for non-Harmony models (``construct_input_messages``: instructions as the
  system message, then the previous turns, then the input, into the chat template), so the engine sees
  the same prompt either way;
- the whole pipeline then applies unchanged and once: prefix routing on the rendering the model reads
  (instructions, then the input items in order, history first), the response cache and coalescing, PII
  masking, usage asked for on streams and billed from the replica's counts
  (``input_tokens_details.cached_tokens`` is the replica's ``cached_tokens``).

What translation gives up is what only an engine's own Responses server does: Harmony built-in tools
(browser, python, MCP) and background responses. Function tools, reasoning output, structured output
(``text.format``) and images map onto chat.

The chain. vLLM keeps ``previous_response_id`` state in the one replica that answered, so behind a
load balancer a follow-up that lands elsewhere fails. Here a response (unless ``store: false``) is kept
by the gateway (``cache.conversations``: memory, or the policy's Redis; per tenant; TTL; bounded) with
the conversation that led to it, before the client sees its end; a follow-up's input is the stored
conversation plus its own, so any replica can answer it, and prefix routing sends it where that
history is cached (it renders as the previous turn's prompt plus more). Per OpenAI's rules the previous
``instructions`` are not carried over.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import orjson
from aiohttp import web

from cache.store_redis import REDIS_ERRORS
from gateway.errors import GatewayError, error_response
from gateway.pipeline.parse import ENDPOINTS, ParsedRequest, check_messages, check_prompt_chars
from gateway.pipeline.protocols.base import FrontEnd

if TYPE_CHECKING:
    from cache.conversations import ConversationStore
    from gateway.observability.metrics import GatewayMetrics
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.protocols.base import Prepared

T = TypeVar("T")

# Request fields that map one to one onto chat completions (vLLM's extras, like top_k, included).
_SAMPLING = ("temperature", "top_p", "top_k", "seed", "user", "parallel_tool_calls", "stream")


@dataclass(slots=True)
class Turn:
    """One Responses request as the answer needs it: its id, its request, its whole conversation."""

    id: str
    created_at: int
    request: dict[str, Any]
    items: list[dict[str, Any]]  # the conversation's input items, the stored history first
    store: bool


def _bad(message: str, param: str | None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


# -- the request: input items → chat messages ------------------------------------------------------
def input_items(value: str | list[Any]) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return [item if "type" in item else {"type": "message", **item} for item in value]


def _part(part: dict[str, Any], where: str) -> dict[str, Any]:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        return {"type": "text", "text": part.get("text", "")}
    if kind == "refusal":
        return {"type": "text", "text": part.get("refusal", "")}
    if kind == "input_image":
        url = part.get("image_url") or part.get("file_id")
        if not isinstance(url, str):
            raise _bad(f"{where}: input_image needs image_url", where)
        return {"type": "image_url", "image_url": {"url": url, "detail": part.get("detail", "auto")}}
    if kind == "input_file":
        keys = ("file_id", "file_data", "filename")
        return {"type": "file", "file": {k: part[k] for k in keys if k in part}}
    if kind == "input_audio":
        return {"type": "input_audio", "input_audio": part.get("input_audio")}
    raise _bad(f"{where}: content of type {kind!r} is not supported", where)


def _content(content: Any, where: str) -> Any:
    if not isinstance(content, list):
        return content
    parts = [_part(p, f"{where}[{j}]") for j, p in enumerate(content)]
    if len(parts) == 1 and parts[0]["type"] == "text":
        return parts[0]["text"]
    return parts


def to_messages(instructions: str | None, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The chat messages of a conversation, in the order the model reads them: the instructions as the
    system message, then every item in order (function calls and their outputs as tool turns)."""
    messages: list[dict[str, Any]] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type")
        if kind == "message":
            role = "system" if item.get("role") == "developer" else item.get("role")
            messages.append({"role": role, "content": _content(item.get("content"), f"{where}.content")})
        elif kind == "function_call":
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": item.get("arguments", "")},
            }
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else orjson.dumps(output).decode()
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"), "content": text})
        elif kind == "reasoning":
            continue  # as vLLM: earlier reasoning is not shown to the model again
        else:
            raise _bad(f"{where}: input items of type {kind!r} are not supported", f"{where}.type")
    return messages


def _tools(tools: Any) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise _bad(f"tools[{i}]: only function tools are supported", f"tools[{i}]")
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, dict) and choice.get("type") == "function":
        return {"type": "function", "function": {"name": choice.get("name")}}
    return choice


def _response_format(text: Any) -> dict[str, Any] | None:
    fmt = text.get("format") if isinstance(text, dict) else None
    if not isinstance(fmt, dict) or fmt.get("type") in (None, "text"):
        return None
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    return {"type": fmt["type"]}


def to_chat(body: dict[str, Any], items: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat-completions request of a Responses request whose conversation is ``items``."""
    chat: dict[str, Any] = {
        "model": body["model"],
        "messages": to_messages(body.get("instructions"), items),
    }
    for name in _SAMPLING:
        if body.get(name) is not None:
            chat[name] = body[name]
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    if body.get("tools"):
        chat["tools"] = _tools(body["tools"])
        if body.get("tool_choice") is not None:
            chat["tool_choice"] = _tool_choice(body["tool_choice"])
    fmt = _response_format(body.get("text"))
    if fmt is not None:
        chat["response_format"] = fmt
    return chat


async def _call(op: Awaitable[T], metrics: GatewayMetrics, name: str) -> T:
    """One store call: while Redis is away, 503 (never a wrong "not found"), counted."""
    try:
        return await op
    except REDIS_ERRORS:
        metrics.child(metrics.redis_errors, "responses", name).inc()
        raise GatewayError(
            503, "the response store is unavailable; retry later", code="store_unavailable"
        ) from None


async def prepare(ctx: RequestContext) -> Prepared:
    """Expand ``previous_response_id`` into the conversation and map the request onto chat."""
    assert ctx.parsed is not None
    body = ctx.parsed.body
    cfg = ctx.state.policy.protocols.responses
    store = ctx.state.conversations
    history: list[dict[str, Any]] = []
    previous = body.get("previous_response_id")
    if previous is not None:
        if store is None:
            raise _bad(
                "previous_response_id needs the gateway's response store, which the policy turns off "
                "(protocols.responses.enabled)",
                "previous_response_id",
                "previous_response_not_found",
            )
        assert ctx.tenant is not None
        record = await _call(store.get(ctx.tenant.id, previous), ctx.process.metrics, "get")
        if record is None:
            raise _bad(
                f"Previous response with id '{previous}' not found.",
                "previous_response_id",
                "previous_response_not_found",
            )
        history = record["items"]
    background = body.get("background")
    if background is not None and not isinstance(background, bool):
        raise _bad("'background' must be a boolean", "background")
    if background:
        raise _bad(
            "background responses are not supported by this gateway (it answers while the client waits: "
            "send background: false, or stream)",
            "background",
        )
    items = history + input_items(body["input"])
    if len(items) > cfg.max_chain_items:
        raise _bad(
            f"the conversation has {len(items)} input items, more than the limit of {cfg.max_chain_items}",
            "previous_response_id" if history else "input",
            "conversation_too_long",
        )
    chat = to_chat(body, items)
    chars = check_messages(chat)
    check_prompt_chars(chars, ENDPOINTS["responses"], ctx.state.policy.limits)
    store_it = store is not None and body.get("store", True) is not False
    turn = Turn("resp_" + os.urandom(24).hex(), int(time.time()), body, items, store_it)
    return ParsedRequest("chat", chat, ctx.parsed.model, ctx.parsed.stream, chars), turn


# -- the answer: a chat completion → a response object ---------------------------------------------
def response_usage(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    prompt, completion = int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": int(cached or 0)},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": int(usage.get("total_tokens") or prompt + completion),
    }


def _message_id(turn: Turn) -> str:
    return "msg_" + turn.id[5:]


def _call_id(turn: Turn, index: int) -> str:
    return f"fc_{index}_{turn.id[5:]}"


def output_items(turn: Turn, message: dict[str, Any]) -> list[dict[str, Any]]:
    """A chat message as output items: reasoning, the message, then its function calls."""
    out: list[dict[str, Any]] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        out.append(
            {
                "type": "reasoning",
                "id": "rs_" + turn.id[5:],
                "summary": [],
                "content": [{"type": "reasoning_text", "text": reasoning}],
                "status": "completed",
            }
        )
    calls = message.get("tool_calls") or []
    content = message.get("content")
    if isinstance(content, str) and (content or not calls):
        out.append(
            {
                "type": "message",
                "id": _message_id(turn),
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": content, "annotations": [], "logprobs": []}],
            }
        )
    for i, call in enumerate(calls):
        fn = call.get("function") or {}
        out.append(
            {
                "type": "function_call",
                "id": _call_id(turn, i),
                "call_id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments", ""),
                "status": "completed",
            }
        )
    return out


def response_object(
    turn: Turn, status: str, output: list[dict[str, Any]], usage: Any, finish: str | None = None
) -> dict[str, Any]:
    body = turn.request
    incomplete = finish == "length"
    if status == "completed" and incomplete:
        status = "incomplete"
    return {
        "id": turn.id,
        "object": "response",
        "created_at": turn.created_at,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": body["model"],
        "output": output,
        "parallel_tool_calls": body.get("parallel_tool_calls", True),
        "previous_response_id": body.get("previous_response_id"),
        "store": turn.store,
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
        "truncation": body.get("truncation") or "disabled",
        "metadata": body.get("metadata") or {},
        "usage": response_usage(usage),
    }


async def _keep(ctx: RequestContext, response: dict[str, Any]) -> None:
    """Store the response with its conversation, before the client sees its end."""
    turn: Turn = ctx.exchange
    if not turn.store:
        return
    store = ctx.state.conversations
    assert store is not None and ctx.tenant is not None  # turn.store says both
    metrics = ctx.process.metrics
    record = {"response": response, "items": turn.items + response["output"]}
    try:
        result = "stored" if await store.put(ctx.tenant.id, turn.id, record) else "too_large"
    except REDIS_ERRORS:
        metrics.child(metrics.redis_errors, "responses", "put").inc()
        result = "error"
    metrics.child(metrics.responses_stored, result).inc()


async def answer(ctx: RequestContext, chat: dict[str, Any]) -> dict[str, Any]:
    turn: Turn = ctx.exchange
    choice = (chat.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    response = response_object(
        turn,
        "completed",
        output_items(turn, message),
        ctx.usage or chat.get("usage"),
        choice.get("finish_reason"),
    )
    await _keep(ctx, response)
    return response


# -- the stream: chat chunks → typed events --------------------------------------------------------
class ResponsesEncoder:
    """``response.created`` and ``in_progress`` first; per chunk its text deltas and function-call
    argument deltas; at the end the ``done`` events and ``response.completed`` with the usage."""

    def __init__(self, ctx: RequestContext):
        self.turn: Turn = ctx.exchange
        self.seq = 0
        self.text: list[str] = []
        self.message_index: int | None = None
        self.calls: dict[int, dict[str, Any]] = {}  # chat tool-call index → its item (and output index)
        self.outputs = 0
        self.finish: str | None = None

    def _event(self, kind: str, **fields: Any) -> bytes:
        data = {"type": kind, "sequence_number": self.seq, **fields}
        self.seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"

    def start(self) -> bytes:
        response = response_object(self.turn, "in_progress", [], None)
        return self._event("response.created", response=response) + self._event(
            "response.in_progress", response=response
        )

    def _open_message(self) -> bytes:
        self.message_index, self.outputs = self.outputs, self.outputs + 1
        item = {"type": "message", "id": _message_id(self.turn), "status": "in_progress", "role": "assistant"}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        return self._event(
            "response.output_item.added", output_index=self.message_index, item={**item, "content": []}
        ) + self._event(
            "response.content_part.added",
            item_id=item["id"],
            output_index=self.message_index,
            content_index=0,
            part=part,
        )

    def _call(self, delta: dict[str, Any]) -> bytes:
        index = delta.get("index", len(self.calls))
        fn = delta.get("function") or {}
        out = b""
        call = self.calls.get(index)
        if call is None:
            call = self.calls[index] = {
                "type": "function_call",
                "id": _call_id(self.turn, len(self.calls)),
                "call_id": delta.get("id"),
                "name": fn.get("name") or "",
                "arguments": "",
                "status": "in_progress",
                "output_index": self.outputs,
            }
            self.outputs += 1
            item = {k: v for k, v in call.items() if k != "output_index"}
            out += self._event("response.output_item.added", output_index=call["output_index"], item=item)
        piece = fn.get("arguments")
        if isinstance(piece, str) and piece:
            call["arguments"] += piece
            out += self._event(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=call["output_index"],
                delta=piece,
            )
        return out

    def chunk(self, chunk: Any) -> bytes:
        choices = chunk.get("choices") if isinstance(chunk, dict) else None
        if not choices:
            return b""  # the usage chunk: its numbers come with response.completed
        choice = choices[0]
        delta = choice.get("delta") or {}
        out = b""
        content = delta.get("content")
        if isinstance(content, str) and content:
            if self.message_index is None:
                out += self._open_message()
            self.text.append(content)
            out += self._event(
                "response.output_text.delta",
                item_id=_message_id(self.turn),
                output_index=self.message_index,
                content_index=0,
                delta=content,
                logprobs=[],
            )
        for call in delta.get("tool_calls") or ():
            if isinstance(call, dict):
                out += self._call(call)
        if choice.get("finish_reason") is not None:
            self.finish = choice["finish_reason"]
        return out

    async def end(self, ctx: RequestContext, *, done: bool, error: str | None) -> bytes:
        if error is not None:
            failed = response_object(self.turn, "failed", [], None)
            failed["error"] = {"code": "server_error", "message": error}
            return self._event("response.failed", response=failed)
        if not done:
            return b""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) if self.text else None}
        calls = [self.calls[i] for i in sorted(self.calls)]
        message["tool_calls"] = [
            {
                "id": c["call_id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls
        ]
        if message["content"] is None and not calls:
            message["content"] = ""
        response = response_object(
            self.turn, "completed", output_items(self.turn, message), ctx.usage, self.finish
        )
        await _keep(ctx, response)
        items = {item["id"]: item for item in response["output"]}
        out = b""
        if self.message_index is not None:
            text, item_id = "".join(self.text), _message_id(self.turn)
            where = {"item_id": item_id, "output_index": self.message_index}
            part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
            out += self._event("response.output_text.done", **where, content_index=0, text=text, logprobs=[])
            out += self._event("response.content_part.done", **where, content_index=0, part=part)
            out += self._event(
                "response.output_item.done", output_index=self.message_index, item=items[item_id]
            )
        for call in calls:
            where = {"item_id": call["id"], "output_index": call["output_index"]}
            out += self._event("response.function_call_arguments.done", **where, arguments=call["arguments"])
            out += self._event(
                "response.output_item.done", output_index=call["output_index"], item=items[call["id"]]
            )
        return out + self._event("response.completed", response=response)


# -- the stored responses: GET / DELETE /v1/responses/{id} -----------------------------------------
def _not_found(response_id: str) -> GatewayError:
    return GatewayError(
        404, f"Response with id '{response_id}' not found.", param="response_id", code="not_found"
    )


async def stored(
    store: ConversationStore | None, tenant: str, response_id: str, metrics: GatewayMetrics
) -> dict[str, Any]:
    """The stored record of ``response_id`` for ``tenant``, else 404 (503 while Redis is away)."""
    record = await _call(store.get(tenant, response_id), metrics, "get") if store is not None else None
    if record is None:
        raise _not_found(response_id)
    return record


PAGE_DEFAULT, PAGE_MAX = 20, 100  # OpenAI's limit of a list: default 20, 1 to 100


def _page_params(query: Mapping[str, str]) -> tuple[int, str, str | None]:
    raw = query.get("limit", str(PAGE_DEFAULT))
    limit = int(raw) if raw.isdigit() else 0
    if not 1 <= limit <= PAGE_MAX:
        raise _bad(f"limit: must be an integer from 1 to {PAGE_MAX}, got {raw!r}", "limit")
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise _bad(f"order: must be 'asc' or 'desc', got {order!r}", "order")
    return limit, order, query.get("after")


def input_items_page(record: dict[str, Any], query: Mapping[str, str]) -> dict[str, Any]:
    """``GET /v1/responses/{id}/input_items``: the conversation's input items (history included), a
    page of ``limit`` (default 20, at most 100) in ``order`` (default ``desc``, newest first, as OpenAI)
    after the item ``after``. An item the client sent without an id gets one derived from the
    response's id and its position (stable for the record: the cursor of the next page)."""
    limit, order, after = _page_params(query)
    items = record["items"][: len(record["items"]) - len(record["response"]["output"])]
    stem = record["response"]["id"].removeprefix("resp_")[:24]
    listed = [
        item if item.get("id") else {"id": f"msg_{stem}{i:05d}", **item} for i, item in enumerate(items)
    ]
    if order == "desc":
        listed.reverse()
    start = 0
    if after is not None:
        ids = [item["id"] for item in listed]
        if after not in ids:
            raise _bad(f"after: no input item with id {after!r} in this response", "after")
        start = ids.index(after) + 1
    page = listed[start : start + limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": start + limit < len(listed),
    }


async def forget(
    store: ConversationStore | None, tenant: str, response_id: str, metrics: GatewayMetrics
) -> web.Response:
    """``DELETE /v1/responses/{id}``."""
    if store is None or not await _call(store.delete(tenant, response_id), metrics, "delete"):
        raise _not_found(response_id)
    body = {"id": response_id, "object": "response.deleted", "deleted": True}
    return web.Response(body=orjson.dumps(body), content_type="application/json")


FRONTEND = FrontEnd(
    name="responses",
    prepare=prepare,
    answer=answer,
    encoder=ResponsesEncoder,
    error=error_response,
)
