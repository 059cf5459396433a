"""The real ``openai`` client on ``/v1/responses`` through the gateway, the gateway as the
``previous_response_id`` store (memory, then a real Redis shared by two gateways)."""

from __future__ import annotations

import hashlib

import aiohttp
import openai
import pytest
import redis.asyncio as aioredis

from tests.support.ports import free_port
from tests.support.stack import gateway, policy_for, sim_faults, sim_fleet, sim_requests

KEYS = {"t1": "sk-tenant-one", "t2": "sk-tenant-two"}
TENANCY = {
    "allow_anonymous": False,
    "tenants": [
        {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
    ],
}
INSTRUCTIONS = "You are the terse assistant of the prefix gateway's test suite. " * 6
AFFINITY = {"policy": "prefix_affinity", "route_key_tokens": 16}


def client(url: str, tenant: str = "t1") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key=KEYS[tenant], max_retries=0)


async def test_non_stream_maps_onto_chat_and_bills_usage() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, tenancy=TENANCY)) as gw:
        c = client(gw.url)
        raw = await c.responses.with_raw_response.create(
            model="sim-llama",
            instructions="Be terse.",
            input="Hello there",
            max_output_tokens=5,
            temperature=0,
        )
        r = raw.parse()
        assert r.id.startswith("resp_") and r.object == "response"
        assert r.output_text and len(r.output_text.split()) == 5
        assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"
        assert r.usage.output_tokens == 5 and r.usage.input_tokens > 0
        assert r.usage.input_tokens_details.cached_tokens == 0
        # the replica got chat completions: instructions first, then the input
        body = (await sim_requests(fleet.urls[0]))[-1]
        assert body["messages"] == [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Hello there"},
        ]
        assert body["max_tokens"] == 5
        # billed from the replica's usage, one ledger row
        assert raw.headers["x-gateway-billing-output-tokens"] == "5"
        rows = await gw.process.metering.ledger.query(tenant="t1")
        assert len(rows) == 1 and rows[0].tokens.output == 5
        await c.close()


async def test_stream_typed_events_in_order_and_the_stream_helper() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, tenancy=TENANCY)) as gw:
        c = client(gw.url)
        stream = await c.responses.create(
            model="sim-llama", input="Stream this", max_output_tokens=6, stream=True
        )
        kinds, deltas, completed = [], [], None
        async for event in stream:
            kinds.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            if event.type == "response.completed":
                completed = event.response
        assert kinds[:4] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
        assert kinds[4:10] == ["response.output_text.delta"] * 6
        assert kinds[10:] == [
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert completed is not None and completed.output_text == "".join(deltas)
        assert completed.usage.output_tokens == 6 and completed.usage.input_tokens > 0
        # the SDK's accumulating helper reads the same stream
        async with c.responses.stream(model="sim-llama", input="Stream this too", max_output_tokens=3) as s:
            final = await s.get_final_response()
        assert len(final.output_text.split()) == 3
        # stored like a whole answer
        got = await c.responses.retrieve(completed.id)
        assert got.output_text == completed.output_text
        await c.close()


async def test_three_turn_chain_lands_where_cached_and_survives_the_replica_going() -> None:
    async with (
        sim_fleet(2) as fleet,
        gateway(policy_for(fleet.urls, tenancy=TENANCY, routing=AFFINITY)) as gw,
    ):
        c = client(gw.url)
        raw1 = await c.responses.with_raw_response.create(
            model="sim-llama", instructions=INSTRUCTIONS, input="First question, please.", max_output_tokens=4
        )
        first, home = raw1.parse(), raw1.headers["x-gateway-replica"]
        raw2 = await c.responses.with_raw_response.create(
            model="sim-llama",
            instructions=INSTRUCTIONS,
            input="Second question.",
            previous_response_id=first.id,
            max_output_tokens=4,
        )
        second = raw2.parse()
        # while it is up, the follow-up goes where its history is cached, and the replica hits it
        assert raw2.headers["x-gateway-replica"] == home
        matched, total = map(int, raw2.headers["x-gateway-prefix-match"].split("/"))
        assert matched > 0.5 * total
        assert second.usage.input_tokens_details.cached_tokens > 0
        # the replica that answered both is gone: the third turn is answered elsewhere, whole
        gone = int(home[1:])
        await fleet.stop_replica(gone)
        raw3 = await c.responses.with_raw_response.create(
            model="sim-llama",
            instructions=INSTRUCTIONS,
            input="Third question.",
            previous_response_id=second.id,
            max_output_tokens=4,
        )
        third = raw3.parse()
        assert raw3.headers["x-gateway-replica"] != home and third.output_text
        body = (await sim_requests(fleet.urls[1 - gone]))[-1]
        assert [m["role"] for m in body["messages"]] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
        ]
        assert body["messages"][2]["content"] == first.output_text
        assert body["messages"][4]["content"] == second.output_text
        assert [m["content"] for m in body["messages"][1::2][:3]] == [
            "First question, please.",
            "Second question.",
            "Third question.",
        ]
        items = await c.responses.input_items.list(third.id)
        assert len(items.data) == 5  # three inputs and two earlier outputs
        await c.close()


