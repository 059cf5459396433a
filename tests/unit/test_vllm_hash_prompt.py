"""What precise mode can and cannot reproduce of a request's engine tokens."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from router.chat_template import ChatTemplate
from router.engine_prompt import EnginePrompt

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events"


@pytest.fixture(scope="module")
def ep(tmp_path_factory: pytest.TempPathFactory) -> EnginePrompt:
    d = tmp_path_factory.mktemp("model")
    with gzip.open(FIXTURES / "tokenizer.json.gz") as src, (d / "tokenizer.json").open("wb") as dst:
        shutil.copyfileobj(src, dst)
    shutil.copy(FIXTURES / "tokenizer_config.json", d / "tokenizer_config.json")
    return EnginePrompt(d / "tokenizer.json", None, 32)


def test_the_served_template_renders_one_line_per_message_and_the_generation_prompt(ep):
    template = ep._template
    text = template.render([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])
    assert text == "<|system|>S<|end|>\n<|user|>U<|end|>\n<|assistant|>"
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert template.render(parts) == "<|user|>a\nb<|end|>\n<|assistant|>"


def test_unreproducible_requests_give_no_ids(ep):
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert ep.token_ids("chat", {"messages": [{"role": "user", "content": [image]}]}) is None
    assert ep.token_ids("chat", {"messages": "not a list"}) is None
    assert ep.token_ids("completions", {"prompt": ["two", "prompts"]}) is None
    assert ep.token_ids("embeddings", {"input": "x"}) is None
    assert ep.hashes("chat", {"messages": [{"role": "user", "content": [image]}]}, "salt") == ()


def test_completions_prompts_as_text_or_ids(ep):
    ids = ep.token_ids("completions", {"prompt": "Once upon a time"})
    assert ids and ep.token_ids("completions", {"prompt": ["Once upon a time"]}) == ids
    assert ep.token_ids("completions", {"prompt": [5, 6, 7]}) == [5, 6, 7]


def test_a_template_that_raises_renders_none():
    t = ChatTemplate("{{ raise_exception('no system role') }}")
    assert t.render([{"role": "user", "content": "x"}]) is None
