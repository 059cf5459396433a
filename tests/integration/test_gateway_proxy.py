"""Stream and non-stream chat and completions through the gateway to two simulators."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest
from multidict import CIMultiDict

from tests.support.stack import gateway, policy_for, sim_fleet, sim_requests

CHAT = {"model": "sim-llama", "messages": [{"role": "user", "content": "Hello there"}], "temperature": 0}
COMPLETION = {"model": "sim-llama", "prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}


def parse_sse(raw: bytes) -> list[object]:
    events: list[object] = []
    for block in raw.split(b"\n\n"):
        block = block.strip()
        if not block:
            continue
        assert block.startswith(b"data: "), block
        data = block[len(b"data: ") :]
        events.append("[DONE]" if data == b"[DONE]" else orjson.loads(data))
    return events


async def post(session: aiohttp.ClientSession, url: str, body: dict, **kw) -> tuple[int, CIMultiDict, bytes]:
    async with session.post(url, json=body, **kw) as r:
        return r.status, r.headers.copy(), await r.read()


@pytest.mark.parametrize("endpoint,body", [("chat/completions", CHAT), ("completions", COMPLETION)])
async def test_non_stream_matches_direct_answer(endpoint: str, body: dict) -> None:
    async with sim_fleet(2) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        status, headers, data = await post(s, f"{gw.url}/v1/{endpoint}", body)
        assert status == 200, data
        via = orjson.loads(data)
        _, _, direct_raw = await post(s, f"{fleet.urls[0]}/v1/{endpoint}", body)
        direct = orjson.loads(direct_raw)
        key = "message" if endpoint == "chat/completions" else None
        got = via["choices"][0][key]["content"] if key else via["choices"][0]["text"]
        want = direct["choices"][0][key]["content"] if key else direct["choices"][0]["text"]
        assert got == want and got
        assert headers["x-gateway-replica"] in {"r0", "r1"}
        assert headers["Content-Type"].startswith("application/json")
        assert via["usage"]["prompt_tokens"] > 0


@pytest.mark.parametrize("endpoint,body", [("chat/completions", CHAT), ("completions", COMPLETION)])
async def test_stream_is_relayed_chunk_by_chunk(endpoint: str, body: dict) -> None:
    async with sim_fleet(2) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        _, _, whole = await post(s, f"{gw.url}/v1/{endpoint}", body)
        async with s.post(f"{gw.url}/v1/{endpoint}", json={**body, "stream": True}) as r:
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/event-stream")
            assert r.headers["Cache-Control"] == "no-cache"
            assert r.headers["x-gateway-replica"] in {"r0", "r1"}
            raw = await r.read()
        events = parse_sse(raw)
        assert events[-1] == "[DONE]"
        chunks = [e for e in events[:-1] if isinstance(e, dict)]
        assert len(chunks) > 2
        if endpoint == "chat/completions":
            text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
            expected = orjson.loads(whole)["choices"][0]["message"]["content"]
        else:
            text = "".join(c["choices"][0].get("text") or "" for c in chunks if c["choices"])
            expected = orjson.loads(whole)["choices"][0]["text"]
        assert text == expected
        assert any(c["choices"] and c["choices"][0].get("finish_reason") for c in chunks)


async def test_stream_arrives_incrementally_not_buffered() -> None:
    """With a slow decode, the first chunk reaches the client long before the last one."""
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.05, overhead_s=0.0) as fleet,
        gateway(policy_for(fleet.urls)) as gw,
        aiohttp.ClientSession() as s,
    ):
        body = {**CHAT, "stream": True, "max_tokens": 10}
        loop = asyncio.get_running_loop()
        start = loop.time()
        arrivals = []
        async with s.post(f"{gw.url}/v1/chat/completions", json=body) as r:
            async for _ in r.content.iter_any():
                arrivals.append(loop.time() - start)
        assert len(arrivals) >= 3
        assert arrivals[-1] - arrivals[0] >= 0.2  # 10 tokens × 50 ms spread over the stream


async def test_round_robin_alternates_and_least_load_balances() -> None:
    async with (
        sim_fleet(2) as fleet,
        aiohttp.ClientSession() as s,
        gateway(policy_for(fleet.urls, routing={"policy": "round_robin"})) as gw,
    ):
        seen = [
            (await post(s, f"{gw.url}/v1/chat/completions", CHAT))[1]["x-gateway-replica"] for _ in range(4)
        ]
        assert seen[0] != seen[1] and seen[0] == seen[2] and seen[1] == seen[3]
    async with (
        sim_fleet(2, speed=1.0, decode_s_per_token=0.02, overhead_s=0.0) as fleet,
        aiohttp.ClientSession() as s,
        gateway(policy_for(fleet.urls, routing={"policy": "least_load", "seed": 1})) as gw,
    ):
        results = await asyncio.gather(
            *(post(s, f"{gw.url}/v1/chat/completions", {**CHAT, "max_tokens": 10}) for _ in range(10))
        )
        replicas = [h["x-gateway-replica"] for _, h, _ in results]
        assert sorted(set(replicas)) == ["r0", "r1"]
        assert abs(replicas.count("r0") - replicas.count("r1")) <= 2


async def test_request_id_is_echoed_or_generated() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        _, headers, _ = await post(
            s, f"{gw.url}/v1/chat/completions", CHAT, headers={"x-request-id": "abc-123"}
        )
        assert headers["x-request-id"] == "abc-123"
        _, headers, _ = await post(s, f"{gw.url}/v1/chat/completions", CHAT)
        assert len(headers["x-request-id"]) == 24
        received = await sim_requests(fleet.urls[0])
        assert received[-1]["model"] == "sim-llama"


async def test_models_health_ready_and_metrics() -> None:
    async with sim_fleet(2) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        async with s.get(f"{gw.url}/v1/models") as r:
            models = await r.json()
        assert [m["id"] for m in models["data"]] == ["sim-llama"]
        async with s.get(f"{gw.url}/health") as r:
            assert r.status == 200
        async with s.get(f"{gw.url}/ready") as r:
            assert r.status == 200
            assert await r.json() == {"ready": True}  # nothing more: no model or replica names
        assert [r.id for r in gw.state.pools["sim-llama"].router.replicas if r.healthy] == ["r0", "r1"]
        await post(s, f"{gw.url}/v1/chat/completions", CHAT)
        await post(s, f"{gw.url}/v1/chat/completions", {**CHAT, "stream": True})
        async with s.get(f"{gw.metrics_url}/metrics") as r:
            text = await r.text()
        assert 'prefix_gateway_requests_total{model="sim-llama",replica="r0",status="200"} 1.0' in text
        assert 'prefix_gateway_requests_total{model="sim-llama",replica="r1",status="200"} 1.0' in text
        assert "prefix_gateway_time_to_first_byte_seconds_bucket" in text
        assert "prefix_gateway_request_duration_seconds_count" in text
        assert 'prefix_gateway_in_flight{replica="r0"} 0.0' in text


async def test_served_model_name_is_sent_upstream() -> None:
    async with sim_fleet(1, models=("backend-name",)) as fleet, aiohttp.ClientSession() as s:
        policy = policy_for(fleet.urls, model="public-name")
        policy.models[0].served_model_name = "backend-name"
        async with gateway(policy) as gw:
            status, _, data = await post(s, f"{gw.url}/v1/chat/completions", {**CHAT, "model": "public-name"})
            assert status == 200, data
        assert (await sim_requests(fleet.urls[0]))[-1]["model"] == "backend-name"
