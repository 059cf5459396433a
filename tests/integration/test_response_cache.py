"""The response cache through the gateway: hits, streams, controls, PII, tenants, coalescing."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web

from tests.fault.support import wait_for
from tests.support.stack import gateway, policy_for, sim_faults, sim_fleet, sim_requests, sim_stats

CHAT = {
    "model": "sim-llama",
    "temperature": 0,
    "max_tokens": 6,
    "messages": [{"role": "user", "content": "What is a prefix cache?"}],
}
KEYS = {"a": "sk-tenant-a", "b": "sk-tenant-b"}
TENANCY = {
    "allow_anonymous": True,
    "tenants": [
        {"id": t, "api_key_sha256": [hashlib.sha256(k.encode()).hexdigest()]} for t, k in KEYS.items()
    ],
}


def cached_policy(urls: list[str], **cache: Any):
    return policy_for(urls, cache={"enabled": True, **cache}, tenancy=TENANCY)


async def call(
    s: aiohttp.ClientSession, url: str, body: dict, *, headers: dict | None = None
) -> tuple[int, Any, Any]:
    async with s.post(url + "/v1/chat/completions", json=body, headers=headers or {}) as r:
        raw = await r.read()
        if body.get("stream"):
            return r.status, r.headers.copy(), raw
        return r.status, r.headers.copy(), orjson.loads(raw)


def sse_text(raw: bytes) -> tuple[str, list[Any]]:
    events = [e[len(b"data: ") :] for e in raw.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [orjson.loads(e) for e in events[:-1]]
    text = "".join((c["choices"][0]["delta"].get("content") or "") for c in chunks if c["choices"])
    return text, chunks


async def upstream_count(url: str) -> int:
    return (await sim_stats(url))["requests"]


async def test_second_identical_request_is_a_hit() -> None:
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        st, h1, first = await call(s, gw.url, CHAT)
        assert st == 200 and h1["x-cache"] == "miss"
        # Field order and JSON whitespace do not matter for the key.
        reordered = {k: CHAT[k] for k in reversed(list(CHAT))}
        st, h2, second = await call(s, gw.url, reordered)
        assert h2["x-cache"] == "hit" and int(h2["age"]) >= 0
        assert second["choices"] == first["choices"]
        assert await upstream_count(fleet.urls[0]) == 1
        async with s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        assert 'prefix_gateway_cache_requests_total{result="hit"} 1.0' in text


async def test_stream_and_non_stream_serve_each_other() -> None:
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        _, h, raw = await call(s, gw.url, {**CHAT, "stream": True})
        assert h["x-cache"] == "miss"
        streamed, chunks = sse_text(raw)
        assert all(c["choices"] for c in chunks), "the usage chunk the gateway asked for must not leak"
        _, h, whole = await call(s, gw.url, CHAT)
        assert h["x-cache"] == "hit"
        assert whole["choices"][0]["message"]["content"] == streamed
        assert whole["usage"]["completion_tokens"] == 6  # assembled with the replica's usage
        # And a cached whole answer replays as SSE, with usage when asked.
        other = {**CHAT, "messages": [{"role": "user", "content": "another question"}]}
        _, _, whole2 = await call(s, gw.url, other)
        _, h, raw2 = await call(
            s, gw.url, {**other, "stream": True, "stream_options": {"include_usage": True}}
        )
        assert h["x-cache"] == "hit" and h["Content-Type"].startswith("text/event-stream")
        text2, chunks2 = sse_text(raw2)
        assert text2 == whole2["choices"][0]["message"]["content"]
        assert chunks2[-1]["choices"] == [] and chunks2[-1]["usage"]["completion_tokens"] == 6
        assert await upstream_count(fleet.urls[0]) == 2


async def test_truncated_stream_and_errors_are_never_stored() -> None:
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 2})
        _, _, raw = await call(s, gw.url, {**CHAT, "stream": True})
        assert b"[DONE]" not in raw
        await sim_faults(fleet.urls[0], {"fail_status": 500})
        st, _, _ = await call(s, gw.url, CHAT)
        assert st == 500
        await sim_faults(fleet.urls[0], {})
        st, h, _ = await call(s, gw.url, CHAT)
        assert st == 200 and h["x-cache"] == "miss"
        _, h, _ = await call(s, gw.url, CHAT)
        assert h["x-cache"] == "hit"


async def test_request_controls() -> None:
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        await call(s, gw.url, CHAT)
        _, h, _ = await call(s, gw.url, CHAT, headers={"Cache-Control": "no-store"})
        assert h["x-cache"] == "bypass"
        _, h, _ = await call(s, gw.url, {**CHAT, "cache": {"no-store": True}})  # LiteLLM's body control
        assert h["x-cache"] == "bypass"
        assert "cache" not in (await sim_requests(fleet.urls[0]))[-1]  # a gateway control, not forwarded
        _, h, _ = await call(s, gw.url, CHAT, headers={"Cache-Control": "no-cache"})
        assert h["x-cache"] == "refresh"
        await asyncio.sleep(1.1)
        _, h, _ = await call(s, gw.url, CHAT, headers={"Cache-Control": "max-age=0"})
        assert h["x-cache"] == "miss"  # the entry is older than the client accepts
        _, h, _ = await call(s, gw.url, CHAT, headers={"Cache-Control": "max-age=60"})
        assert h["x-cache"] == "hit"
        assert await upstream_count(fleet.urls[0]) == 5


async def test_sampled_requests_bypass_by_default_and_rule_always_caches() -> None:
    sampled = {k: v for k, v in CHAT.items() if k != "temperature"}
    async with sim_fleet(1) as fleet, aiohttp.ClientSession() as s:
        async with gateway(cached_policy(fleet.urls)) as gw:
            _, h, _ = await call(s, gw.url, sampled)
            assert h["x-cache"] == "bypass"
            assert h["x-cache-bypass-reason"] == "default_temperature"  # the answer says why
            _, h, _ = await call(s, gw.url, {**sampled, "temperature": 0.7})
            assert h["x-cache-bypass-reason"] == "sampled"
            _, h, _ = await call(s, gw.url, {**sampled, "seed": 42})
            assert h["x-cache"] == "miss" and "x-cache-bypass-reason" not in h
        async with gateway(cached_policy(fleet.urls, rule="always")) as gw:
            await call(s, gw.url, sampled)
            _, h, _ = await call(s, gw.url, sampled)
            assert h["x-cache"] == "hit"


async def test_tenants_never_share_entries() -> None:
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        _, h, _ = await call(s, gw.url, CHAT, headers={"Authorization": f"Bearer {KEYS['a']}"})
        assert h["x-cache"] == "miss"
        _, h, _ = await call(s, gw.url, CHAT, headers={"Authorization": f"Bearer {KEYS['b']}"})
        assert h["x-cache"] == "miss"
        _, h, _ = await call(s, gw.url, CHAT, headers={"Authorization": f"Bearer {KEYS['b']}"})
        assert h["x-cache"] == "hit"


async def test_pii_bypass_mode_serves_but_never_stores() -> None:
    body = {**CHAT, "messages": [{"role": "user", "content": "Mail jane.doe@example.com the plan"}]}
    async with sim_fleet(1) as fleet, gateway(cached_policy(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        for _ in range(2):
            st, h, _ = await call(s, gw.url, body)
            assert st == 200 and h["x-cache"] == "bypass"
        assert len(gw.state.cache.store) == 0
        assert await upstream_count(fleet.urls[0]) == 2


# --- mask mode: an echoing replica shows what the model saw and what each client gets back ------------
async def start_echo() -> tuple[web.AppRunner, str, list[dict]]:
    seen: list[dict] = []

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        text = "You said: " + body["messages"][-1]["content"]
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 1,
                "model": body["model"],
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
            }
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/health", health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}", seen


async def test_pii_mask_mode_shares_one_entry_without_leaking() -> None:
    runner, url, seen = await start_echo()
    try:
        async with gateway(cached_policy([url], pii="mask")) as gw, aiohttp.ClientSession() as s:

            def ask(email: str) -> dict:
                return {**CHAT, "messages": [{"role": "user", "content": f"Write to {email} today"}]}

            _, h1, r1 = await call(s, gw.url, ask("alice@example.com"))
            _, h2, r2 = await call(s, gw.url, ask("bob@example.org"))
            assert (h1["x-cache"], h2["x-cache"]) == ("miss", "hit")
            assert r1["choices"][0]["message"]["content"] == "You said: Write to alice@example.com today"
            assert r2["choices"][0]["message"]["content"] == "You said: Write to bob@example.org today"
            # The replica saw only the placeholder; the store holds neither address.
            assert len(seen) == 1 and seen[0]["messages"][0]["content"] == "Write to <EMAIL_1> today"
            stored = b"".join(v for v, _ in gw.state.cache.store._items.values())
            assert b"alice" not in stored and b"bob" not in stored and b"<EMAIL_1>" in stored
    finally:
        await runner.cleanup()


async def test_concurrent_identical_requests_coalesce() -> None:
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.05, overhead_s=0.0) as fleet,
        gateway(cached_policy(fleet.urls)) as gw,
        aiohttp.ClientSession() as s,
    ):
        body = {**CHAT, "max_tokens": 8}
        results = await asyncio.gather(*(call(s, gw.url, {**body, "stream": i % 2 == 0}) for i in range(10)))
        assert await upstream_count(fleet.urls[0]) == 1
        caches = sorted(h["x-cache"] for _, h, _ in results)
        assert caches.count("miss") == 1 and caches.count("coalesced") == 9
        texts = {
            sse_text(r)[0] if isinstance(r, bytes) else r["choices"][0]["message"]["content"]
            for _, _, r in results
        }
        assert len(texts) == 1


async def test_streaming_followers_get_chunks_as_they_arrive() -> None:
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.1, overhead_s=0.0) as fleet,
        gateway(cached_policy(fleet.urls)) as gw,
        aiohttp.ClientSession() as s,
    ):
        body = {**CHAT, "max_tokens": 20, "stream": True}

        async def lead() -> list[float]:
            """When each of the leader's events arrived."""
            arrived: list[float] = []
            async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                async for chunk in r.content.iter_any():
                    arrived += [time.perf_counter()] * chunk.count(b"data: ")
            return arrived

        leader = asyncio.create_task(lead())
        # The leader's generation is under way (2 s of tokens) before the follower asks: after a fixed
        # 0.15 s instead, a loaded machine's leader could still be on its way and the follower lead.
        await wait_for(lambda: fleet.replicas[0].counters.requests == 1)
        async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
            assert r.headers["x-cache"] == "coalesced"
            first = None
            async for _ in r.content.iter_any():
                first = first or time.perf_counter()
        arrived = await leader
        # The follower's first chunk came before the leader's sixth-last event (its last tokens, 0.1 s
        # apart, its finish and [DONE] were still to come): it did not wait for the whole answer. Compared
        # with the leader's own events, not with a clock bound (0.5 s from its request, of a 1 s answer
        # begun 0.15 s before), which a loaded machine's slower requests can exceed.
        assert len(arrived) > 10 and first is not None and first < arrived[-6]


