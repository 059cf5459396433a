"""cache_control markers: finding the marked prefix, limits, stripping without mutation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cache.billing.markers import (
    InvalidMarker,
    MarkerError,
    MarkerPosition,
    TooManyMarkers,
    find_markers,
    strip_markers,
)

EPH = {"type": "ephemeral"}


def _part(text: str, marked: bool = False) -> dict[str, Any]:
    p: dict[str, Any] = {"type": "text", "text": text}
    if marked:
        p["cache_control"] = dict(EPH)
    return p


def _body() -> dict[str, Any]:
    return {
        "model": "m",
        "temperature": 0,
        "messages": [
            {"role": "system", "content": [_part("sys-a"), _part("sys-b", marked=True)]},
            {"role": "user", "content": [_part("doc", marked=True), _part("question")]},
            {"role": "assistant", "content": "plain answer"},
            {"role": "user", "content": "next"},
        ],
    }


def _has_marker(x: Any) -> bool:
    if isinstance(x, dict):
        return "cache_control" in x or any(_has_marker(v) for v in x.values())
    if isinstance(x, list):
        return any(_has_marker(v) for v in x)
    return False


def test_no_markers():
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    assert find_markers(body) is None
    assert find_markers({"model": "m", "prompt": "text"}) is None
    out = strip_markers(body)
    assert out == body and out is not body


def test_prefix_ends_at_last_marker_part():
    body = _body()
    mp = find_markers(body)
    assert mp is not None
    assert mp.count == 2
    assert mp.positions == (MarkerPosition(0, 1), MarkerPosition(1, 0))
    assert mp.body["messages"] == [
        {"role": "system", "content": [_part("sys-a"), _part("sys-b")]},
        {"role": "user", "content": [_part("doc")]},
    ]
    assert mp.body["model"] == "m" and mp.body["temperature"] == 0
    assert not _has_marker(mp.body)


def test_system_only_marker():
    body = _body()
    del body["messages"][1]["content"][0]["cache_control"]
    mp = find_markers(body)
    assert mp is not None and mp.count == 1
    assert [m["role"] for m in mp.body["messages"]] == ["system"]
    assert mp.body["messages"][0]["content"] == [_part("sys-a"), _part("sys-b")]


def test_message_level_marker_anthropic_style():
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "long rules", "cache_control": dict(EPH)},
            {"role": "user", "content": "q"},
        ],
    }
    mp = find_markers(body)
    assert mp is not None and mp.positions == (MarkerPosition(0, None),)
    assert mp.body["messages"] == [{"role": "system", "content": "long rules"}]


def test_tool_marker_marks_the_tools_only():
    tool = {"type": "function", "function": {"name": "f", "parameters": {}}, "cache_control": dict(EPH)}
    body = {"model": "m", "tools": [tool], "messages": [{"role": "user", "content": "q"}]}
    mp = find_markers(body)
    assert mp is not None and mp.positions == (MarkerPosition(-1, None),)
    assert mp.body["messages"] == []
    assert mp.body["tools"] == [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    assert not _has_marker(strip_markers(body))


def test_four_markers_allowed_five_rejected():
    msgs = [{"role": "user", "content": [_part(f"p{i}", marked=True)]} for i in range(5)]
    body4 = {"model": "m", "messages": msgs[:4]}
    assert find_markers(body4).count == 4  # type: ignore[union-attr]
    with pytest.raises(TooManyMarkers) as exc:
        find_markers({"model": "m", "messages": msgs})
    assert isinstance(exc.value, ValueError) and isinstance(exc.value, MarkerError)
    assert (exc.value.count, exc.value.limit) == (5, 4)
    assert "at most 4" in str(exc.value)
    assert find_markers({"model": "m", "messages": msgs}, max_markers=5).count == 5  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [{"type": "persistent"}, "ephemeral", None, {}])
def test_invalid_marker_rejected(bad):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": bad}]}],
    }
    with pytest.raises(InvalidMarker, match=r"messages\[0\]\.content\[0\]"):
        find_markers(body)


def test_strip_does_not_mutate_and_keeps_everything_else():
    body = _body()
    snapshot = copy.deepcopy(body)
    out = strip_markers(body)
    assert body == snapshot  # input untouched
    assert not _has_marker(out)
    assert list(out) == list(body)  # key order
    assert [m["role"] for m in out["messages"]] == ["system", "user", "assistant", "user"]
    assert out["messages"][0]["content"] == [_part("sys-a"), _part("sys-b")]
    assert out["messages"][2] == {"role": "assistant", "content": "plain answer"}
    out["messages"].append({"role": "user", "content": "more"})
    assert len(body["messages"]) == 4


def test_malformed_shapes_are_left_to_validation():
    assert find_markers({"messages": "not a list"}) is None
    assert find_markers({"messages": [None, 3, {"role": "user", "content": None}]}) is None
    assert strip_markers({"messages": "x"}) == {"messages": "x"}


def _remove(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _remove(v) for k, v in x.items() if k != "cache_control"}
    if isinstance(x, list):
        return [_remove(v) for v in x]
    return x


_text = st.text(max_size=5)
_parts = st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": _text}, optional={"cache_control": st.just(EPH)}),
    max_size=3,
)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]), "content": _text | _parts},
    optional={"cache_control": st.just(EPH)},
)


@given(st.lists(_message, max_size=6))
def test_strip_equals_recursive_removal(messages):
    body = {"model": "m", "messages": messages}
    snapshot = copy.deepcopy(body)
    out = strip_markers(body)
    assert out == _remove(snapshot)
    assert body == snapshot
    try:
        mp = find_markers(body)
    except TooManyMarkers as exc:
        assert exc.count > 4
        return
    if mp is None:
        assert not _has_marker(body)
        return
    # the prefix is a prefix of the stripped messages, ending at the last marked message
    pm = mp.body["messages"]
    assert len(pm) == mp.last.message + 1
    assert pm[:-1] == out["messages"][: len(pm) - 1]
    assert not _has_marker(mp.body)


def test_marked_prefix_renders_as_a_prefix_of_the_forwarded_prompt():
    """Contract with router.prompt: the prefix we tokenize is the start of what the replica reads."""
    from router.prompt import render_prompt

    body = _body()
    mp = find_markers(body)
    assert mp is not None
    full = render_prompt("chat", strip_markers(body))
    prefix = render_prompt("chat", mp.body)
    assert isinstance(full, str) and isinstance(prefix, str)
    assert full.startswith(prefix) and "doc" in prefix and "question" not in prefix
    assert render_prompt("chat", body) == full  # the renderer ignores markers itself
