"""The upstream hop alone: the gateway's aiohttp client against leaner HTTP/1.1 clients, side by side.

    python -m bench.upstream_hop [--requests 4000] [--rounds 3] [--concurrency 8 32] [--write]

Issue 30, item 2: before replacing the client the gateway relays every answer through, measure what a
client costs on the relay of a whole answer and of a stream, with nothing else in the process. The
upstream is a raw asyncio server in its own process (uvloop; a fixed 1 KB JSON answer with a
Content-Length, or 16 SSE events chunked; keep-alive), so what this process spends is the client's:

* ``aiohttp (gateway)``: ``gateway.upstream.client.Upstream`` on aiohttp, as the gateway used it
  before round 6 (``make_session``; ``open`` / ``read_all`` / ``iter_chunks``: the first-byte and
  idle deadlines included; ``hop = None``);
* ``aiohttp (trimmed)``: the same ``Upstream`` code on a session with what the gateway does not use
  turned off (a dummy cookie jar, no auto headers, no DNS cache expiry, no cleanup of closed
  transports, no trace configs, a larger read buffer; the total and connect timeouts kept, since the
  gateway needs them): the cheapest change, a library's;
* ``lean (gateway)``: the same ``Upstream`` code on ``gateway.upstream.lean`` (the pooled
  ``httptools`` client with the total/connect timeouts, back-pressure and cancellation the gateway's
  tests hold), as the gateway uses it from round 6;
* ``aiohttp (stripped, no deadlines)``: the trimmed session read directly (``session.post``,
  ``read``, ``content.readany``): what our two deadlines cost on aiohttp;
* ``httptools floor``: a pooled HTTP/1.1 client on an asyncio ``Protocol`` with ``httptools``,
  written here with nothing but keep-alive, Content-Length and chunked bodies (no timeouts, no
  back-pressure): a bound on what any client could win.

Every client runs in every round, their order rotated one place a round (no slot bias); the table
keeps each cell's best req/s and least CPU per request over the rounds, CPU being this process's
user+system CPU over a measurement (the upstream's process is not counted). ``httptools``: a
bench-only dependency before round 6, a runtime one since.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import httptools
import orjson
import uvloop

from bench.procs import free_port
from bench.report import table, write_section
from config.policy import TimeoutsConfig
from gateway.upstream.client import Upstream, make_session
from gateway.upstream.lean import LeanClient

SSE_EVENTS = 16
ANSWER = orjson.dumps({"id": "x", "object": "chat.completion", "choices": [{"text": "y" * 900}]})
EVENT = b'data: {"choices":[{"delta":{"content":"token"}}]}\n\n'


# -- the upstream: a raw server in its own process ---------------------------------------------------


def _response(stream: bool) -> bytes:
    if not stream:
        plain = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(ANSWER)}\r\n\r\n"
        return plain.encode() + ANSWER
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(EVENT), EVENT) for _ in range(SSE_EVENTS))
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + chunks + b"0\r\n\r\n"


class _Server(asyncio.Protocol):
    """Answers each request as soon as its body is complete (``/stream`` paths with the SSE answer)."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)
        self.stream = False

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_url(self, url: bytes) -> None:
        self.stream = url.startswith(b"/stream")

    def on_message_complete(self) -> None:
        self.transport.write(STREAM if self.stream else WHOLE)  # type: ignore[attr-defined]


WHOLE, STREAM = _response(False), _response(True)


def serve(port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(_Server, "127.0.0.1", port, backlog=1024)
        async with server:
            await server.serve_forever()

    uvloop.run(main())


# -- the lean client: a keep-alive pool on a Protocol with httptools ------------------------------------


class _Conn(asyncio.Protocol):
    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.done: asyncio.Future[None] | None = None
        self.body: list[bytes] = []
        self.chunks: asyncio.Queue[bytes | None] | None = None
        self.status = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()

    def on_body(self, body: bytes) -> None:
        if self.chunks is not None:
            self.chunks.put_nowait(body)
        else:
            self.body.append(body)

    def on_message_complete(self) -> None:
        if self.chunks is not None:
            self.chunks.put_nowait(None)
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(ConnectionError("closed"))


class LeanPool:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.idle: list[_Conn] = []

    async def _conn(self) -> _Conn:
        while self.idle:
            conn = self.idle.pop()
            if not conn.transport.is_closing():
                return conn
        _, conn = await asyncio.get_running_loop().create_connection(_Conn, self.host, self.port)
        return conn

    def _send(self, conn: _Conn, path: str, body: bytes) -> None:
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        conn.transport.write(head.encode() + body)  # type: ignore[attr-defined]

    async def whole(self, path: str, body: bytes) -> bytes:
        conn = await self._conn()
        conn.done, conn.body, conn.chunks = asyncio.get_running_loop().create_future(), [], None
        self._send(conn, path, body)
        await conn.done
        self.idle.append(conn)
        return b"".join(conn.body)

    async def stream(self, path: str, body: bytes) -> int:
        conn = await self._conn()
        conn.done, conn.chunks = asyncio.get_running_loop().create_future(), asyncio.Queue()
        self._send(conn, path, body)
        n = 0
        while (chunk := await conn.chunks.get()) is not None:
            n += len(chunk)
        await conn.done
        conn.chunks = None
        self.idle.append(conn)
        return n


# -- the clients, each as one request function ----------------------------------------------------------


@dataclass
class Client:
    name: str
    whole: Callable[[bytes], Awaitable[int]]
    stream: Callable[[bytes], Awaitable[int]]
    close: Callable[[], Awaitable[None]]


def upstream_client(base: str, name: str, session: aiohttp.ClientSession, lean: bool) -> Client:
    """``Upstream`` as the gateway calls it (``ObservedUpstream`` adds only the breaker's bookkeeping)."""
    t = TimeoutsConfig()
    up = Upstream(session, t)
    up.hop = LeanClient(t.connect_s, t.total_s) if lean else None
    headers = {"Content-Type": "application/json"}

    async def whole(body: bytes) -> int:
        resp = await up.open(base + "/v1/chat/completions", body, headers)
        n = len(await up.read_all(resp))
        resp.close()
        return n

    async def stream(body: bytes) -> int:
        resp = await up.open(base + "/stream", body, headers)
        n = 0
        async for chunk in up.iter_chunks(resp):
            n += len(chunk)
        resp.close()
        return n

    return Client(name, whole, stream, up.close)


def aiohttp_client(base: str, name: str, session: aiohttp.ClientSession) -> Client:
    headers = {"Content-Type": "application/json"}

    async def whole(body: bytes) -> int:
        async with session.post(base + "/v1/chat/completions", data=body, headers=headers) as resp:
            return len(await resp.read())

    async def stream(body: bytes) -> int:
        n = 0
        async with session.post(base + "/stream", data=body, headers=headers) as resp:
            while chunk := await resp.content.readany():
                n += len(chunk)
        return n

    return Client(name, whole, stream, session.close)


def trimmed_session(timeouts: TimeoutsConfig | None = None) -> aiohttp.ClientSession:
    """The gateway's session with what it does not use turned off; its timeouts kept when given."""
    t = timeouts
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(
            limit=0,
            keepalive_timeout=30.0,
            ttl_dns_cache=None,
            enable_cleanup_closed=False,
            force_close=False,
        ),
        timeout=aiohttp.ClientTimeout(total=t.total_s if t else None, connect=t.connect_s if t else None),
        auto_decompress=False,
        skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding"),
        cookie_jar=aiohttp.DummyCookieJar(),
        read_bufsize=2**17,
        trace_configs=None,
    )


