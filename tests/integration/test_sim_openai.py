"""The official ``openai`` client talks to the simulator: its wire format is OpenAI's."""

from __future__ import annotations

from collections.abc import AsyncIterator

import openai
import pytest

from sim import Fleet, SimConfig, start_replicas


@pytest.fixture
async def client() -> AsyncIterator[openai.AsyncOpenAI]:
    fleet: Fleet = await start_replicas([SimConfig(speed=0)], base_port=0)
    c = openai.AsyncOpenAI(base_url=fleet.urls[0] + "/v1", api_key="unused", max_retries=0, timeout=10)
    yield c
    await c.close()
    await fleet.stop()


async def test_chat_non_stream_and_stream_agree(client: openai.AsyncOpenAI) -> None:
    messages = [{"role": "user", "content": "Explain prefix caching. " * 10}]
    full = await client.chat.completions.create(
        model="sim-llama", messages=messages, temperature=0, max_tokens=6
    )
    assert full.choices[0].finish_reason == "length"
    assert full.usage is not None and full.usage.completion_tokens == 6
    stream = await client.chat.completions.create(
        model="sim-llama",
        messages=messages,
        temperature=0,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text == full.choices[0].message.content
    assert finish == "length"
    assert usage is not None and usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == usage.prompt_tokens // 16 * 16 > 0


async def test_completions_models_embeddings_and_errors(client: openai.AsyncOpenAI) -> None:
    c = await client.completions.create(model="sim-llama", prompt="Once upon a time", max_tokens=3)
    assert len(c.choices[0].text.split()) == 3
    models = await client.models.list()
    assert [m.id for m in models.data] == ["sim-llama"]
    e = await client.embeddings.create(model="sim-llama", input=["a", "b"])
    assert len(e.data) == 2 and len(e.data[0].embedding) == 8
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(model="sim-llama", messages=[])
