"""Request-reading limits: header and body sizes, slow headers (slowloris), bodies that never end,
idle connections, and concurrency limits with a bounded queue."""

from __future__ import annotations

import asyncio
import socket
import time

import aiohttp
import orjson

from tests.fault.support import chat, gateway_with, post
from tests.support.stack import policy_for, sim_fleet, sim_stats

LIMITS = {"header_timeout_s": 0.5, "body_timeout_s": 0.5, "max_header_bytes": 2048, "max_body_bytes": 4096}


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=5)
    sock.settimeout(5)
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> tuple[bool, bytes]:
    """Read until the server closes (True) or ``seconds`` pass (False); returns what was read."""
    got = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return False, got
        except ConnectionResetError:
            return True, got
        if not chunk:
            return True, got
        got += chunk
    return False, got


async def test_headers_sent_byte_by_byte_are_cut_off() -> None:
    async with sim_fleet(1) as fleet, gateway_with(policy_for(fleet.urls, limits=LIMITS)) as gw:

        def slowloris() -> tuple[bool, float]:
            sock = _connect(gw.url)
            t0 = time.monotonic()
            head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + b"X-Pad: " + b"a" * 200
            try:
                for i in range(len(head)):  # one byte every 50 ms: would take 12 s
                    sock.sendall(head[i : i + 1])
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                return True, time.monotonic() - t0
            closed, _ = _closed_within(sock, 1.0)
            sock.close()
            return closed, time.monotonic() - t0

        closed, elapsed = await asyncio.to_thread(slowloris)
        assert closed
        assert elapsed < 4.0  # cut near header_timeout_s (0.5 s), far before the 12 s the head takes


async def test_idle_keep_alive_between_requests_is_not_cut() -> None:
    """The header timer runs only while a head is incomplete: a pause longer than header_timeout_s
    between two requests on one connection is fine."""
    async with sim_fleet(1) as fleet, gateway_with(policy_for(fleet.urls, limits=LIMITS)) as gw:
        conn = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=conn) as s:
            status, _, _ = await post(s, gw.url, chat("one"))
            assert status == 200
            await asyncio.sleep(0.9)
            status, _, _ = await post(s, gw.url, chat("two"))
            assert status == 200


async def test_connection_that_sends_nothing_is_closed_after_keepalive_timeout() -> None:
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls,
            limits=LIMITS,
            server={"host": "127.0.0.1", "port": 0, "access_log": False, "keepalive_timeout_s": 0.5},
        )
        async with gateway_with(policy) as gw:

            def silent() -> bool:
                sock = _connect(gw.url)
                closed, _ = _closed_within(sock, 4.0)
                sock.close()
                return closed

            assert await asyncio.to_thread(silent)


async def test_body_that_never_ends_gets_408() -> None:
    async with sim_fleet(1) as fleet, gateway_with(policy_for(fleet.urls, limits=LIMITS)) as gw:

        def slow_body() -> tuple[bool, bytes]:
            sock = _connect(gw.url)
            sock.sendall(
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                b'Content-Length: 1000\r\n\r\n{"model": '
            )
            closed, got = _closed_within(sock, 4.0)
            sock.close()
            return closed, got

        closed, got = await asyncio.to_thread(slow_body)
        assert got.startswith(b"HTTP/1.1 408")
        assert orjson.loads(got.split(b"\r\n\r\n", 1)[1])["error"]["code"] == "request_timeout"
        assert closed


