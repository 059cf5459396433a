"""The real ``openai`` Python client against the gateway: chat, completions, streaming, errors."""

from __future__ import annotations

import hashlib

import openai
import pytest

from tests.support.stack import gateway, policy_for, sim_fleet

KEY = "sk-test-tenant"


def tenancy(anonymous: bool) -> dict:
    return {
        "allow_anonymous": anonymous,
        "tenants": [{"id": "t1", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
    }


@pytest.fixture
async def client():
    async with sim_fleet(2) as fleet, gateway(policy_for(fleet.urls, tenancy=tenancy(False))) as gw:
        c = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key=KEY, max_retries=0)
        yield c, gw
        await c.close()


async def test_chat_and_completions(client) -> None:
    c, _ = client
    chat = await c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], temperature=0, max_tokens=5
    )
    assert chat.choices[0].message.content
    assert chat.usage.completion_tokens == 5
    comp = await c.completions.create(model="sim-llama", prompt="abc", max_tokens=4, temperature=0)
    assert comp.choices[0].text
    models = await c.models.list()
    assert [m.id for m in models.data] == ["sim-llama"]
    emb = await c.embeddings.create(model="sim-llama", input="hello")
    assert len(emb.data[0].embedding) > 0


async def test_streaming_with_usage(client) -> None:
    c, _ = client
    stream = await c.chat.completions.create(
        model="sim-llama",
        messages=[{"role": "user", "content": "hi"}],
        temperature=0,
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, usage, finish = "", None, None
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage:
            usage = chunk.usage
    whole = await c.chat.completions.create(
        model="sim-llama", messages=[{"role": "user", "content": "hi"}], temperature=0, max_tokens=6
    )
    assert text == whole.choices[0].message.content
    assert finish == "length"
    assert usage is not None and usage.completion_tokens == 6


async def test_error_mapping(client) -> None:
    c, gw = client
    with pytest.raises(openai.NotFoundError) as nf:
        await c.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as br:
        await c.chat.completions.create(model="sim-llama", messages=[])
    assert br.value.param == "messages"
    bad = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as au:
        await bad.chat.completions.create(model="sim-llama", messages=[{"role": "user", "content": "x"}])
    assert au.value.code == "invalid_api_key"
    await bad.close()
