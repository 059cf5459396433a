"""The gateway in front of two real vLLM CPU replicas: affinity, salts, streaming, scraping, precise mode.

Every prompt starts with a fresh nonce so that tests do not see each other's cached blocks.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.fleet.vllm_info import parse_cache_config
from router.blocks import block_hashes, root_hash
from router.tokenizers import from_ids
from scripts.vllm_cpu import replicas as R
from tests.real_vllm.conftest import BLOCK, KEYS

pytestmark = pytest.mark.real_vllm


def system_prompt(words: int = 400) -> str:
    nonce = uuid.uuid4().hex
    return f"[{nonce}] You answer briefly. " + " ".join(R.WORDS[i % len(R.WORDS)] for i in range(words))


def chat(system: str, user: str, **extra) -> dict:
    return {
        "model": extra.pop("model", R.SERVED_NAME),
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 2,
        "temperature": 0,
        **extra,
    }


async def post(url: str, body: dict, tenant: str = "tenant-a") -> tuple[dict, dict[str, str]]:
    headers = {"Authorization": f"Bearer {KEYS[tenant]}"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status == 200, await r.text()
        return await r.json(), dict(r.headers)


async def replica_counters(url: str) -> dict[str, float]:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"):
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
    return out


async def hits_delta(url: str, send) -> float:  # type: ignore[no-untyped-def]
    """``vllm:prefix_cache_hits_total`` of one replica across ``await send()`` (stats land async)."""
    before = (await replica_counters(url))["vllm:prefix_cache_hits_total"]
    queries_before = (await replica_counters(url))["vllm:prefix_cache_queries_total"]
    await send()
    for _ in range(100):  # until the request's queries are counted (the engine reports each step)
        now = await replica_counters(url)
        if now["vllm:prefix_cache_queries_total"] > queries_before:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the replica never counted the request's prefix-cache query")
    return now["vllm:prefix_cache_hits_total"] - before


async def test_affinity_gives_real_cached_tokens_on_the_second_request(gw):
    system = system_prompt()
    first, h1 = await post(gw.url, chat(system, "first question"))
    second, h2 = await post(gw.url, chat(system, "another question"))
    assert h1["x-gateway-replica"] == h2["x-gateway-replica"]
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    shared = first["usage"]["prompt_tokens"] - 8  # the user turn differs only at the end
    assert cached >= (shared // BLOCK - 1) * BLOCK and cached % BLOCK == 0


async def test_cache_salt_injected_by_the_gateway_isolates_tenants(gw):
    r0 = gw.state.pools["tiny-r0"].router.replicas[0].url
    system = system_prompt()
    await post(gw.url, chat(system, "q", model="tiny-r0"), "tenant-a")
    same = await hits_delta(r0, lambda: post(gw.url, chat(system, "q", model="tiny-r0"), "tenant-a"))
    other = await hits_delta(r0, lambda: post(gw.url, chat(system, "q", model="tiny-r0"), "tenant-b"))
    assert same > 0
    assert other == 0
    # A client's own cache_salt is replaced: even tenant a's real salt gets tenant b nothing.
    fresh = system_prompt()
    await post(gw.url, chat(fresh, "q", model="tiny-r0"), "tenant-a")
    stolen = gw.state.tenants.salt_for("tenant-a")
    forged = await hits_delta(
        r0, lambda: post(gw.url, chat(fresh, "q", model="tiny-r0", cache_salt=stolen), "tenant-b")
    )
    assert forged == 0


async def test_streaming_and_usage_pass_through(gw):
    system = system_prompt(200)
    await post(gw.url, chat(system, "warm"))
    body = chat(system, "stream me", stream=True, stream_options={"include_usage": True}, max_tokens=4)
    chunks, usage = [], None
    headers = {"Authorization": f"Bearer {KEYS['tenant-a']}"}
    async with (
        aiohttp.ClientSession() as s,
        s.post(gw.url + "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            line = line.strip()
            if not line.startswith(b"data: "):
                continue
            data = line[6:]
            if data == b"[DONE]":
                chunks.append("DONE")
                break
            obj = json.loads(data)
            chunks.append(obj)
            if obj.get("usage"):
                usage = obj["usage"]
    assert chunks[-1] == "DONE" and len(chunks) >= 3
    assert usage is not None and usage["completion_tokens"] >= 1
    assert usage["prompt_tokens_details"]["cached_tokens"] > 0


async def test_scraping_real_metrics_and_learning_kv_capacity(gw, fleet):
    router = gw.state.pools[R.SERVED_NAME].router
    for _ in range(50):
        if all(r.reported_at is not None for r in router.replicas):
            break
        await asyncio.sleep(0.1)
    assert all(r.reported_running is not None and r.reported_kv_usage is not None for r in router.replicas)
    async with aiohttp.ClientSession() as s, s.get(fleet.url(0) + "/metrics") as resp:
        info = parse_cache_config(await resp.text())
    assert info is not None and info.block_size == BLOCK and info.num_blocks > 0
    assert info.hash_algo == "sha256_cbor"
    # The precise pool's listener read the same at startup and bounded the index by it.
    assert [r.kv_capacity_blocks for r in router.replicas] == [info.num_blocks, info.num_blocks]


async def test_precise_hashes_equal_the_real_replicas_events(gw):
    router = gw.state.pools[R.SERVED_NAME].router
    system = system_prompt(300)
    _, headers = await post(gw.url, chat(system, "precise?"))
    rid = headers["x-gateway-replica"]
    prompt_ids = router.engine_prompt.token_ids("chat", chat(system, "precise?"))
    salt = gw.state.tenants.salt_for("tenant-a")
    exact = router.exact
    assert exact is not None and prompt_ids
    # The decision's engine hashes must be CONFIRMED by the replica's BlockStored events.
    for _ in range(100):
        confirmed = [h for h in exact_hashes(router, system, salt) if exact.holds(rid, h)]
        if len(confirmed) == len(prompt_ids) // BLOCK:
            break
        await asyncio.sleep(0.05)
    assert len(confirmed) == len(prompt_ids) // BLOCK > 5
    # The other replica holds none of them.
    other = "r1" if rid == "r0" else "r0"
    assert not any(exact.holds(other, h) for h in confirmed)
    # And the next request of the same prefix is routed by events to the same replica.
    _, again = await post(gw.url, chat(system, "precise again"))
    assert again["x-gateway-replica"] == rid
    assert router.stats().precise_decisions >= 2


def exact_hashes(router, system: str, salt: str) -> tuple[int, ...]:  # type: ignore[no-untyped-def]
    return router.engine_prompt.hashes("chat", chat(system, "precise?"), salt)


async def test_a_new_gateway_catches_up_from_the_replicas_replay_buffers(gw):
    exact = gw.state.pools[R.SERVED_NAME].router.exact
    assert exact is not None
    for _ in range(100):
        if exact.is_live("r0") and exact.is_live("r1"):
            break
        await asyncio.sleep(0.05)
    assert exact.is_live("r0") and exact.is_live("r1")
    # Earlier tests (earlier gateways) filled the replicas: this gateway knows those blocks already.
    assert sum(exact.stats().held.values()) > 0


async def test_evictions_reach_the_exact_index_and_precise_routing_stops_claiming_them(gw):
    router = gw.state.pools[R.SERVED_NAME].router
    system = system_prompt(300)
    _, headers = await post(gw.url, chat(system, "before"))
    rid = headers["x-gateway-replica"]
    replica_url = router.replica(rid).url
    hashes = router.engine_prompt.hashes(
        "chat", chat(system, "before"), gw.state.tenants.salt_for("tenant-a")
    )
    for _ in range(100):
        if all(router.exact.holds(rid, h) for h in hashes):
            break
        await asyncio.sleep(0.05)
    assert hashes and all(router.exact.holds(rid, h) for h in hashes)
    # Traffic the gateway never sees (sent to the replica directly) evicts the prefix.
    async with aiohttp.ClientSession() as s:
        for i in range(8):  # ~1,500 tokens each: more than the replica's 8,192-token cache
            body = chat(system_prompt(520), f"flood {i}", cache_salt="someone-else")
            async with s.post(replica_url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
    for _ in range(100):
        if not any(router.exact.holds(rid, h) for h in hashes):
            break
        await asyncio.sleep(0.05)
    assert not any(router.exact.holds(rid, h) for h in hashes)  # BlockRemoved events applied
    # The approximate index still believes the replica holds it; the precise decision does not.
    salt = gw.state.tenants.salt_for("tenant-a")
    ids = router.engine_prompt.token_ids("chat", chat(system, "after"))
    approx = block_hashes(from_ids(ids), root_hash(R.SERVED_NAME, salt), BLOCK, router.cfg.max_prefix_tokens)
    assert router.index.match(approx, time.monotonic()).get(rid, 0) >= len(hashes) - 1
    answer, again = await post(gw.url, chat(system, "after"))
    assert again["x-gateway-prefix-match"].startswith("0/")
    assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # and the replica agrees
