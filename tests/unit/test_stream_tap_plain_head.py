"""The stream tap's pass-through: events nothing needs to read go out as the same bytes, and what the
tap reports (usage, [DONE], events, abort) is what the event-by-event path reports, however the
upstream's bytes are split."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.pipeline import stream_tap
from gateway.pipeline.stream_tap import StreamTap


def sse(chunks: list[dict], usage_null: bool) -> bytes:
    out = b""
    for i, text in enumerate(chunks):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text}}],
        }
        if usage_null:
            chunk["usage"] = None
        if i == len(chunks) - 1:
            chunk["choices"][0]["finish_reason"] = "length"
        out += b"data: " + orjson.dumps(chunk) + b"\n\n"
    usage = {"prompt_tokens": 5, "completion_tokens": len(chunks), "total_tokens": 5 + len(chunks)}
    out += b"data: " + orjson.dumps({"id": "c", "choices": [], "usage": usage}) + b"\n\n"
    return out + b"data: [DONE]\n\n"


def run(tap: StreamTap, data: bytes, cuts: list[int]) -> bytes:
    pieces, last = [], 0
    for c in sorted(set(cuts)):
        pieces.append(data[last:c])
        last = c
    pieces.append(data[last:])
    return b"".join(tap.feed(p) for p in pieces if p)


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(min_size=0, max_size=12), min_size=1, max_size=12),
    usage_null=st.booleans(),
    strip=st.booleans(),
    cut_fractions=st.lists(st.floats(min_value=0, max_value=1), max_size=8),
)
def test_pass_through_equals_the_event_by_event_path(
    texts: list[str], usage_null: bool, strip: bool, cut_fractions: list[float]
) -> None:
    data = sse(texts, usage_null)
    cuts = [int(f * len(data)) for f in cut_fractions]
    fast, slow = StreamTap(strip_usage=strip), StreamTap(strip_usage=strip)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(stream_tap, "_plain_head", lambda data, limit: 0)
        expected = run(slow, data, cuts)
    got = run(fast, data, cuts)
    assert got == expected
    assert (fast.usage, fast.done, fast.events, fast.aborted) == (
        slow.usage,
        slow.done,
        slow.events,
        slow.aborted,
    )
    assert fast.usage is not None and fast.done and b"[DONE]" not in got


def test_whole_events_without_anything_to_act_on_are_not_parsed() -> None:
    tap = StreamTap()
    data = b'data: {"choices":[{"delta":{"content":"a"}}],"usage":null}\n\ndata: {"choices":[]}\n\n'
    parsed = []
    tap.parser.feed = lambda b: parsed.append(b) or []  # type: ignore[method-assign]
    assert tap.feed(data) == data and tap.events == 2 and parsed == []


EV = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'


@pytest.mark.parametrize(
    ("data", "head"),
    [
        (EV + EV, 2 * len(EV)),
        (EV + b"data: [DONE]\n\n", len(EV)),  # [DONE] is held back
        (EV + b'data: {"choices":[],"usage":{"prompt_tokens":1}}\n\n', len(EV)),  # usage
        (EV + b'data: {"choices":[{"finish_reason":"abort"}]}\n\n', len(EV)),  # abort
        (EV + b'data: {"cho', len(EV)),  # an event not yet complete
        (b"data: [DONE]\n\n", 0),
        (b'data: {"a":1}\r\n\r\n', 0),  # other line ends
        (b": keep-alive\n\n" + EV, 0),  # a comment
        (b"event: x\ndata: {}\n\n", 0),  # another field
        (EV + b"data: a\ndata: b\n\n", 0),  # a multi-line event
    ],
)
def test_the_head_stops_before_what_must_be_read(data: bytes, head: int) -> None:
    assert stream_tap._plain_head(data, 1 << 20) == head
