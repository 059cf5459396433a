"""SSE parsing, stream assembly and replay: round trips, truncation, events split across reads."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.entry import Entry, make_entry, storable
from cache.sse import SSEError, SSEParser, StreamAssembler, assemble_stream, replay_sse


def parse_all(events: list[bytes], cuts: list[int] | None = None) -> list[Any]:
    """Feed the bytes to a parser (split at ``cuts``) and decode each event like a gateway would."""
    raw = b"".join(events)
    parser = SSEParser()
    bounds = sorted({min(c, len(raw)) for c in cuts or []})
    out: list[str] = []
    for a, b in zip([0, *bounds], [*bounds, len(raw)], strict=True):
        out.extend(parser.feed(raw[a:b]))
    return [d if d == "[DONE]" else orjson.loads(d) for d in out]


text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)
finish = st.sampled_from(["stop", "length", "tool_calls"])
usage = st.none() | st.fixed_dictionaries(
    {
        "prompt_tokens": st.integers(0, 99),
        "completion_tokens": st.integers(0, 99),
        "total_tokens": st.integers(0, 200),
    }
)
tool_call = st.builds(
    lambda i, name, args: {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": name, "arguments": args},
    },
    st.integers(0, 999),
    st.text(alphabet="abcdefgh_", min_size=1, max_size=8),
    text,
)
lp_token = st.fixed_dictionaries(
    {"token": text, "logprob": st.floats(-20, 0), "bytes": st.none(), "top_logprobs": st.just([])}
)


@st.composite
def chat_message(draw: Any) -> dict[str, Any]:
    calls = draw(st.lists(tool_call, max_size=2))
    content = draw(st.none() if calls else text) if calls else draw(text)
    if calls and draw(st.booleans()):
        content = draw(text)
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if draw(st.booleans()):
        msg["reasoning_content"] = draw(text.filter(bool))
    if calls:
        msg["tool_calls"] = calls
    return msg


@st.composite
def chat_response(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 3))
    choices = []
    for i in range(n):
        logprobs = draw(
            st.none() | st.builds(lambda c: {"content": c}, st.lists(lp_token, min_size=1, max_size=3))
        )
        choices.append(
            {"index": i, "message": draw(chat_message()), "logprobs": logprobs, "finish_reason": draw(finish)}
        )
    resp: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": choices,
    }
    u = draw(usage)
    if u is not None:
        resp["usage"] = u
    return resp


@st.composite
def text_response(draw: Any) -> dict[str, Any]:
    n = draw(st.integers(1, 3))
    choices = [
        {"index": i, "text": draw(text), "logprobs": None, "finish_reason": draw(finish)} for i in range(n)
    ]
    resp: dict[str, Any] = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1700000000,
        "model": "m",
        "choices": choices,
    }
    u = draw(usage)
    if u is not None:
        resp["usage"] = u
    return resp


@settings(max_examples=150, deadline=None)
@given(
    resp=chat_response() | text_response(),
    chunk_chars=st.none() | st.integers(1, 7),
    cuts=st.lists(st.integers(0, 4000), max_size=10),
)
def test_replay_then_assemble_round_trips(
    resp: dict[str, Any], chunk_chars: int | None, cuts: list[int]
) -> None:
    events = replay_sse(resp, include_usage=True, chunk_chars=chunk_chars)
    assert events[-1] == b"data: [DONE]\n\n"
    assert all(e.startswith(b"data: ") and e.endswith(b"\n\n") for e in events)
    parsed = parse_all(events, cuts)
    kind = "chat.completion.chunk" if resp["object"] == "chat.completion" else "text_completion"
    assert all(p["object"] == kind for p in parsed if p != "[DONE]")
    assert assemble_stream(parsed) == resp


def test_replay_shapes_match_openai() -> None:
    resp = {
        "id": "x",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hello"},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
    }
    chunks = parse_all(replay_sse(resp, response_id="new", created=9))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[1]["choices"][0]["delta"] == {"content": "Hello"}
    assert chunks[2]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "stop"}
    assert chunks[-1] == "[DONE]" and len(chunks) == 4  # no usage chunk unless asked
    assert {c["id"] for c in chunks[:-1]} == {"new"} and {c["created"] for c in chunks[:-1]} == {9}
    with_usage = parse_all(replay_sse(resp, include_usage=True))
    assert with_usage[-2] == {
        **{k: with_usage[0][k] for k in ("id", "object", "created", "model")},
        "choices": [],
        "usage": resp["usage"],
    }


def vllm_stream() -> list[Any]:
    """Chunks as vLLM sends them for a tool call spread over several deltas, with usage at the end."""
    head = {"id": "chatcmpl-9", "object": "chat.completion.chunk", "created": 5, "model": "qwen"}

    def c(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}

    return [
        c({"role": "assistant", "content": ""}),
        c(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
        c({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
        c({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
        c({}, "tool_calls"),
        {**head, "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17}},
        "[DONE]",
    ]


def test_assemble_tool_call_stream() -> None:
    out = assemble_stream(vllm_stream())
    assert out == {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "created": 5,
        "model": "qwen",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "call_a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                "logprobs": None,
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 7, "total_tokens": 17},
    }
    ok, _ = storable(out)
    assert ok


@pytest.mark.parametrize(
    "mutate",
    [
        lambda s: s[:-1],  # no [DONE]
        lambda s: [
            x for x in s if not (isinstance(x, dict) and x["choices"] and x["choices"][0]["finish_reason"])
        ],  # no finish
        lambda s: [*s[:3], {"error": {"message": "replica died"}}, "[DONE]"],  # in-band error
        lambda s: [],  # nothing at all
        lambda s: ["[DONE]"],
    ],
)
def test_truncated_or_failed_stream_is_none(mutate: Any) -> None:
    assert assemble_stream(mutate(vllm_stream())) is None


def test_unfinished_second_choice_is_none() -> None:
    resp = {
        "id": "x",
        "object": "text_completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "text": "a", "logprobs": None, "finish_reason": "stop"},
            {"index": 1, "text": "b", "logprobs": None, "finish_reason": "stop"},
        ],
    }
    chunks = [
        c
        for c in parse_all(replay_sse(resp))
        if c == "[DONE]" or c["choices"][0]["finish_reason"] is None or c["choices"][0]["index"] == 0
    ]
    assert assemble_stream(chunks) is None


def test_parser_handles_splits_crlf_comments_multiline_and_utf8() -> None:
    raw = ': keepalive\r\n\r\nevent: message\r\ndata: {"a":\r\ndata: "é"}\r\n\r\ndata:[DONE]\n\n'.encode()
    for step in (1, 2, 3, 7):
        p = SSEParser()
        got: list[str] = []
        for i in range(0, len(raw), step):
            got.extend(p.feed(raw[i : i + step]))
        assert got == ['{"a":\n"é"}', "[DONE]"]
    p = SSEParser()
    assert p.feed(b"data: x\r") == []
    assert p.feed(b"\r") == []  # \r\r: a line end and an empty line end the event only when complete
    assert p.feed(b"\n") == ["x"]
    assert SSEParser().feed(b"data: unfinished") == []


def test_parser_bounds_event_size() -> None:
    p = SSEParser(max_event_bytes=100)
    with pytest.raises(SSEError):
        p.feed(b"data: " + b"x" * 200)


def test_assembler_accepts_raw_event_strings() -> None:
    asm = StreamAssembler()
    for e in parse_all(
        replay_sse(
            {
                "object": "text_completion",
                "id": "i",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "text": "hi", "logprobs": None, "finish_reason": "stop"}],
            }
        )
    ):
        asm.add_event(e if e == "[DONE]" else orjson.dumps(e).decode())
    assert asm.result()["choices"][0]["text"] == "hi"
    bad = StreamAssembler()
    bad.add_event("{not json")
    bad.add_event("[DONE]")
    assert bad.result() is None


def test_entry_round_trip_and_storable() -> None:
    resp = assemble_stream(vllm_stream())
    assert resp is not None
    e = make_entry(resp, source="stream", now=100.0)
    back = Entry.from_bytes(e.to_bytes())
    assert back.response == resp and back.created_at == 100.0
    assert back.meta == {"source": "stream", "prompt_tokens": 10, "completion_tokens": 7}
    assert back.age_s(now=103.5) == 3.5
    assert storable({**resp, "choices": [{**resp["choices"][0], "finish_reason": "abort"}]}) == (
        False,
        "finish_reason",
    )
    assert storable({"object": "error"})[0] is False


def _reference_events(text: str) -> list[str]:
    """The SSE rules the parser follows, on a whole text: lines end at CRLF, CR or LF; a blank line
    ends an event; ``data`` fields joined by LF; comments and other fields ignored."""
    events: list[str] = []
    data: list[str] = []
    for line in re.split(r"\r\n|\r|\n", text)[:-1]:  # the last piece has no line end yet
        if not line:
            if data:
                events.append("\n".join(data))
            data = []
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if name == "data":
            data.append(value[1:] if sep and value.startswith(" ") else value)
    return events


sse_line = st.one_of(
    st.builds(lambda v: "data: " + v, st.text("ab é:{}", max_size=6)),
    st.builds(lambda v: "data:" + v, st.text("ab ", max_size=4)),
    st.just(""),
    st.just(": keepalive"),
    st.just("event: message"),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(sse_line, st.sampled_from(["\n", "\r\n", "\r"])), max_size=12),
    st.lists(st.integers(0, 200), max_size=6),
)
def test_parser_gives_the_reference_events_for_any_line_ends_and_any_split(lines, cuts) -> None:
    """LF-only input takes the parser's CR-free path (issue 30 round 9), CR or CRLF the other: both give
    the events of the rules, however the bytes are split."""
    text = "".join(line + end for line, end in lines) + "\n"
    raw = text.encode()
    p = SSEParser()
    got: list[str] = []
    at = 0
    for cut in sorted(cuts):
        got += p.feed(raw[at : max(at, cut)])
        at = max(at, cut)
    got += p.feed(raw[at:])
    assert got == _reference_events(text)
