"""The gateway asks a replica for no content coding it would not relay (issue 30, round 7, item 1).

The relay drops ``Content-Encoding`` (``gateway.upstream.client.HOP_BY_HOP``: a whole answer is parsed
and may be rewritten, a stream is tapped event by event), and neither client decompresses. aiohttp adds
``Accept-Encoding: gzip, deflate`` to every request by itself, so a replica that compresses when asked
(Starlette's ``GZipMiddleware``, prometheus_client's ``/metrics``, which vLLM serves) answered the
aiohttp path (``https`` replicas) and every scrape with gzip bytes: relayed without their header, or
unreadable as text. The replica here compresses exactly when the request's ``Accept-Encoding`` names
gzip, as those do; ``forcing_replica`` compresses whatever it was asked (a proxy with compression forced
on), which ``gateway.upstream.coding`` decodes, or refuses by name for a coding it does not decode."""

from __future__ import annotations

import gzip
import json
import zlib
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
CODING = web.AppKey("coding", str)
METRICS = "vllm:num_requests_running 2\nvllm:num_requests_waiting 5\nvllm:kv_cache_usage_perc 0.25\n"


def _encode(coding: str, body: bytes) -> bytes:
    if coding == "gzip":
        return gzip.compress(body)
    if coding == "deflate":
        return zlib.compress(body)
    return body  # a coding the gateway does not decode: what the bytes are does not matter


def _answer(request: web.Request, body: bytes, content_type: str) -> web.Response:
    asked = request.headers.get("Accept-Encoding", "")
    request.app[ASKED].append(asked)
    forced = request.app.get(CODING)
    if forced:
        headers = {"Content-Type": content_type, "Content-Encoding": forced}
        return web.Response(body=_encode(forced, body), headers=headers)
    if "gzip" in asked:
        return web.Response(
            body=gzip.compress(body), headers={"Content-Type": content_type, "Content-Encoding": "gzip"}
        )
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        return _answer(request, json.dumps(ANSWER).encode(), "application/json")
    request.app[ASKED].append(request.headers.get("Accept-Encoding", ""))
    coding = request.app[CODING]
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Content-Encoding": coding})
    await resp.prepare(request)
    # One compressor over the whole stream, flushed after each event, as a compressing proxy sends it.
    z = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    for word in ("hel", "lo"):
        chunk = {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "sim-llama",
            "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": None}],
        }
        event = b"data: " + json.dumps(chunk).encode() + b"\n\n"
        await resp.write(z.compress(event) + z.flush(zlib.Z_SYNC_FLUSH))
    await resp.write(z.compress(b"data: [DONE]\n\n") + z.flush())
    await resp.write_eof()
    return resp


async def _metrics(request: web.Request) -> web.Response:
    return _answer(request, METRICS.encode(), "text/plain; version=0.0.4")


async def _health(request: web.Request) -> web.Response:
    return web.Response(text="ok")


@asynccontextmanager
async def compressing_replica(forced: str = "") -> AsyncIterator[tuple[web.Application, str]]:
    app = web.Application()
    app[ASKED] = []
    app[CODING] = forced
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


CHAT = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}]}


async def _post(
    hop: str, forced: str | None = None, body: dict | None = None
) -> tuple[int, bytes, str | None, list]:
    """POST ``body`` through a gateway in front of a compressing replica, by ``hop``; the answer's status,
    bytes and Content-Encoding, and the Accept-Encoding values the replica was sent."""
    async with compressing_replica(forced=forced) as (replica, url), gateway(policy_for([url])) as gw:
        if hop == "aiohttp":
            gw.state.upstream.hop = None  # every request through the aiohttp session, as for https replicas
        async with (
            aiohttp.ClientSession() as s,
            s.post(gw.url + "/v1/chat/completions", json=body or CHAT) as resp,
        ):
            return resp.status, await resp.read(), resp.headers.get("Content-Encoding"), replica[ASKED]


async def _scrape(forced: str | None = None) -> tuple[object, list]:
    async with compressing_replica(forced=forced) as (replica, url):
        session = make_session(TimeoutsConfig())
        try:
            return await scrape_one(session, url, 5.0), replica[ASKED]
        finally:
            await session.close()


@pytest.mark.parametrize("hop", ["lean", "aiohttp"])
async def test_the_hop_relays_a_readable_answer_from_a_replica_that_compresses(hop: str) -> None:
    status, raw, encoding, asked = await _post(hop)
    assert status == 200, raw[:200]
    assert encoding is None
    assert json.loads(raw)["choices"][0]["message"]["content"] == "hello"
    # The POST and the gateway's own scrapes of /metrics: none asked for a coding.
    assert asked and set(asked) == {"identity"}


async def test_a_scrape_of_a_replica_that_compresses_reads_its_metrics() -> None:
    load, asked = await _scrape()
    assert load is not None
    assert (load.running, load.waiting) == (2, 5)
    assert asked == ["identity"]


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
@pytest.mark.parametrize("hop", ["lean", "aiohttp"])
async def test_an_answer_compressed_unasked_is_decoded(hop: str, coding: str) -> None:
    status, raw, encoding, _ = await _post(hop, forced=coding)
    assert status == 200, raw[:200]
    assert encoding is None
    assert json.loads(raw)["usage"]["prompt_tokens"] == 3


@pytest.mark.parametrize("hop", ["lean", "aiohttp"])
async def test_a_stream_compressed_unasked_is_decoded_event_by_event(hop: str) -> None:
    status, raw, encoding, _ = await _post(hop, forced="gzip", body={**CHAT, "stream": True})
    assert status == 200, raw[:200]
    assert encoding is None
    events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    words = [json.loads(e)["choices"][0]["delta"]["content"] for e in events[:-1]]
    assert "".join(words) == "hello"


async def test_a_coding_the_gateway_does_not_decode_is_a_502_that_names_it() -> None:
    status, raw, _, _ = await _post("lean", forced="br")
    error = json.loads(raw)["error"]
    assert status == 502
    assert "'br'" in error["message"] and error["code"] == "upstream_protocol"
    assert set(error) >= {"message", "type", "param", "code"}


async def test_a_scrape_compressed_unasked_reads_its_metrics() -> None:
    load, _ = await _scrape(forced="gzip")
    assert load is not None
    assert (load.running, load.waiting) == (2, 5)
