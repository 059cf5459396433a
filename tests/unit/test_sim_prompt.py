"""The simulator's fixed chat template and completion prompts."""

from __future__ import annotations

import struct

import pytest

from sim.prompt import PromptError, render_chat, render_completion


def test_chat_renders_roles_and_contents_in_order() -> None:
    out = render_chat(
        {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    ).decode()
    assert out == "<|system|>\nbe brief\n<|user|>\nhi\n<|assistant|>\n"


def test_appending_a_turn_appends_to_the_prompt() -> None:
    turn1 = [{"role": "user", "content": "first question"}]
    turn2 = [*turn1, {"role": "assistant", "content": "an answer"}, {"role": "user", "content": "next"}]
    p1, p2 = render_chat({"messages": turn1}), render_chat({"messages": turn2})
    assert p2.startswith(p1)
    assert len(p2) > len(p1)


def test_text_parts_equal_a_plain_string() -> None:
    plain = render_chat({"messages": [{"role": "user", "content": "hello world"}]})
    parts = render_chat(
        {
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}],
                }
            ]
        }
    )
    assert plain == parts


def test_image_parts_render_as_a_digest_not_the_data() -> None:
    url = "data:image/png;base64," + "A" * 500
    out = render_chat(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]}
    )
    assert b"AAAA" not in out
    assert out.startswith(b"<|user|>\n<image_url:")
    other = render_chat(
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url + "B"}}]}]}
    )
    assert other != out


def test_tools_come_first_with_sorted_keys() -> None:
    tools = [{"type": "function", "function": {"name": "f", "description": "d"}}]
    out = render_chat({"messages": [{"role": "user", "content": "x"}], "tools": tools}).decode()
    assert out.startswith(
        '<|tools|>\n[{"function":{"description":"d","name":"f"},"type":"function"}]\n<|user|>'
    )


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": "hi"},
        {"messages": [{"content": "no role"}]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
    ],
)
def test_invalid_chat_bodies_raise(body: dict) -> None:
    with pytest.raises(PromptError):
        render_chat(body)


def test_completion_prompts() -> None:
    assert render_completion({"prompt": "abc"}, 4) == (b"abc", 4)
    assert render_completion({"prompt": ["abc"]}, 3) == (b"abc", 3)
    data, bpt = render_completion({"prompt": [1, 2, 3]}, 7)
    assert (data, bpt) == (struct.pack("<3I", 1, 2, 3), 4)
    for bad in ({}, {"prompt": 3}, {"prompt": ["a", "b"]}, {"prompt": [-1]}, {"prompt": []}):
        with pytest.raises(PromptError):
            render_completion(bad, 4)