async def test_store_false_get_delete_and_tenants_apart() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, tenancy=TENANCY)) as gw:
        c, other = client(gw.url), client(gw.url, "t2")
        kept = await c.responses.create(model="sim-llama", input="keep me", max_output_tokens=2)
        assert (await c.responses.retrieve(kept.id)).id == kept.id
        with pytest.raises(openai.NotFoundError):
            await other.responses.retrieve(kept.id)  # another tenant never sees it
        with pytest.raises(openai.BadRequestError) as err:
            await other.responses.create(model="sim-llama", input="x", previous_response_id=kept.id)
        assert err.value.body["code"] == "previous_response_not_found"
        await c.responses.delete(kept.id)
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(kept.id)
        unkept = await c.responses.create(
            model="sim-llama", input="forget me", max_output_tokens=2, store=False
        )
        assert unkept.store is False
        with pytest.raises(openai.NotFoundError):
            await c.responses.retrieve(unkept.id)
        with pytest.raises(openai.BadRequestError):
            await c.responses.create(model="sim-llama", input="x", previous_response_id=unkept.id)
        await c.close()
        await other.close()


async def test_bad_input_gets_openai_errors() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        cases = [
            ({"model": "sim-llama"}, "input", "missing_required_parameter"),
            ({"model": "sim-llama", "input": 5}, "input", "invalid_request"),
            (
                {"model": "sim-llama", "input": [{"type": "message", "content": "x"}]},
                "input[0].role",
                "invalid_request",
            ),
            ({"model": "sim-llama", "input": "x", "store": "yes"}, "store", "invalid_request"),
            (
                {"model": "sim-llama", "input": "x", "tools": [{"type": "web_search"}]},
                "tools[0]",
                "invalid_request",
            ),
            (
                {"model": "sim-llama", "input": [{"type": "item_reference", "id": "x"}]},
                "input[0].type",
                "invalid_request",
            ),
            (
                {"model": "sim-llama", "input": "x", "max_output_tokens": 0},
                "max_output_tokens",
                "invalid_request",
            ),
        ]
        for body, param, code in cases:
            async with s.post(gw.url + "/v1/responses", json=body) as r:
                assert r.status == 400, body
                err = (await r.json())["error"]
                assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error"), (
                    body
                )
        async with s.get(gw.url + "/v1/responses/resp_nothing") as r:
            assert r.status == 404 and (await r.json())["error"]["code"] == "not_found"
        assert await sim_requests(fleet.urls[0]) == []  # nothing reached the replica


async def test_chain_and_record_limits() -> None:
    store = {"max_chain_items": 3, "max_record_bytes": 4096}
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, protocols={"responses": store})) as gw:
        c = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        one = await c.responses.create(model="sim-llama", input="short", max_output_tokens=2)
        two = await c.responses.create(
            model="sim-llama", input="again", previous_response_id=one.id, max_output_tokens=2
        )
        with pytest.raises(openai.BadRequestError) as err:  # two's 3 items and its output, + 1 > 3
            await c.responses.create(model="sim-llama", input="more", previous_response_id=two.id)
        assert err.value.body["code"] == "conversation_too_long"
        big = await c.responses.create(model="sim-llama", input="y" * 5000, max_output_tokens=2)
        with pytest.raises(openai.NotFoundError):  # larger than max_record_bytes: answered, not kept
            await c.responses.retrieve(big.id)
        stored = gw.process.metrics.responses_stored
        assert stored.labels("too_large")._value.get() == 1
        assert stored.labels("stored")._value.get() == 2  # one and two
        await c.close()


async def test_redis_store_is_shared_by_two_gateways(redis_url) -> None:
    async with sim_fleet(2) as fleet:
        policy = policy_for(fleet.urls, redis={"url": redis_url}, tenancy=TENANCY)
        async with gateway(policy) as a, gateway(policy) as b:
            first = await client(a.url).responses.create(
                model="sim-llama", input="Remember the zebra.", max_output_tokens=3
            )
            cb = client(b.url)
            second = await cb.responses.create(
                model="sim-llama", input="What was it?", previous_response_id=first.id, max_output_tokens=3
            )
            assert (await cb.responses.retrieve(first.id)).output_text == first.output_text
            assert second.previous_response_id == first.id
            bodies = await sim_requests(fleet.urls[0]) + await sim_requests(fleet.urls[1])
            last = next(b for b in bodies if b["messages"][-1]["content"] == "What was it?")
            assert [m["content"] for m in last["messages"]][:2] == ["Remember the zebra.", first.output_text]
            # Redis keys name the tenant by digest and the response by id, never its text
            r = aioredis.from_url(redis_url)
            keys = [k.decode() for k in await r.keys("pgw:resp:*")]
            await r.aclose()
            assert len(keys) == 2 and all("zebra" not in k and "t1" not in k for k in keys)


