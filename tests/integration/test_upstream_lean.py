"""The lean upstream client (``gateway.upstream.lean``) against raw replicas on real sockets: what the
gateway's hop must keep when it leaves aiohttp (reuse, back-pressure, cancellation, timeouts, errors)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest

from config.policy import TimeoutsConfig
from gateway.upstream import lean
from gateway.upstream.client import Upstream, UpstreamFailure
from gateway.upstream.lean import LeanClient

HEAD_OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
DEADLINE_S = 30.0


async def until(cond: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {DEADLINE_S}s: {what}")
        await asyncio.sleep(0.005)


class Replica:
    """A raw server: ``answer(reader, writer)`` runs for each request read; counts its connections."""

    def __init__(self, answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]):
        self.answer = answer
        self.connections = 0
        self.closed = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                self.requests.append(head + await reader.readexactly(length))
                await self.answer(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.closed += 1
            writer.close()


@asynccontextmanager
async def replica(
    answer: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[tuple[Replica, str]]:
    r = Replica(answer)
    server = await asyncio.start_server(r.handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield r, f"http://127.0.0.1:{port}"
    finally:
        server.close()
        for w in r.writers:
            w.close()


def upstream(**timeouts: float) -> Upstream:
    t = TimeoutsConfig(**timeouts)
    up = Upstream(aiohttp.ClientSession(), t)
    up.hop = LeanClient(t.connect_s, t.total_s)
    return up


async def ok(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    writer.write(HEAD_OK)


async def test_keep_alive_connections_are_reused_and_sized_by_concurrency() -> None:
    async with replica(ok) as (r, url):
        up = upstream()
        try:
            for _ in range(20):
                resp = await up.open(url + "/v1/x", b"{}", {"Content-Type": "application/json"})
                assert resp.status == 200 and await up.read_all(resp) == b"{}"
                resp.close()
            assert r.connections == 1

            async def one() -> bytes:
                resp = await up.open(url + "/v1/x", b"{}", {})
                try:
                    return await up.read_all(resp)
                finally:
                    resp.close()

            for _ in range(3):
                assert await asyncio.gather(*(one() for _ in range(8))) == [b"{}"] * 8
            assert r.connections <= 8  # three waves of 8 reuse the first wave's connections
            assert r.requests[0].startswith(b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1:")
        finally:
            await up.close()
        await until(lambda: r.closed == r.connections, "close() closes the pooled connections")


async def test_connection_close_and_expired_idle_connections_are_not_reused() -> None:
    async def close_after(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}")

    async with replica(close_after) as (r, url):
        up = upstream()
        try:
            for _ in range(3):
                resp = await up.open(url + "/", b"", {})
                assert await up.read_all(resp) == b"{}"
                resp.close()
            assert r.connections == 3
        finally:
            await up.close()
    async with replica(ok) as (r, url):
        up = upstream()
        up.hop = LeanClient(5.0, 60.0, keepalive_s=0.0)  # every idle connection has expired
        try:
            for _ in range(3):
                resp = await up.open(url + "/", b"", {})
                assert await up.read_all(resp) == b"{}"
            assert r.connections == 3
            await until(lambda: r.closed >= 2, "an expired idle connection is closed")
        finally:
            await up.close()


async def test_a_stream_the_consumer_does_not_read_pauses_the_socket() -> None:
    total = 32 * 2**20  # more than loopback's socket buffers hold
    sent = [0]

    async def flood(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % total
        )
        block = b"x" * 2**16
        for _ in range(total // len(block)):
            writer.write(block)
            await writer.drain()  # waits while the client does not read
            sent[0] += len(block)

    async with replica(flood) as (_, url):
        up = upstream()
        try:
            resp = await up.open(url + "/stream", b"", {})
            # Nothing read: the socket's reading pauses with the buffer bounded, and the replica
            # cannot send the rest (without the pause the client takes all 32 MiB into memory).
            await until(lambda: resp._paused or sent[0] == total, "the client pauses or takes it all")
            assert sent[0] < total
            assert resp._size <= lean.HIGH_WATER + 2**18
            n = 0
            async for chunk in up.iter_chunks(resp):
                n += len(chunk)
            assert n == total
        finally:
            await up.close()


async def test_cancel_before_the_head_and_close_mid_body_close_the_connection() -> None:
    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # no answer; returns when the client closes the connection

    async with replica(never) as (r, url):
        up = upstream()
        try:
            task = asyncio.ensure_future(up.open(url + "/", b"{}", {}))
            await until(lambda: len(r.requests) == 1, "the request arrives")
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await until(lambda: r.closed == 1, "the replica sees the disconnect")
        finally:
            await up.close()

    async def half(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        await reader.read()  # the rest never comes; returns when the client closes the connection

    async with replica(half) as (r, url):
        up = upstream()
        try:
            resp = await up.open(url + "/", b"{}", {})
            assert await resp.content.readany() == b"hello"
            resp.close()  # the client went away: dispatch's finally
            await until(lambda: r.closed == 1, "the replica sees the disconnect")
            resp = await up.open(url + "/", b"{}", {})  # a fresh connection, not the closed one
            assert r.connections == 2
            resp.close()
        finally:
            await up.close()


async def test_total_and_first_byte_timeouts() -> None:
    async def trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while not reader.at_eof():
            writer.write(b"1\r\nx\r\n")
            await asyncio.sleep(0.05)

    async with replica(trickle) as (r, url):
        up = upstream(first_byte_s=0.5, idle_s=5.0, total_s=0.5)
        try:
            resp = await up.open(url + "/", b"{}", {})
            t0 = time.monotonic()
            with pytest.raises(UpstreamFailure) as failure:
                async for _ in up.iter_chunks(resp):
                    pass
            assert failure.value.kind == "timeout" and time.monotonic() - t0 < 5
            await until(lambda: r.closed == 1, "the timed-out exchange's connection is closed")
        finally:
            await up.close()

    async def never(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read()  # no answer; returns when the client closes the connection

    async with replica(never) as (r, url):
        up = upstream(first_byte_s=0.2)
        try:
            with pytest.raises(UpstreamFailure) as failure:
                await up.open(url + "/", b"{}", {})
            assert failure.value.kind == "timeout"
            await until(lambda: r.closed == 1, "the replica sees the disconnect")
        finally:
            await up.close()


async def test_each_read_has_its_deadline_and_none_runs_while_the_consumer_works() -> None:
    """The lean hop keeps ``Upstream``'s read deadlines on the answer's own timer (issue 30 round 9):
    a whole answer's body within the first byte's time, a stream's gap within the idle time, each
    ending in a closed connection; and no deadline while the consumer holds a chunk (a slow client's
    write): the idle time counts only the wait for the next one."""

    async def head_only(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")  # the rest never comes

    async with replica(head_only) as (r, url):
        up = upstream(first_byte_s=0.3, idle_s=30.0, total_s=60.0)
        try:
            resp = await up.open(url + "/", b"{}", {})
            t0 = time.monotonic()
            with pytest.raises(UpstreamFailure) as failure:
                await up.read_all(resp)
            assert failure.value.kind == "timeout" and time.monotonic() - t0 < 10
            resp.close()  # as ``attempt_once``'s ``finally`` does
            await until(lambda: r.closed == 1, "the timed-out answer's connection is closed")
        finally:
            await up.close()

    async def one_then_silence(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n")

    async with replica(one_then_silence) as (r, url):
        up = upstream(first_byte_s=30.0, idle_s=0.3, total_s=60.0)
        try:
            resp = await up.open(url + "/", b"{}", {})
            got = []
            with pytest.raises(UpstreamFailure) as failure:
                async for chunk in up.iter_chunks(resp):
                    got.append(chunk)
            assert got == [b"x"] and failure.value.kind == "timeout"
            assert str(failure.value) == "stream silent for 0.3s"  # the idle limit, not the first byte's
            resp.close()
            await until(lambda: r.closed == 1, "the silent stream's connection is closed")
        finally:
            await up.close()

    reading, consumer_done = asyncio.Event(), asyncio.Event()

    async def each_when_asked(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        await reading.wait()  # the consumer waits for the first chunk (its deadline set) by now
        writer.write(b"1\r\na\r\n")
        await consumer_done.wait()
        writer.write(b"1\r\nb\r\n0\r\n\r\n")

    async with replica(each_when_asked) as (_, url):
        up = upstream(first_byte_s=0.3, idle_s=0.3, total_s=60.0)
        try:
            resp = await up.open(url + "/", b"{}", {})
            got = []
            reading.set()  # the replica runs on this loop: it writes only once the read below waits
            async for chunk in up.iter_chunks(resp):
                got.append(chunk)
                if chunk == b"a":
                    # The consumer's own work (a slow client) outlasts both limits: the stimulus under
                    # test, not a wait for something to happen.
                    await asyncio.sleep(0.9)
                    consumer_done.set()
            assert got == [b"a", b"b"]
        finally:
            await up.close()


async def test_errors_map_to_the_kinds_aiohttp_gave() -> None:
    up = upstream(connect_s=2.0)
    async with replica(ok) as (_, url):
        pass  # closed: nobody listens on its port now
    try:
        with pytest.raises(UpstreamFailure) as failure:
            await up.open(url + "/", b"{}", {})
        assert failure.value.kind == "connect"
    finally:
        await up.close()

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")

    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\npartial")
        await writer.drain()
        writer.transport.abort()

    async def until_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b'HTTP/1.1 200 OK\r\nContent-Type: application/json; charset=utf-8\r\n\r\n{"a": 1}')
        await writer.drain()
        writer.close()

    for answer, kind in ((garbage, "protocol"), (cut, "disconnect")):
        async with replica(answer) as (_, url):
            up = upstream()
            try:
                with pytest.raises(UpstreamFailure) as failure:
                    resp = await up.open(url + "/", b"{}", {})
                    await up.read_all(resp)
                assert failure.value.kind == kind
            finally:
                await up.close()
    async with replica(until_close) as (_, url):
        up = upstream()
        try:
            resp = await up.open(url + "/", b"{}", {})
            assert resp.content_type == "application/json"
            assert await up.read_all(resp) == b'{"a": 1}'
        finally:
            await up.close()


async def test_the_answers_head_is_read_whole_and_a_nul_or_a_folded_line_is_refused() -> None:
    """The head is decoded in one piece (``_Conn.on_headers_complete``): every header, repeated ones in
    their order, a latin-1 byte as its character, an empty value; a head that would break that one
    piece (a NUL, an obs-fold line) is not HTTP the hop accepts."""

    async def many(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(
            b"HTTP/1.1 201 Created\r\nSet-Cookie: a=1\r\nX-Empty:\r\nset-cookie: b=2\r\n"
            b"X-Latin: caf\xe9\r\nContent-Length: 2\r\n\r\n{}"
        )

    async with replica(many) as (_, url):
        up = upstream()
        try:
            resp = await up.open(url + "/", b"{}", {})
            assert resp.status == 201
            assert resp.headers.getall("Set-Cookie") == ["a=1", "b=2"]
            assert (resp.headers["X-Empty"], resp.headers["x-latin"]) == ("", "caf\xe9")
            names = [k for k, _ in resp.headers.items()]
            assert names == ["Set-Cookie", "X-Empty", "set-cookie", "X-Latin", "Content-Length"]
            assert await up.read_all(resp) == b"{}"
        finally:
            await up.close()
    for head in (b"X-A: a\x00b\r\n", b"X-A: a\r\n folded\r\n"):

        async def bad(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, head: bytes = head) -> None:
            writer.write(b"HTTP/1.1 200 OK\r\n" + head + b"Content-Length: 2\r\n\r\n{}")

        async with replica(bad) as (_, url):
            up = upstream()
            try:
                with pytest.raises(UpstreamFailure) as failure:
                    await up.open(url + "/", b"{}", {})
                assert failure.value.kind == "protocol"
            finally:
                await up.close()


async def test_https_goes_to_aiohttp_and_headers_cannot_inject() -> None:
    client = LeanClient(5.0, 60.0)
    assert client.route("https://replica:8443/v1/x") is None
    pool, path = client.route("http://replica/v1/x?a=1")  # type: ignore[misc]
    assert (pool.authority, path) == ("replica", "/v1/x?a=1")
    async with replica(ok) as (r, url):
        up = upstream()
        try:
            with pytest.raises(ValueError):
                await up.open(url + "/", b"{}", {"X-Request-Id": "a\r\nX-Evil: 1"})
            assert r.requests == []
        finally:
            await up.close()


async def test_the_gateway_relays_through_the_lean_hop_and_reuses_its_connection() -> None:
    from tests.support.stack import gateway, policy_for, sim_fleet

    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw:
        async with aiohttp.ClientSession() as s:
            for stream in (False, True, False, True):
                body = {
                    "model": "sim-llama",
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": stream,
                }
                async with s.post(gw.url + "/v1/chat/completions", json=body) as resp:
                    assert resp.status == 200
                    text = await resp.text()
                    assert ("data: [DONE]" in text) == stream
        hop = gw.state.upstream.hop
        assert hop is not None
        [pool] = hop.pools.values()
        assert len(pool.idle) == 1  # four answers, one keep-alive connection
