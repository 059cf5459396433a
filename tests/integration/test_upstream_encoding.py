"""The gateway asks a replica for no content coding it would not relay (issue 30, round 7, item 1).

The relay drops ``Content-Encoding`` (``gateway.upstream.client.HOP_BY_HOP``: a whole answer is parsed
and may be rewritten, a stream is tapped event by event), and neither client decompresses. aiohttp adds
``Accept-Encoding: gzip, deflate`` to every request by itself, so a replica that compresses when asked
(Starlette's ``GZipMiddleware``, prometheus_client's ``/metrics``, which vLLM serves) answered the
aiohttp path (``https`` replicas) and every scrape with gzip bytes: relayed without their header, or
unreadable as text. The replica here compresses exactly when the request's ``Accept-Encoding`` names
gzip, as those do."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from config.policy import TimeoutsConfig
from gateway.fleet.scrape import scrape_one
from gateway.upstream.client import make_session
from tests.support.stack import gateway, policy_for

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1,
    "model": "sim-llama",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
}
ASKED = web.AppKey("asked", list[str])
METRICS = "vllm:num_requests_running 2\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.25\n"


def _answer(request: web.Request, body: bytes, content_type: str) -> web.Response:
    asked = request.headers.get("Accept-Encoding", "")
    request.app[ASKED].append(asked)
    if "gzip" in asked:
        return web.Response(
            body=gzip.compress(body), headers={"Content-Type": content_type, "Content-Encoding": "gzip"}
        )
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _chat(request: web.Request) -> web.Response:
    await request.read()
    return _answer(request, json.dumps(ANSWER).encode(), "application/json")


async def _metrics(request: web.Request) -> web.Response:
    return _answer(request, METRICS.encode(), "text/plain; version=0.0.4")


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@asynccontextmanager
async def compressing_replica() -> AsyncIterator[tuple[web.Application, str]]:
    app = web.Application()
    app[ASKED] = []
    app.router.add_post("/v1/chat/completions", _chat)
    app.router.add_get("/metrics", _metrics)
    app.router.add_get("/health", _health)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield app, f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@pytest.mark.parametrize("hop", ["lean", "aiohttp"])
async def test_the_hop_relays_a_readable_answer_from_a_replica_that_compresses(hop: str) -> None:
    async with compressing_replica() as (replica, url), gateway(policy_for([url])) as gw:
        if hop == "aiohttp":
            gw.state.upstream.hop = None  # every request through the aiohttp session, as for https replicas
        body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}]}
        async with aiohttp.ClientSession() as s, s.post(gw.url + "/v1/chat/completions", json=body) as resp:
            raw = await resp.read()
            encoding = resp.headers.get("Content-Encoding")
        assert resp.status == 200, raw[:200]
        assert encoding is None
        assert json.loads(raw)["choices"][0]["message"]["content"] == "hello"
        # The POST and the gateway's own scrapes of /metrics: none asked for a coding.
        assert replica[ASKED] and set(replica[ASKED]) == {"identity"}


async def test_a_scrape_of_a_replica_that_compresses_reads_its_metrics() -> None:
    async with compressing_replica() as (replica, url):
        session = make_session(TimeoutsConfig())
        try:
            load = await scrape_one(session, url, 5.0)
        finally:
            await session.close()
    assert load is not None
    assert (load.running, load.waiting) == (2, 5)
    assert replica[ASKED] == ["identity"]
