"""The real ``anthropic`` client on ``/v1/messages`` through the gateway: whole and streamed answers,
``cache_control`` billed by the explicit prompt-cache rules and reported in ``usage``, Anthropic's error
shape, ``x-api-key`` tenants."""

from __future__ import annotations

import hashlib

import aiohttp
import anthropic
import orjson
import pytest

from tests.support.stack import gateway, policy_for, sim_fleet, sim_requests

KEY = "sk-ant-tenant"
TENANCY = {
    "allow_anonymous": False,
    "tenants": [{"id": "t1", "api_key_sha256": [hashlib.sha256(KEY.encode()).hexdigest()]}],
}
BILLING = {"ledger": {"path": ":memory:"}, "rules": {"explicit_min_tokens": 64, "implicit_min_tokens": 16}}
SYSTEM = [
    {"type": "text", "text": "Reference manual of the gateway. " * 40, "cache_control": {"type": "ephemeral"}}
]


def policy(urls: list[str]):  # type: ignore[no-untyped-def]
    return policy_for(urls, tenancy=TENANCY, billing=BILLING, routing={"policy": "prefix_affinity"})


async def test_whole_answers_bill_cache_control_and_report_it() -> None:
    async with sim_fleet(2) as fleet, gateway(policy(fleet.urls)) as gw:
        c = anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        ask = {"model": "sim-llama", "max_tokens": 5, "system": SYSTEM}
        first = await c.messages.create(**ask, messages=[{"role": "user", "content": "What is a block?"}])
        assert first.type == "message" and first.role == "assistant" and first.stop_reason == "max_tokens"
        assert first.content[0].type == "text" and len(first.content[0].text.split()) == 5
        created = first.usage.cache_creation_input_tokens
        assert created >= 64 and first.usage.cache_read_input_tokens == 0
        assert first.usage.output_tokens == 5
        second = await c.messages.create(**ask, messages=[{"role": "user", "content": "And a replica?"}])
        assert second.usage.cache_read_input_tokens == created  # the marked prefix, read back
        assert second.usage.cache_creation_input_tokens == 0
        (row,) = await gw.process.metering.ledger.query(tenant="t1")
        assert row.requests == 2
        assert (row.tokens.explicit_create, row.tokens.explicit_hit) == (created, created)
        assert row.tokens.uncached == first.usage.input_tokens + second.usage.input_tokens
        # markers are Anthropic's syntax for the gateway: the replica gets a plain chat request
        bodies = await sim_requests(fleet.urls[0]) + await sim_requests(fleet.urls[1])
        assert len(bodies) == 2 and all(b"cache_control" not in orjson.dumps(b) for b in bodies)
        assert bodies[0]["messages"][0]["role"] == "system"
        # count_tokens: the replica's tokenizer on the same conversation, markers stripped first
        counted = await c.messages.count_tokens(
            model="sim-llama", system=SYSTEM, messages=[{"role": "user", "content": "What is a block?"}]
        )
        u = first.usage
        assert (
            counted.input_tokens == u.input_tokens + u.cache_creation_input_tokens + u.cache_read_input_tokens
        )
        tokenized = [b for u_ in fleet.urls for b in await sim_requests(u_) if "max_tokens" not in b]
        assert len(tokenized) == 1 and b"cache_control" not in orjson.dumps(tokenized[0])
        await c.close()


async def test_stream_events_and_final_usage() -> None:
    async with sim_fleet(1) as fleet, gateway(policy(fleet.urls)) as gw:
        c = anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        ask = {"model": "sim-llama", "max_tokens": 6, "system": SYSTEM}
        kinds, text = [], ""
        async with c.messages.stream(**ask, messages=[{"role": "user", "content": "Stream it"}]) as s:
            async for event in s:
                kinds.append(event.type)
                if event.type == "text":
                    text += event.text
            final = await s.get_final_message()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop"
        assert "content_block_start" in kinds and "content_block_stop" in kinds and "message_delta" in kinds
        assert final.content[0].text == text and len(text.split()) == 6
        assert final.stop_reason == "max_tokens"
        assert final.usage.output_tokens == 6 and final.usage.cache_creation_input_tokens >= 64
        async with c.messages.stream(**ask, messages=[{"role": "user", "content": "Again"}]) as s:
            again = await s.get_final_message()
        assert again.usage.cache_read_input_tokens == final.usage.cache_creation_input_tokens
        await c.close()