async def test_cache_hits_are_new_responses_and_a_broken_stream_fails_typed() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, cache={"enabled": True})) as gw:
        c = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="x", max_retries=0)
        ask = {"model": "sim-llama", "input": "Cache me", "max_output_tokens": 4, "temperature": 0}
        first = await c.responses.create(**ask)
        raw = await c.responses.with_raw_response.create(**ask)
        hit = raw.parse()
        assert raw.headers["x-cache"] == "hit" and hit.output_text == first.output_text and hit.id != first.id
        assert (await c.responses.retrieve(hit.id)).output_text == first.output_text
        kinds = [
            e.type async for e in await c.responses.create(**ask, stream=True)
        ]  # replayed from the cache
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        assert len(await sim_requests(fleet.urls[0])) == 1
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 3})
        events = [e async for e in await c.responses.create(model="sim-llama", input="break", stream=True)]
        assert events[-1].type == "response.failed" and events[-1].response.status == "failed"
        await c.close()


async def test_a_reload_keeps_the_store_while_its_section_is_unchanged() -> None:
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls)
        async with gateway(policy) as gw:
            kept = await client_anonymous(gw.url).responses.create(
                model="sim-llama", input="x", max_output_tokens=2
            )
            same, _ = gw.process.build(
                policy.model_copy(update={"retries": policy.retries}), previous=gw.state
            )
            assert same.conversations is gw.state.conversations
            assert await same.conversations.get("anonymous", kept.id) is not None
            changed = policy.model_copy(
                update={
                    "protocols": policy.protocols.model_copy(
                        update={"responses": policy.protocols.responses.model_copy(update={"ttl_s": 60.0})}
                    )
                }
            )
            fresh, _ = gw.process.build(changed, previous=gw.state)
            assert fresh.conversations is not gw.state.conversations


def client_anonymous(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="anything", max_retries=0)


async def test_redis_away_is_503_never_a_wrong_not_found() -> None:
    async with sim_fleet(1) as fleet:
        dead = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
        async with gateway(policy_for(fleet.urls, redis={"url": dead, "socket_timeout_s": 0.2})) as gw:
            c = client_anonymous(gw.url)
            answered = await c.responses.create(model="sim-llama", input="x", max_output_tokens=2)
            assert answered.output_text  # answered, though it could not be kept
            metrics = gw.process.metrics
            assert metrics.responses_stored.labels("error")._value.get() == 1
            with pytest.raises(openai.InternalServerError) as err:
                await c.responses.create(model="sim-llama", input="y", previous_response_id=answered.id)
            assert err.value.status_code == 503 and err.value.body["code"] == "store_unavailable"
            with pytest.raises(openai.InternalServerError):
                await c.responses.retrieve(answered.id)
            assert metrics.redis_errors.labels("responses", "get")._value.get() == 2
            await c.close()


async def test_background_is_refused_and_input_items_are_paginated_as_openai_does() -> None:
    """Issue 31, item 4: ``background: true`` was answered synchronously; ``input_items`` ignored
    ``limit``, ``order`` and ``after`` (all items, ``first_id``/``last_id`` null, ``has_more`` false)."""
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, tenancy=TENANCY)) as gw:
        c = client(gw.url)
        with pytest.raises(openai.BadRequestError) as bg:
            await c.responses.create(model="sim-llama", input="later", background=True)
        assert bg.value.status_code == 400 and bg.value.body["param"] == "background"
        assert await sim_requests(fleet.urls[0]) == []
        said = [f"line {i}" for i in range(7)]
        inputs = [{"role": "user", "content": text} for text in said]
        r = await c.responses.create(model="sim-llama", input=inputs, max_output_tokens=2)
        page = await c.responses.input_items.list(r.id, limit=2, order="asc")
        assert [item.content for item in page.data] == said[:2]
        assert page.has_more is True
        assert page.first_id == page.data[0].id and page.last_id == page.data[1].id
        newest = await c.responses.input_items.list(r.id, limit=3)  # OpenAI's default order: desc
        assert [item.content for item in newest.data] == said[::-1][:3]
        after = await c.responses.input_items.list(r.id, limit=3, order="asc", after=page.last_id)
        assert [item.content for item in after.data] == said[2:5]
        walked = [item.content async for item in c.responses.input_items.list(r.id, limit=2)]
        assert walked == said[::-1]  # the client's auto-pagination follows has_more and after
        last = await c.responses.input_items.list(r.id, limit=100, order="asc")
        assert len(last.data) == 7 and last.has_more is False
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {KEYS['t1']}"}) as s:
            for query in ("limit=0", "limit=101", "limit=x", "order=sideways", "after=msg_nowhere"):
                async with s.get(f"{gw.url}/v1/responses/{r.id}/input_items?{query}") as resp:
                    assert resp.status == 400, query
                    assert (await resp.json())["error"]["type"] == "invalid_request_error", query
        await c.close()
