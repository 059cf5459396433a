"""LoRA adapters through the gateway: listed from the replicas' /v1/models, routed only where served,
never sharing prefix blocks with the base model, loaded on demand when the policy allows."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from config.policy import Policy
from router.policies.base import PickContext
from router.types import RouteRequest
from sim.config import SimConfig
from sim.fleet import start_replicas
from tests.support.stack import gateway, policy_for, sim_requests

PROMPT = "A long shared question about routing LoRA adapters behind one gateway. " * 4


async def models_of(s: aiohttp.ClientSession, url: str) -> dict[str, str | None]:
    async with s.get(url + "/v1/models") as r:
        return {m["id"]: m["parent"] for m in (await r.json())["data"]}


async def wait_for_adapter(s: aiohttp.ClientSession, url: str, name: str) -> None:
    for _ in range(100):
        if name in await models_of(s, url):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never listed")


async def chat(s: aiohttp.ClientSession, url: str, model: str, text: str) -> tuple[int, dict, dict]:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": text}],
        "max_tokens": 2,
        "temperature": 0,
    }
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        return r.status, dict(r.headers), await r.json()


@pytest.fixture
async def fleet():
    configs = [
        SimConfig(speed=0.0, lora_adapters=("sql-lora",)),
        SimConfig(speed=0.0),
        SimConfig(speed=0.0, lora_adapters=("sql-lora",), allow_runtime_lora=True),
    ]
    fleet = await start_replicas(configs, base_port=0)
    yield fleet
    await fleet.stop()


def lora_policy(urls: list[str], **lora) -> Policy:  # type: ignore[no-untyped-def]
    raw = policy_for(urls, routing={"policy": "prefix_affinity"}).model_dump(mode="json")
    raw["models"][0]["lora"] = {"refresh_s": 0.1, **lora}
    return Policy.model_validate(raw)


async def test_adapters_are_listed_and_routed_only_where_served(fleet) -> None:
    async with gateway(lora_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        await wait_for_adapter(s, gw.url, "sql-lora")
        assert await models_of(s, gw.url) == {"sim-llama": None, "sql-lora": "sim-llama"}
        for i in range(24):
            status, headers, body = await chat(s, gw.url, "sql-lora", f"question {i} " * 8)
            assert status == 200 and body["model"] == "sql-lora"
            assert headers["x-gateway-replica"] in ("r0", "r2")
        served = [sum(b["model"] == "sql-lora" for b in await sim_requests(u)) for u in fleet.urls]
        assert served[1] == 0 and served[0] + served[2] == 24
        status, _, body = await chat(s, gw.url, "no-such-lora", "x")
        assert status == 404 and body["error"]["code"] == "model_not_found"
        metric = gw.process.metrics.adapter_requests.labels("sim-llama", "sql-lora", "200")
        assert metric._value.get() == 24


async def test_an_adapter_never_matches_the_base_models_blocks(fleet) -> None:
    async with gateway(lora_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        await wait_for_adapter(s, gw.url, "sql-lora")
        router = gw.state.pools["sim-llama"].router
        body = {"messages": [{"role": "user", "content": PROMPT}]}
        base = router._prefix(RouteRequest("chat", "sim-llama", body), _ctx())
        lora = router._prefix(RouteRequest("chat", "sql-lora", body), _ctx())
        assert base and lora and not set(base) & set(lora)
        status, _, _ = await chat(s, gw.url, "sim-llama", PROMPT)
        assert status == 200
        status, headers, again = await chat(s, gw.url, "sql-lora", PROMPT)
        assert headers["x-gateway-prefix-match"].startswith("0/")  # the base model's blocks do not count
        assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # nor on the replica
        status, headers, third = await chat(s, gw.url, "sql-lora", PROMPT)
        assert not headers["x-gateway-prefix-match"].startswith("0/")
        assert third["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_dynamic_loading_loads_once_on_the_chosen_replica(fleet) -> None:
    adapters = [{"name": "new-lora", "path": "/models/new-lora"}]
    policy = lora_policy([fleet.urls[2]], adapters=adapters, dynamic_loading=True)
    async with gateway(policy) as gw, aiohttp.ClientSession() as s:
        results = await asyncio.gather(*(chat(s, gw.url, "new-lora", f"q{i}") for i in range(6)))
        assert [r[0] for r in results] == [200] * 6
        assert fleet.replicas[2].adapters["new-lora"] == "/models/new-lora"
        loads = gw.process.metrics.adapter_loads.labels("sim-llama", "new-lora", "loaded")
        assert loads._value.get() == 1
        assert (await models_of(s, gw.url))["new-lora"] == "sim-llama"


async def test_an_adapter_nobody_serves_is_503_without_dynamic_loading(fleet) -> None:
    adapters = [{"name": "new-lora", "path": "/models/new-lora"}]
    async with gateway(lora_policy(fleet.urls, adapters=adapters)) as gw, aiohttp.ClientSession() as s:
        status, _, body = await chat(s, gw.url, "new-lora", "x")
        assert status == 503 and body["error"]["code"] == "no_replica_available"
        # with loading allowed but the replica refusing it (no runtime updates), the attempt fails cleanly
    policy = lora_policy([fleet.urls[1]], adapters=adapters, dynamic_loading=True)
    async with gateway(policy) as gw, aiohttp.ClientSession() as s:
        status, _, body = await chat(s, gw.url, "new-lora", "x")
        assert status == 503 and body["error"]["code"] == "adapter_load_failed"
        assert gw.process.metrics.adapter_loads.labels("sim-llama", "new-lora", "failed")._value.get() >= 1


def _ctx() -> PickContext:
    return PickContext(request=None, candidates=[], block_size=16)  # type: ignore[arg-type]


async def test_the_adapters_a_pool_knows_are_bounded() -> None:
    configs = [SimConfig(speed=0.0, lora_adapters=tuple(f"a{i}" for i in range(5))) for _ in range(2)]
    configs[1].lora_adapters = tuple(f"b{i}" for i in range(5))
    fleet = await start_replicas(configs, base_port=0)
    try:
        async with gateway(lora_policy(fleet.urls, max_adapters=6)) as gw, aiohttp.ClientSession() as s:
            await wait_for_adapter(s, gw.url, "a0")
            await wait_for_adapter(s, gw.url, "b0")
            listed = await models_of(s, gw.url)
            assert sorted(listed) == ["a0", "a1", "a2", "a3", "a4", "b0", "sim-llama"]
            status, _, _ = await chat(s, gw.url, "b4", "x")
            assert status == 404  # beyond the bound: not a model this gateway serves
    finally:
        await fleet.stop()
