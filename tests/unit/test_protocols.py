"""The front ends' pure maps (Responses and Anthropic Messages onto chat) and the conversation
store's bounds."""

from __future__ import annotations

from types import SimpleNamespace

import orjson
import pytest

from cache.conversations import MemoryConversations
from config.protocols import ResponseStoreConfig
from gateway.errors import GatewayError
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.protocols import messages, responses
from router.prompt import render_prompt


def test_responses_items_map_onto_chat_in_reading_order() -> None:
    items = responses.input_items(
        [
            {"role": "developer", "content": "rules"},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "42"},
            {"type": "reasoning", "summary": []},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
        ]
    )
    chat = responses.to_messages("be brief", items)
    assert [m["role"] for m in chat] == ["system", "system", "user", "assistant", "tool", "assistant"]
    assert chat[2]["content"] == "hi"
    assert [c["id"] for c in chat[3]["tool_calls"]] == ["c1", "c2"]  # consecutive calls: one turn
    assert chat[4] == {"role": "tool", "tool_call_id": "c1", "content": "42"}


def test_a_follow_up_renders_as_the_previous_turn_plus_more() -> None:
    turn1 = responses.input_items("first")
    body = {"model": "m", "instructions": "sys"}
    out1 = [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "one"}]}]
    first = render_prompt("chat", responses.to_chat({**body, "input": "first"}, turn1))
    follow = responses.to_chat({**body, "input": "next"}, turn1 + out1 + responses.input_items("next"))
    assert render_prompt("chat", follow).startswith(first)


def test_response_format_and_tools_map_onto_chat() -> None:
    chat = responses.to_chat(
        {
            "model": "m",
            "input": "x",
            "max_output_tokens": 7,
            "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"type": "object"}}},
        },
        responses.input_items("x"),
    )
    assert chat["max_tokens"] == 7
    assert chat["tools"] == [
        {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    ]
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "f"}}
    assert chat["response_format"]["json_schema"]["name"] == "s"
    with pytest.raises(GatewayError):
        responses.to_chat({"model": "m", "input": "x", "tools": [{"type": "file_search"}]}, [])


def test_anthropic_cache_control_stays_where_the_client_put_it() -> None:
    marker = {"type": "ephemeral"}
    chat = messages.to_chat(
        {
            "model": "m",
            "max_tokens": 5,
            "system": [{"type": "text", "text": "long rules", "cache_control": marker}],
            "tools": [{"name": "t", "input_schema": {"type": "object"}, "cache_control": marker}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": marker}]},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "u1", "name": "t", "input": {"a": 1}}],
                },
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "u1", "content": "r"}]},
            ],
            "stop_sequences": ["END"],
            "tool_choice": {"type": "any"},
        }
    )
    assert chat["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "long rules", "cache_control": marker}],
    }
    assert chat["messages"][1]["content"][0]["cache_control"] == marker
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "t", "arguments": '{"a":1}'}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "u1", "content": "r"}
    assert chat["tools"][0]["cache_control"] == marker
    assert (chat["stop"], chat["tool_choice"], chat["max_tokens"]) == (["END"], "required", 5)


async def test_memory_store_is_bounded_in_entries_bytes_and_time() -> None:
    now = [0.0]
    cfg = ResponseStoreConfig(max_entries=3, max_bytes=2048, ttl_s=10, max_record_bytes=1024)
    store = MemoryConversations(cfg, clock=lambda: now[0])
    for i in range(5):
        assert await store.put("t", f"r{i}", {"response": {"n": i}, "items": []})
    assert len(store) == 3 and await store.get("t", "r0") is None  # oldest dropped first
    assert await store.get("t", "r4") == {"response": {"n": 4}, "items": []}
    assert await store.get("other", "r4") is None  # per tenant
    assert not await store.put("t", "big", {"response": {"x": "y" * 2000}, "items": []})
    for i in range(3):
        await store.put("t", f"m{i}", {"response": {"x": "y" * 900}, "items": []})
    assert store.bytes <= 2048 and len(store) == 2
    now[0] = 11.0
    assert await store.get("t", "m2") is None  # expired
    assert await store.delete("t", "m1") and not await store.delete("t", "m1")
    assert store.bytes == 0


