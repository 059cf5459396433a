"""Canonical prompt rendering: model reading order, media digests, and the append-only property."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from router.prompt import (
    BATCH_SEPARATOR_ID,
    _message_pieces,
    chat_pieces,
    render_chat,
    render_completion_prompt,
    render_prompt,
)

text = st.text(max_size=40)
part = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda u: {"type": "image_url", "image_url": {"url": u}}, text),
    st.builds(lambda d: {"type": "input_audio", "input_audio": {"data": d, "format": "wav"}}, text),
)
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.one_of(text, st.lists(part, max_size=3), st.none()),
    },
    optional={"name": text, "tool_call_id": text},
)
tools = st.one_of(
    st.none(), st.lists(st.fixed_dictionaries({"type": st.just("function"), "name": text}), max_size=2)
)


@settings(max_examples=200, deadline=None)
@given(st.lists(message, max_size=6), st.lists(message, min_size=1, max_size=3), tools)
def test_appending_messages_only_appends_to_the_rendering(history, more, tool_list):
    before = render_chat(history, tool_list)
    after = render_chat(history + more, tool_list)
    assert after.startswith(before)
    assert len(after) > len(before)


@settings(max_examples=100, deadline=None)
@given(st.lists(message, min_size=1, max_size=4), tools)
def test_rendering_is_a_pure_function_of_the_request(messages, tool_list):
    body = {"messages": messages, "tools": tool_list}
    assert render_prompt("chat", body) == render_prompt("chat", dict(body))


def test_tools_come_first_with_sorted_keys_and_system_before_user():
    a = render_chat(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], [{"b": 1, "a": 2}]
    )
    b = render_chat(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], [{"a": 2, "b": 1}]
    )
    assert a == b
    assert a.index('{"a":2,"b":1}') < a.index("S") < a.index("U")


def test_role_and_content_boundaries_change_the_rendering():
    one = render_chat([{"role": "user", "content": "ab"}])
    two = render_chat([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])
    other_role = render_chat([{"role": "assistant", "content": "ab"}])
    assert len({one, two, other_role}) == 3


def test_text_is_verbatim_and_a_lone_text_part_reads_like_the_string():
    s = render_chat([{"role": "user", "content": "héllo wörld"}])
    p = render_chat([{"role": "user", "content": [{"type": "text", "text": "héllo wörld"}]}])
    assert "héllo wörld" in s
    assert s == p


def test_media_is_rendered_by_a_fixed_size_digest_never_the_payload():
    big = "data:image/png;base64," + "A" * 100_000
    r1 = render_chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": big}}]}])
    r2 = render_chat([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": big + "B"}}]}])
    audio = render_chat(
        [{"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "QUJD"}}]}]
    )
    assert len(r1) < 100 and "AAAA" not in r1
    assert r1 != r2
    assert "QUJD" not in audio


def test_tool_calls_and_cache_control_markers():
    call = {"role": "assistant", "content": None, "tool_calls": [{"id": "1", "function": {"name": "f"}}]}
    assert '"name":"f"' in render_chat([call])
    marked = [
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
    ]
    plain = [{"role": "user", "content": [{"type": "text", "text": "x"}]}]
    assert render_chat(marked) == render_chat(plain)  # the marker does not change what the model reads
    tool = {"type": "function", "function": {"name": "f"}}
    assert render_chat(plain, [{**tool, "cache_control": {"type": "ephemeral"}}]) == render_chat(
        plain, [tool]
    )


def test_completion_prompts():
    assert render_completion_prompt("abc") == "abc"
    assert render_completion_prompt(None) == ""
    assert render_completion_prompt([1, 2, 3]) == [1, 2, 3]
    assert render_completion_prompt([[1, 2], [3]]) == [1, 2, BATCH_SEPARATOR_ID, 3]
    joined = render_completion_prompt(["ab", "c"])
    assert isinstance(joined, str) and joined.startswith("ab") and joined != "abc"
    assert render_prompt("completions", {"prompt": "hello"}) == "hello"
    assert render_prompt("embeddings", {"input": "hello"}) == "hello"


odd_message = st.one_of(
    message,
    st.dictionaries(
        st.sampled_from(["role", "content", "name", "x"]), st.one_of(text, st.none()), max_size=3
    ),
    text,
    st.none(),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(odd_message, max_size=5))
def test_the_two_key_fast_path_renders_what_the_message_renderer_renders(messages):
    """``chat_pieces`` renders a two-key message with text content itself (issue 30 round 9): the
    same pieces ``_message_pieces`` gives, for any message shape (a "name" beside the content, no role,
    a message that is not an object)."""
    assert list(chat_pieces(messages)) == [p for m in messages for p in _message_pieces(m)]
