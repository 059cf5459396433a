"""``/v1/responses`` and ``/v1/messages`` on a simulated replica, as vLLM serves them: mapped onto its
chat generation (vLLM's ``construct_input_messages`` and ``AnthropicServingMessages`` do the same), the
answer shaped as a response object or an Anthropic message, a stream as their typed events.

As vLLM without ``VLLM_ENABLE_RESPONSES_API_STORE``, the replica keeps no responses: a request naming a
``previous_response_id`` gets 404 "Response with id … not found". That is what the gateway's own store
is for.
"""

from __future__ import annotations

import os
from typing import Any, Protocol

import orjson

from sim.http import BadRequest
from sim.prompt import PromptError
from sim.state import Replica


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps({"type": kind, **data}) + b"\n\n"


class Job(Protocol):
    """What a shape reads of the generation it answers (``sim.server._Job``). Declared here, below the
    server that builds the job and imports the shapes, so the two modules do not import each other
    (before, the annotation imported ``_Job`` back from the server: a type-only cycle)."""

    model: str
    prompt_tokens: int
    report_cached: bool  # usage carries the prefix-cache hit (SimConfig.report_cached_tokens)


class Shape(Protocol):
    """Another API on top of chat: its request as a chat request, its answer and stream events."""

    lead: int  # events before the first token's

    def __init__(self, rep: Replica, body: dict[str, Any]) -> None: ...

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def full_response(self, job: Job, created: int, toks: list[str], cached: int) -> dict[str, Any]: ...

    def events(self, job: Job, created: int, toks: list[str], cached: int) -> list[bytes]: ...


def _text(content: Any) -> Any:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content


class Responses:
    lead = 4  # created, in_progress, output_item.added, content_part.added

    def __init__(self, rep: Replica, body: dict[str, Any]) -> None:
        self.id = "resp_" + os.urandom(16).hex()

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        previous = body.get("previous_response_id")
        if previous is not None:
            raise BadRequest(404, f"Response with id '{previous}' not found.", "previous_response_id")
        inp = body.get("input")
        if isinstance(inp, str):
            inp = [{"role": "user", "content": inp}]
        if not isinstance(inp, list) or not inp:
            raise PromptError("'input' must be a string or a non-empty list of items")
        messages = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
        for item in inp:
            if not isinstance(item, dict) or item.get("type", "message") != "message":
                continue  # tool items: the simulator has no tools
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
        chat = {"model": body.get("model"), "messages": messages, "stream": body.get("stream", False)}
        for name in ("temperature", "seed", "cache_salt"):
            if name in body:
                chat[name] = body[name]
        if body.get("max_output_tokens") is not None:
            chat["max_tokens"] = body["max_output_tokens"]
        return chat

    def _response(
        self, job: Job, created: int, status: str, text: str | None, cached: int, n: int
    ) -> dict[str, Any]:
        output = []
        if text is not None:
            content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
            output.append(
                {
                    "type": "message",
                    "id": "msg_" + self.id[5:],
                    "status": "completed",
                    "role": "assistant",
                    "content": content,
                }
            )
        usage = None
        if status != "in_progress":
            usage = {
                "input_tokens": job.prompt_tokens,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": n,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": job.prompt_tokens + n,
            }
            if not job.report_cached:
                del usage["input_tokens_details"]
        return {
            "id": self.id,
            "object": "response",
            "created_at": created,
            "status": status,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "model": job.model,
            "output": output,
            "usage": usage,
        }

    def full_response(self, job: Job, created: int, toks: list[str], cached: int) -> dict[str, Any]:
        return self._response(job, created, "incomplete", "".join(toks), cached, len(toks))

    def events(self, job: Job, created: int, toks: list[str], cached: int) -> list[bytes]:
        seq = iter(range(1_000_000))
        item_id = "msg_" + self.id[5:]
        where = {"item_id": item_id, "output_index": 0, "content_index": 0}
        start = self._response(job, created, "in_progress", None, 0, 0)
        item = {"type": "message", "id": item_id, "status": "in_progress", "role": "assistant", "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        out = [
            _event("response.created", {"sequence_number": next(seq), "response": start}),
            _event("response.in_progress", {"sequence_number": next(seq), "response": start}),
            _event(
                "response.output_item.added", {"sequence_number": next(seq), "output_index": 0, "item": item}
            ),
            _event("response.content_part.added", {"sequence_number": next(seq), **where, "part": part}),
        ]
        for tok in toks:
            delta = {"sequence_number": next(seq), **where, "delta": tok, "logprobs": []}
            out.append(_event("response.output_text.delta", delta))
        final = self.full_response(job, created, toks, cached)
        text = "".join(toks)
        out += [
            _event(
                "response.output_text.done",
                {"sequence_number": next(seq), **where, "text": text, "logprobs": []},
            ),
            _event(
                "response.content_part.done",
                {"sequence_number": next(seq), **where, "part": {**part, "text": text}},
            ),
            _event(
                "response.output_item.done",
                {"sequence_number": next(seq), "output_index": 0, "item": final["output"][0]},
            ),
            _event("response.completed", {"sequence_number": next(seq), "response": final}),
        ]
        return out


class Messages:
    lead = 2  # message_start, content_block_start

    def __init__(self, rep: Replica, body: dict[str, Any]) -> None:
        self.id = "msg_" + os.urandom(12).hex()

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise PromptError("messages: must be a non-empty list")
        chat_messages = [{"role": "system", "content": _text(body["system"])}] if body.get("system") else []
        for m in messages:
            if isinstance(m, dict):
                chat_messages.append({"role": m.get("role"), "content": _text(m.get("content"))})
        chat = {
            "model": body.get("model"),
            "messages": chat_messages,
            "max_tokens": body.get("max_tokens"),
            "stream": body.get("stream", False),
        }
        for name in ("temperature", "cache_salt"):
            if name in body:
                chat[name] = body[name]
        return chat

    def _message(self, job: Job, text: str | None, usage: dict[str, int]) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": job.model,
            "content": [{"type": "text", "text": text}] if text is not None else [],
            "stop_reason": "max_tokens" if text is not None else None,
            "stop_sequence": None,
            "usage": usage,
        }

    def full_response(self, job: Job, created: int, toks: list[str], cached: int) -> dict[str, Any]:
        usage = {"input_tokens": job.prompt_tokens, "output_tokens": len(toks)}
        return self._message(job, "".join(toks), usage)

    def events(self, job: Job, created: int, toks: list[str], cached: int) -> list[bytes]:
        start = self._message(job, None, {"input_tokens": job.prompt_tokens, "output_tokens": 0})
        out = [
            _event("message_start", {"message": start}),
            _event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        ]
        out += [
            _event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": t}})
            for t in toks
        ]
        usage = {"input_tokens": job.prompt_tokens, "output_tokens": len(toks)}
        out += [
            _event("content_block_stop", {"index": 0}),
            _event(
                "message_delta",
                {"delta": {"stop_reason": "max_tokens", "stop_sequence": None}, "usage": usage},
            ),
            _event("message_stop", {}),
        ]
        return out