def test_pass_through_endpoints_render_their_text_for_routing() -> None:
    assert render_prompt("rerank", {"query": "q1", "documents": ["a"]}) == "q1"
    assert render_prompt("score", {"text_1": "left", "text_2": "right"}) == "left"
    assert render_prompt("tokenize", {"prompt": "p"}) == "p"
    assert render_prompt("detokenize", {"tokens": [1, 2]}) == [1, 2]
    assert render_prompt("classify", {"input": ["x", "y"]}) == render_prompt("pooling", {"input": ["x", "y"]})
    chat = {"messages": [{"role": "user", "content": "m"}]}
    assert render_prompt("tokenize", chat) == render_prompt("chat", chat)


def _events(data: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in data.decode().split("\n\n"):
        if block:
            kind, payload = block.split("\n", 1)
            assert kind.startswith("event: ") and payload.startswith("data: ")
            body = orjson.loads(payload[6:])
            assert body["type"] == kind[7:]
            out.append((kind[7:], body))
    return out


TOOL_CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"choices": [{"index": 0, "delta": {"content": "Let me look."}, "finish_reason": None}]},
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f", "arguments": ""}}]
                },
                "finish_reason": None,
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]},
                "finish_reason": None,
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]},
                "finish_reason": "tool_calls",
            }
        ]
    },
    {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}},
]


def _ctx() -> SimpleNamespace:
    body = {"model": "m", "input": "x"}
    turn = responses.Turn("resp_" + "a" * 48, 1, body, responses.input_items("x"), False)
    usage = {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}
    parsed = ParsedRequest("chat", {}, "m", True, 1)
    return SimpleNamespace(exchange=turn, parsed=parsed, decision=None, usage=usage, line_item=None)


async def test_responses_stream_of_text_and_a_function_call() -> None:
    ctx = _ctx()
    enc = responses.ResponsesEncoder(ctx)  # type: ignore[arg-type]
    data = (
        enc.start() + b"".join(enc.chunk(c) for c in TOOL_CHUNKS) + await enc.end(ctx, done=True, error=None)
    )  # type: ignore[arg-type]
    events = _events(data)
    kinds = [k for k, _ in events]
    assert kinds == [
        "response.created", "response.in_progress",
        "response.output_item.added", "response.content_part.added", "response.output_text.delta",
        "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.delta",
        "response.output_text.done", "response.content_part.done", "response.output_item.done",
        "response.function_call_arguments.done", "response.output_item.done", "response.completed",
    ]  # fmt: skip
    assert [b["sequence_number"] for _, b in events] == list(range(len(events)))
    final = events[-1][1]["response"]
    assert [o["type"] for o in final["output"]] == ["message", "function_call"]
    assert final["output"][1]["arguments"] == '{"a": 1}' and final["output"][1]["call_id"] == "call_1"
    assert events[5][1]["output_index"] == 1 and final["usage"]["output_tokens"] == 4


async def test_messages_stream_of_text_and_a_tool_use_and_a_failure() -> None:
    ctx = _ctx()
    enc = messages.MessagesEncoder(ctx)  # type: ignore[arg-type]
    data = (
        enc.start() + b"".join(enc.chunk(c) for c in TOOL_CHUNKS) + await enc.end(ctx, done=True, error=None)
    )  # type: ignore[arg-type]
    events = _events(data)
    assert [k for k, _ in events] == [
        "message_start", "content_block_start", "content_block_delta", "content_block_stop",
        "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop",
    ]  # fmt: skip
    assert events[4][1]["content_block"] == {"type": "tool_use", "id": "call_1", "name": "f", "input": {}}
    assert events[5][1]["delta"] == {"type": "input_json_delta", "partial_json": '{"a": '}
    assert events[8][1]["delta"]["stop_reason"] == "tool_use"
    assert events[8][1]["usage"]["output_tokens"] == 4
    broken = messages.MessagesEncoder(ctx)  # type: ignore[arg-type]
    tail = await broken.end(ctx, done=False, error="upstream stream failed")  # type: ignore[arg-type]
    assert _events(tail) == [
        ("error", {"type": "error", "error": {"type": "api_error", "message": "upstream stream failed"}})
    ]


def test_whole_answers_with_tool_calls_map_back() -> None:
    ctx = _ctx()
    message = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        ],
    }
    items = responses.output_items(ctx.exchange, message)
    assert [i["type"] for i in items] == ["function_call"]
    blocks = messages.content_blocks(message)
    assert blocks == [{"type": "tool_use", "id": "call_1", "name": "f", "input": {"a": 1}}]