async def test_tenant_request_rate_limit() -> None:
    async with (
        sim_fleet(1) as fleet,
        gateway(cached_policy(fleet.urls, tenant_limits={"requests_per_s": 1, "request_burst": 2})) as gw,
        aiohttp.ClientSession() as s,
    ):
        statuses = []
        for i in range(4):
            st, h, body = await call(s, gw.url, {**CHAT, "seed": i})
            statuses.append(st)
        assert statuses[:2] == [200, 200] and 429 in statuses[2:]
        st, h, body = await call(s, gw.url, {**CHAT, "seed": 99})
        assert st == 429
        assert int(h["Retry-After"]) >= 1 and h["x-ratelimit-limit"] == "2"
        assert body["error"]["code"] == "rate_limit_exceeded" and body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("mode", ["memory", "redis"])
async def test_both_stores_serve_hits(mode: str, request: pytest.FixtureRequest) -> None:
    extra = {"redis": {"url": request.getfixturevalue("redis_url")}} if mode == "redis" else {}
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, cache={"enabled": True}, **extra)
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            await call(s, gw.url, CHAT)
            _, h, _ = await call(s, gw.url, CHAT)
            assert h["x-cache"] == "hit"
        received = await sim_requests(fleet.urls[0])
        assert len(received) == 1