async def test_header_and_body_size_limits() -> None:
    async with (
        sim_fleet(1) as fleet,
        gateway_with(policy_for(fleet.urls, limits=LIMITS)) as gw,
        aiohttp.ClientSession() as s,
    ):
        async with s.post(gw.url + "/v1/chat/completions", json=chat(), headers={"X-Big": "a" * 4000}) as r:
            assert r.status == 431
            assert (await r.json())["error"]["code"] == "header_too_large"
        big = chat("x" * 8000)
        async with s.post(gw.url + "/v1/chat/completions", json=big) as r:
            assert r.status == 413
            assert (await r.json())["error"]["code"] == "body_too_large"

        async def chunks():  # type: ignore[no-untyped-def]
            for _ in range(10):
                yield b" " * 1000  # no Content-Length: chunked, 10 kB > 4 kB

        async with s.post(
            gw.url + "/v1/chat/completions", data=chunks(), headers={"Content-Type": "application/json"}
        ) as r:
            assert r.status == 413
            assert (await r.json())["error"]["code"] == "body_too_large"
        status, _, _ = await post(s, gw.url, chat("still fine"))
        assert status == 200


SLOW = {"speed": 1.0, "decode_s_per_token": 0.05, "overhead_s": 0.0, "prefill_s_per_token": 0.0}


async def test_process_limit_queues_then_sheds_with_503() -> None:
    limits = {"max_concurrent_requests": 2, "max_queued_requests": 1, "queue_timeout_s": 5.0}
    async with (
        sim_fleet(1, **SLOW) as fleet,
        gateway_with(policy_for(fleet.urls, limits=limits)) as gw,
        aiohttp.ClientSession() as s,
    ):
        results = await asyncio.gather(*(post(s, gw.url, chat(f"p{i}", max_tokens=8)) for i in range(4)))
        statuses = sorted(r[0] for r in results)
        assert statuses == [200, 200, 200, 503]
        shed = next(r for r in results if r[0] == 503)
        assert shed[1]["Retry-After"] == "1"
        err = orjson.loads(shed[2])["error"]
        assert err["code"] == "overloaded" and err["type"] == "service_unavailable"
        assert (await sim_stats(fleet.urls[0]))["max_running_seen"] <= 2


async def test_queue_timeout_sheds_waiters() -> None:
    limits = {"max_concurrent_requests": 1, "max_queued_requests": 10, "queue_timeout_s": 0.1}
    async with (
        sim_fleet(1, **SLOW) as fleet,
        gateway_with(policy_for(fleet.urls, limits=limits)) as gw,
        aiohttp.ClientSession() as s,
    ):
        results = await asyncio.gather(*(post(s, gw.url, chat(f"t{i}", max_tokens=10)) for i in range(3)))
        assert sorted(r[0] for r in results) == [200, 503, 503]


async def test_per_replica_limit_spreads_then_waits_then_sheds() -> None:
    limits = {"max_concurrent_per_replica": 1, "max_queued_requests": 1, "queue_timeout_s": 5.0}
    async with sim_fleet(2, **SLOW) as fleet:
        policy = policy_for(fleet.urls, limits=limits, routing={"policy": "consistent_hash"})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            # identical prompts: consistent hashing would put all four on one replica without the limit
            results = await asyncio.gather(*(post(s, gw.url, chat("same", max_tokens=8)) for _ in range(4)))
            assert sorted(r[0] for r in results) == [200, 200, 200, 503]
            assert {r[1].get("x-gateway-replica") for r in results if r[0] == 200} == {"r0", "r1"}
            for url in fleet.urls:
                assert (await sim_stats(url))["max_running_seen"] == 1


async def test_too_many_header_fields_answer_431() -> None:
    """Issue 19, item 9: 10,000 small headers are too many header fields (``limits.max_headers``):
    431 in OpenAI's format, as a header that is too long, not 400."""
    async with sim_fleet(1) as fleet, gateway_with(policy_for(fleet.urls)) as gw:
        host, port = gw.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        head = "".join(f"X-H{i}: v\r\n" for i in range(10_000))
        writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        status_line, _, rest = raw.partition(b"\r\n")
        assert status_line.split()[1] == b"431", status_line
        body = orjson.loads(rest.split(b"\r\n\r\n", 1)[1])
        assert body["error"]["code"] == "too_many_headers"
        assert "128" in body["error"]["message"]
