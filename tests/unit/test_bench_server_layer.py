"""bench.server_layer compares its three servers on the same work: each answers the same whole body and
the same stream, and the two aiohttp ones answer errors as the gateway does (404, 400)."""

from __future__ import annotations

import asyncio

import orjson
from aiohttp import web

from bench.procs import free_ports
from bench.server_layer import ANSWER, DONE, EVENT, EVENTS, _Raw, app_server, low_level_server
from bench.upstream_hop import LeanPool

BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
STREAM = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})


async def _raw_post(port: int, path: str, body: bytes) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
    writer.close()
    return head


async def test_the_three_servers_answer_alike() -> None:
    loop = asyncio.get_running_loop()
    ports = free_ports(3)
    runner = app_server()
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", ports[0]).start()
    low = await loop.create_server(low_level_server(), "127.0.0.1", ports[1])
    raw = await loop.create_server(_Raw, "127.0.0.1", ports[2])
    try:
        for port in ports:
            pool = LeanPool("127.0.0.1", port)
            whole = await asyncio.wait_for(pool.whole("/v1/chat/completions", BODY), 10)
            assert orjson.loads(whole) == ANSWER
            streamed = await asyncio.wait_for(pool.stream("/v1/chat/completions", STREAM), 10)
            assert streamed == EVENTS * len(EVENT) + len(DONE)
            for conn in pool.idle:
                conn.transport.close()
        for port in ports[:2]:  # the aiohttp servers: the gateway's 404 and 400 (its error shape)
            assert (await _raw_post(port, "/nowhere", BODY)).startswith(b"HTTP/1.1 404")
            assert (await _raw_post(port, "/v1/chat/completions", b"{}")).startswith(b"HTTP/1.1 400")
    finally:
        low.close()
        raw.close()
        await runner.cleanup()