async def test_errors_come_in_anthropics_shape() -> None:
    async with sim_fleet(1) as fleet, gateway(policy(fleet.urls)) as gw:
        c = anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        with pytest.raises(anthropic.NotFoundError) as nf:
            await c.messages.create(model="nope", max_tokens=5, messages=[{"role": "user", "content": "x"}])
        assert nf.value.body["type"] == "error" and nf.value.body["error"]["type"] == "not_found_error"
        with pytest.raises(anthropic.BadRequestError) as bad:
            await c.messages.create(model="sim-llama", max_tokens=5, messages=[])
        assert bad.value.body["error"]["type"] == "invalid_request_error"
        with pytest.raises(anthropic.BadRequestError):
            await c.messages.create(
                model="sim-llama", max_tokens=5, messages=[{"role": "user", "content": [{"type": "video"}]}]
            )
        wrong = anthropic.AsyncAnthropic(base_url=gw.url, api_key="sk-wrong", max_retries=0)
        with pytest.raises(anthropic.AuthenticationError) as auth:
            await wrong.messages.create(
                model="sim-llama", max_tokens=5, messages=[{"role": "user", "content": "x"}]
            )
        assert auth.value.body["error"]["type"] == "authentication_error"
        async with aiohttp.ClientSession() as s:
            # not JSON, and a route the middleware answers (a method not allowed): Anthropic's shape too
            async with s.post(
                gw.url + "/v1/messages",
                data=b"{",
                headers={"x-api-key": KEY, "Content-Type": "application/json"},
            ) as r:
                assert r.status == 400 and (await r.json())["error"]["type"] == "invalid_request_error"
            async with s.get(gw.url + "/v1/messages") as r:
                body = await r.json()
                assert (
                    r.status == 405
                    and body["type"] == "error"
                    and body["error"]["type"] == "invalid_request_error"
                )
        assert await sim_requests(fleet.urls[0]) == []
        await c.close()
        await wrong.close()


async def test_a_replicas_error_comes_back_in_anthropics_shape() -> None:
    async with sim_fleet(1, max_model_len=64) as fleet, gateway(policy(fleet.urls)) as gw:
        c = anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        with pytest.raises(anthropic.BadRequestError) as err:  # the replica's 400: past its context
            await c.messages.create(
                model="sim-llama", max_tokens=500, messages=[{"role": "user", "content": "x"}]
            )
        assert err.value.body["type"] == "error" and "context length" in err.value.body["error"]["message"]
        assert len(await sim_requests(fleet.urls[0])) == 1
        await c.close()


SAMPLING = ("temperature", "top_k", "top_p")
BAD_REQUESTS = {  # issue 31, item 4: what Anthropic's API refuses, each once forwarded and answered 200
    "text block without text": (
        {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
        "messages[0].content[0].text",
    ),
    "tool name not a string": ({"tools": [{"name": 5, "input_schema": {"type": "object"}}]}, "tools[0].name"),
    "image data not base64": (
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "image",
                            "source": {"type": "base64", "media_type": "image/png", "data": "%%%not"},
                        }
                    ],
                }
            ]
        },
        "messages[0].content[0].source.data",
    ),
    "temperature above 1": ({"temperature": 5}, "temperature"),
    "negative top_k": ({"top_k": -5}, "top_k"),
    "top_p above 1": ({"top_p": 1.5}, "top_p"),
    "tool_use without input": (
        {
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f"}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]},
            ]
        },
        "messages[1].content[0].input",
    ),
    "tool_choice of an unknown type": ({"tool_choice": {"type": "sometimes"}}, "tool_choice"),
}


async def test_what_anthropics_api_refuses_is_refused_in_its_shape() -> None:
    """Each request, sent with the real ``anthropic`` client, is a 400 ``invalid_request_error`` that
    names the field, and never reaches the replica; count_tokens refuses the same content."""
    async with sim_fleet(1) as fleet, gateway(policy(fleet.urls)) as gw:
        c = anthropic.AsyncAnthropic(base_url=gw.url, api_key=KEY, max_retries=0)
        base = {"model": "sim-llama", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
        for label, (change, field) in BAD_REQUESTS.items():
            # the client has no sampling parameters any more (anthropic 2.x): sent as extra_body
            sampling = {k: v for k, v in change.items() if k in SAMPLING}
            typed = {k: v for k, v in change.items() if k not in SAMPLING}
            with pytest.raises(anthropic.BadRequestError) as bad:
                await c.messages.create(**{**base, **typed}, extra_body=sampling)
            assert bad.value.status_code == 400, label
            assert bad.value.body["type"] == "error", label
            assert bad.value.body["error"]["type"] == "invalid_request_error", label
            assert field in bad.value.body["error"]["message"], (label, bad.value.body)
        text_less = BAD_REQUESTS["text block without text"][0]
        with pytest.raises(anthropic.BadRequestError):
            await c.messages.count_tokens(model="sim-llama", **text_less)
        assert await sim_requests(fleet.urls[0]) == []
        # the same fields within their ranges are served
        ok = await c.messages.create(
            **base,
            extra_body={"temperature": 1, "top_k": 0, "top_p": 0.5},
            tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
            tool_choice={"type": "auto"},
        )
        assert ok.type == "message"
        await c.close()