def lean_client(port: int) -> Client:
    pool = LeanPool("127.0.0.1", port)

    async def whole(body: bytes) -> int:
        return len(await pool.whole("/v1/chat/completions", body))

    async def stream(body: bytes) -> int:
        return await pool.stream("/stream", body)

    async def close() -> None:
        for conn in pool.idle:
            conn.transport.close()

    return Client("httptools floor", whole, stream, close)


# -- the measurement ----------------------------------------------------------------------------------


@dataclass
class Result:
    rps: float
    cpu_ms: float


async def measure(call: Callable[[bytes], Awaitable[int]], requests: int, concurrency: int) -> Result:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * 50}]})
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            assert await call(body) > 0

    for _ in range(concurrency):  # warm: connections open
        await call(body)
    t0, c0 = time.perf_counter(), time.process_time()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return Result(requests / wall, cpu / requests * 1000)


def clients_of(base: str, port: int) -> list[Client]:
    t = TimeoutsConfig()
    return [
        upstream_client(base, "aiohttp (gateway)", make_session(t), lean=False),
        upstream_client(base, "aiohttp (trimmed)", trimmed_session(t), lean=False),
        upstream_client(base, "lean (gateway)", make_session(t), lean=True),
        aiohttp_client(base, "aiohttp (stripped, no deadlines)", trimmed_session()),
        lean_client(port),
    ]


async def run(port: int, requests: int, rounds: int, concurrencies: list[int]) -> str:
    base = f"http://127.0.0.1:{port}"
    clients = clients_of(base, port)
    best: dict[tuple[str, str, int], Result] = {}
    for i in range(rounds):
        order = clients[i % len(clients) :] + clients[: i % len(clients)]
        for concurrency in concurrencies:
            for kind in ("whole", "stream"):
                for c in order:
                    r = await measure(getattr(c, kind), requests, concurrency)
                    key = (c.name, kind, concurrency)
                    old = best.get(key)
                    best[key] = r if old is None else Result(max(old.rps, r.rps), min(old.cpu_ms, r.cpu_ms))
    for c in clients:
        await c.close()
    rows = []
    for concurrency in concurrencies:
        for kind in ("whole", "stream"):
            ref = best[(clients[0].name, kind, concurrency)]
            for c in clients:
                r = best[(c.name, kind, concurrency)]
                rows.append(
                    [
                        f"{kind}, c{concurrency}",
                        c.name,
                        f"{r.rps:,.0f}",
                        f"{r.rps / ref.rps:.2f}",
                        f"{r.cpu_ms:.3f}",
                        f"{r.cpu_ms / ref.cpu_ms:.2f}",
                    ]
                )
    headers = ["answer", "client", "req/s", "× gateway's", "CPU ms/request", "× gateway's"]
    return table(headers, rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=4000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args(argv)
    port = free_port()
    load0 = os.getloadavg()[0]
    server = subprocess.Popen([sys.executable, "-c", f"from bench.upstream_hop import serve; serve({port})"])
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        out = uvloop.run(run(port, args.requests, args.rounds, args.concurrency))
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(10)
    command = "python -m bench.upstream_hop " + " ".join(argv if argv is not None else sys.argv[1:])
    load = os.getloadavg()[0]
    md = (
        f"`{command.strip()}` ({platform.machine()}, {os.cpu_count()} cores, load average {load0:.1f} at"
        f" the start, {load:.1f} at the end; best req/s and least CPU of the rounds, CPU of the client's"
        f" process only)\n\n{out}\n"
    )
    print(md)
    if args.write:
        write_section(
            "upstream-hop-6", "### The upstream hop alone, the candidates (issue 30, round 6)\n\n" + md
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
