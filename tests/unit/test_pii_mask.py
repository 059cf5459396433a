"""Mask mode: placeholders in requests, unmasking of answers (whole and streamed, split placeholders)."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from cache.keys import cache_key
from cache.pii import (
    ChunkUnmasker,
    PiiMapping,
    StreamUnmasker,
    detect,
    mask_request,
    unmask_response,
    unmask_text,
)


def chat(user: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "temperature": 0, "messages": [{"role": "user", "content": user}], **extra}


def test_mask_replaces_each_distinct_value_with_a_typed_numbered_placeholder() -> None:
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Contact ops@corp.io"},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "I am bob@x.org, also ops@corp.io, phone +44 20 7946 0958"},
                    {"type": "image_url", "image_url": {"url": "https://img.example/i.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"email": "bob@x.org"}'},
                    }
                ],
            },
        ],
    }
    original = copy.deepcopy(body)
    masked, mapping = mask_request(body)
    assert body == original  # the caller's body is untouched
    assert masked["messages"][0]["content"] == "Contact <EMAIL_1>"
    assert masked["messages"][1]["content"][0]["text"] == "I am <EMAIL_2>, also <EMAIL_1>, phone <PHONE_1>"
    assert masked["messages"][1]["content"][1] == body["messages"][1]["content"][1]
    args = masked["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(args) == {"email": "<EMAIL_2>"}
    assert mapping.values == {
        "<EMAIL_1>": "ops@corp.io",
        "<EMAIL_2>": "bob@x.org",
        "<PHONE_1>": "+44 20 7946 0958",
    }
    assert "bob@x.org" not in repr(mapping)
    assert detect(json.dumps(masked)) == []


def test_two_users_differing_only_in_pii_share_a_key_but_get_their_own_values() -> None:
    a, map_a = mask_request(chat("Summarise the mail from alice@a.com about card 4111 1111 1111 1111"))
    b, map_b = mask_request(chat("Summarise the mail from carol@c.com about card 5555 5555 5555 4444"))
    assert cache_key("/v1/chat/completions", a, b"s") == cache_key("/v1/chat/completions", b, b"s")
    cached = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "<EMAIL_1> asked about <CARD_1>."},
                "finish_reason": "stop",
            }
        ],
    }
    assert (
        unmask_response(cached, map_a)["choices"][0]["message"]["content"]
        == "alice@a.com asked about 4111 1111 1111 1111."
    )
    assert (
        unmask_response(cached, map_b)["choices"][0]["message"]["content"]
        == "carol@c.com asked about 5555 5555 5555 4444."
    )
    assert cached["choices"][0]["message"]["content"] == "<EMAIL_1> asked about <CARD_1>."  # not modified


def test_unmask_leaves_unknown_placeholders_and_escapes_json_arguments() -> None:
    mapping = PiiMapping()
    key = "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----"
    ph = mapping.placeholder("SECRET", key)
    assert unmask_text(f"x {ph} <EMAIL_9> <b>", mapping) == f"x {key} <EMAIL_9> <b>"
    resp = {
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "1",
                            "type": "function",
                            "function": {"name": "f", "arguments": f'{{"k": "{ph}"}}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    out = unmask_response(resp, mapping)
    assert json.loads(out["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]) == {"k": key}
    text = {
        "object": "text_completion",
        "choices": [{"index": 0, "text": f"[{ph}]", "finish_reason": "stop"}],
    }
    assert unmask_response(text, mapping)["choices"][0]["text"] == f"[{key}]"


def _mapping() -> tuple[PiiMapping, str, str]:
    _, mapping = mask_request(chat("from bob@x.org and 10.0.0.1 and bob@x.org and carol@y.org"))
    masked = "Hi <EMAIL_1>, <IP_1> <EMAIL_2>! a<b <EMAIL_> <EMAIL_77> <<EMAIL_1>> end <"
    expected = "Hi bob@x.org, 10.0.0.1 carol@y.org! a<b <EMAIL_> <EMAIL_77> <bob@x.org> end <"
    return mapping, masked, expected


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(0, 80), max_size=12))
def test_stream_unmasker_handles_placeholders_split_anywhere(cuts: list[int]) -> None:
    mapping, masked, expected = _mapping()
    bounds = sorted({min(c, len(masked)) for c in cuts})
    pieces = [masked[a:b] for a, b in zip([0, *bounds], [*bounds, len(masked)], strict=True)]
    um = StreamUnmasker(mapping)
    out = "".join(um.feed(p) for p in pieces) + um.flush()
    assert out == expected


def test_stream_unmasker_releases_text_as_soon_as_it_is_decided() -> None:
    mapping, _, _ = _mapping()
    um = StreamUnmasker(mapping)
    assert um.feed("Hi <EMA") == "Hi "
    assert um.feed("IL_1> and <") == "bob@x.org and "
    assert um.feed("b>") == "<b>"
    assert um.flush() == ""


def test_chunk_unmasker_unmasks_sse_chunks_per_choice_and_flushes_on_finish() -> None:
    mapping, _, _ = _mapping()
    cu = ChunkUnmasker(mapping)

    def ch(idx: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "object": "chat.completion.chunk",
            "choices": [{"index": idx, "delta": delta, "finish_reason": finish}],
        }

    outs = [
        cu.process(ch(0, {"role": "assistant", "content": ""})),
        cu.process(ch(0, {"content": "Dear <EM"})),
        cu.process(ch(1, {"content": "<IP"})),
        cu.process(ch(0, {"content": "AIL_2>, see <"})),
        cu.process(ch(1, {"content": "_1>"})),
        cu.process(ch(0, {}, "stop")),
        cu.process(ch(1, {"content": " <IP_"}, "length")),
    ]
    text = {0: "", 1: ""}
    for o in outs:
        c = o["choices"][0]
        text[c["index"]] += c["delta"].get("content") or ""
    assert text == {0: "Dear carol@y.org, see <", 1: "10.0.0.1 <IP_"}
    tool = cu.process(ch(2, {"tool_calls": [{"index": 0, "function": {"arguments": '{"to": "<EMAIL'}}]}))
    end = cu.process(ch(2, {}, "tool_calls"))
    args = tool["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
    args += end["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
    assert args == '{"to": "<EMAIL'  # held back, then released unchanged at the finish
    text_chunks = [
        {"object": "text_completion", "choices": [{"index": 0, "text": "x <IP_", "finish_reason": None}]},
        {"object": "text_completion", "choices": [{"index": 0, "text": "1>", "finish_reason": "stop"}]},
    ]
    cu2 = ChunkUnmasker(mapping)
    assert "".join(cu2.process(c)["choices"][0]["text"] for c in text_chunks) == "x 10.0.0.1"
