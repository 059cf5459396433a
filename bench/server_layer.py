"""The server layer alone: aiohttp's web.Application as the gateway runs it, aiohttp's low-level
``web.Server``, and a raw ``asyncio.Protocol`` on httptools, on the same handler work, side by side.

    python -m bench.server_layer [--requests 3000] [--rounds 2] [--concurrency 1 32] [--write]

Issue 30, round 5, item 1: before moving the hot routes off aiohttp's ``web.Application``, measure what
each server layer costs a request with the handler's own work held equal. Each server is its own
process on uvloop (so its CPU is its own; ``psutil``), all started at once; the load generator is this
process, a pooled keep-alive HTTP/1.1 client on httptools (``bench.upstream_hop.LeanPool``: the cheapest
client at hand, so the cores go to the server measured). The servers:

* ``web.Application``: as ``gateway.server.app`` builds it: the gateway's runner (``GatewayRunner``:
  ``GuardedHandler``'s head timer, ``handler_cancellation``, its header limits, lingering time), one
  middleware of the gateway's shape (error mapping around the handler, the POST body read first through
  ``read_body_within``, an admission semaphore), the router holding the gateway's public table (six
  POST inference paths and the GETs), ``client_max_size``;
* ``web.Server``: aiohttp's low-level server with the same protocol (``GuardedServer``: same llhttp
  parser, ``RequestHandler``, response writer, head timer, limits), its handler called with a
  ``BaseRequest``; the hot paths found by one dict lookup, the same body read and admission, no router,
  middleware chain, signals or ``Application``;
* ``httptools``: a raw protocol (MagicStack's binding of llhttp) answering from ``on_message_complete``:
  the floor, with none of the behaviours (timeouts, limits, back-pressure, cancellation) the gateway keeps.

The handler work, the same in all three: read the body, ``orjson.loads`` it, check ``model``, answer a
~1 KB chat completion with the gateway's kind of headers (replica, prefix match, request id, billing),
or for ``stream`` 8 SSE events and ``[DONE]``, each written (and, in aiohttp, drained) on its own.
Scenarios: non-stream and stream at concurrency 1 and 32; the servers alternate within each round,
``--rounds`` times; the best round's req/s and the least CPU per request are kept.
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
from typing import Any

import httptools
import orjson
import psutil
import uvloop
from aiohttp import web

from bench.procs import free_ports
from bench.report import table, write_section
from bench.upstream_hop import LeanPool
from gateway.errors import GatewayError, error_response
from gateway.server.conn_guard import GatewayRunner, GuardedServer, read_body_within

SERVERS = ("web.Application", "web.Server", "httptools")
PATHS = (
    "/v1/chat/completions",
    "/v1/completions",
    "/v1/responses",
    "/v1/messages",
    "/v1/embeddings",
    "/v1/messages/count_tokens",
)
EVENTS = 8
ANSWER = {
    "id": "chatcmpl-0123456789",
    "object": "chat.completion",
    "created": 1_700_000_000,
    "model": "sim-llama",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "y" * 700}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
}
EVENT = (
    b'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","choices":[{"delta":{"content":"tok"}}]}\n\n'
)
DONE = b"data: [DONE]\n\n"
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MAX_BODY = 32 * 1024 * 1024


def answer_headers() -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "x-gateway-replica": "r0",
        "x-gateway-prefix-match": "16/40",
        "x-gateway-request-id": "0123456789abcdef",
        "x-cache": "miss",
        "x-gateway-billing-cost-micros": "12",
        "x-gateway-billing-cost-without-cache-micros": "15",
    }


def work(body: bytes) -> tuple[bool, bytes]:
    """The handler's own work: (stream?, the whole answer)."""
    parsed = orjson.loads(body)
    if not isinstance(parsed, dict) or "model" not in parsed:
        raise GatewayError(400, "model is required", code="invalid_request")
    return bool(parsed.get("stream")), orjson.dumps(ANSWER)


# -- aiohttp: the handler, with a BaseRequest (web.Server) or a Request (web.Application) -------------


async def answer(request: web.BaseRequest) -> web.StreamResponse:
    stream, data = work(await request.read())
    if not stream:
        return web.Response(body=data, headers=answer_headers())
    out = web.StreamResponse(status=200, headers={**answer_headers(), **SSE_HEADERS})
    await out.prepare(request)
    for _ in range(EVENTS):
        await out.write(EVENT)
    await out.write_eof(DONE)
    return out


def app_server() -> web.AppRunner:
    admission = asyncio.Semaphore(1024)

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            if request.method != "POST":
                return await handler(request)
            early = await read_body_within(request, 30.0)
            if early is not None:
                return early
            async with admission:
                return await handler(request)
        except GatewayError as err:
            return error_response(err)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            return error_response(GatewayError(exc.status, exc.reason, code="not_found"))

    async def ok(request: web.Request) -> web.Response:
        return web.Response(body=b'{"status":"ok"}', content_type="application/json")

    app = web.Application(middlewares=[middleware], client_max_size=MAX_BODY)
    for path in PATHS:
        app.router.add_post(path, answer)
    for path in ("/v1/models", "/health", "/ready", "/metrics", "/v1/files", "/v1/batches"):
        app.router.add_get(path, ok)
    app.router.add_get("/v1/responses/{response_id}", ok)
    return GatewayRunner(app, head_timeout_s=10.0, **runner_kwargs())


def runner_kwargs() -> dict[str, Any]:
    return {
        "handler_cancellation": True,
        "access_log": None,
        "max_line_size": 16384,
        "max_field_size": 16384,
        "max_headers": 128,
        "keepalive_timeout": 75.0,
        "lingering_time": 1.0,
    }


def low_level_server() -> GuardedServer:
    admission = asyncio.Semaphore(1024)
    hot = frozenset(PATHS)

    async def handler(request: web.BaseRequest) -> web.StreamResponse:
        try:
            if request.method != "POST" or request.path not in hot:
                return error_response(GatewayError(404, f"Unknown path {request.path}", code="not_found"))
            early = await read_body_within(request, 30.0)
            if early is not None:
                return early
            async with admission:
                return await answer(request)
        except GatewayError as err:
            return error_response(err)

    def make_request(message, payload, protocol, writer, task, _cls=web.BaseRequest):
        return _cls(message, payload, protocol, writer, task, protocol._loop, client_max_size=MAX_BODY)

    server = GuardedServer(handler, request_factory=make_request, **runner_kwargs())
    server.head_timeout_s = 10.0
    return server


# -- the floor: a raw protocol on httptools ----------------------------------------------------------------


class _Raw(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: Any = transport
        self.parser = httptools.HttpRequestParser(self)
        self.body: list[bytes] = []

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        body, self.body = b"".join(self.body), []
        stream, data = work(body)
        headers = answer_headers()
        if stream:
            headers.update(SSE_HEADERS)
            headers["Transfer-Encoding"] = "chunked"
        else:
            headers["Content-Length"] = str(len(data))
        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        write = self.transport.write
        if not stream:
            write(head.encode() + data)
            return
        write(head.encode())
        for _ in range(EVENTS):
            write(b"%x\r\n%s\r\n" % (len(EVENT), EVENT))
        write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(DONE), DONE))


def serve(kind: str, port: int) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        if kind == "web.Application":
            runner = app_server()
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
        elif kind == "web.Server":
            await loop.create_server(low_level_server(), "127.0.0.1", port, backlog=1024)
        else:
            await loop.create_server(_Raw, "127.0.0.1", port, backlog=1024)
        await asyncio.Event().wait()

    uvloop.run(main())


# -- the measurement ---------------------------------------------------------------------------------------


def cpu_s(pid: int) -> float:
    """CPU seconds of every thread of ``pid``: the scheduler's nanoseconds (``/proc/PID/task/*/schedstat``)
    where Linux has them, since a server's few ms a measurement are a handful of psutil's 10 ms ticks."""
    try:
        total = 0
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                total += int(f.read().split()[0])
        return total / 1e9
    except OSError:
        return sum(psutil.Process(pid).cpu_times()[:2])


async def measure(
    pool: LeanPool, pid: int, stream: bool, requests: int, concurrency: int
) -> tuple[float, float]:
    """(req/s, server CPU ms a request) of ``requests`` with ``concurrency`` in flight."""
    body = orjson.dumps(
        {"model": "sim-llama", "stream": stream, "messages": [{"role": "user", "content": "hi " * 60}]}
    )
    call: Callable[[str, bytes], Awaitable[Any]] = pool.stream if stream else pool.whole
    left = requests

    async def worker() -> None:
        nonlocal left
        while left > 0:
            left -= 1
            assert await call("/v1/chat/completions", body)

    await asyncio.gather(*(call("/v1/chat/completions", body) for _ in range(concurrency)))  # warm
    c0, t0 = cpu_s(pid), time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall, cpu = time.perf_counter() - t0, cpu_s(pid) - c0
    return requests / wall, cpu / requests * 1000


async def run(ports: dict[str, int], pids: dict[str, int], args: argparse.Namespace) -> str:
    pools = {k: LeanPool("127.0.0.1", p) for k, p in ports.items()}
    scenarios = [(stream, c) for c in args.concurrency for stream in (False, True)]
    best: dict[tuple[str, bool, int], list[float]] = {}
    for _ in range(args.rounds):
        for stream, c in scenarios:
            n = args.requests if c > 1 else max(500, args.requests // 3)
            for kind in SERVERS:
                rps, cpu = await measure(pools[kind], pids[kind], stream, n, c)
                b = best.setdefault((kind, stream, c), [0.0, float("inf")])
                b[0], b[1] = max(b[0], rps), min(b[1], cpu)
    rows = []
    for stream, c in scenarios:
        ref = best[(SERVERS[0], stream, c)]
        for kind in SERVERS:
            rps, cpu = best[(kind, stream, c)]
            rows.append(
                [
                    f"{'stream (8 events)' if stream else 'non-stream'}, c={c}",
                    kind,
                    f"{rps:,.0f}",
                    f"{rps / ref[0]:.2f}",
                    f"{cpu:.3f}",
                    f"{cpu / ref[1]:.2f}",
                ]
            )
    for pool in pools.values():
        for conn in pool.idle:
            conn.transport.close()
    headers = ["scenario", "server", "req/s", "× Application's", "server CPU ms / req", "× Application's"]
    return table(headers, rows)


def _wait_port(port: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, default=3000, help="per measurement at c>1 (a third at c=1)")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 32])
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args(argv)
    ports = dict(zip(SERVERS, free_ports(len(SERVERS)), strict=True))
    procs = {
        k: subprocess.Popen(
            [sys.executable, "-c", f"from bench.server_layer import serve; serve({k!r}, {port})"]
        )
        for k, port in ports.items()
    }
    load0 = os.getloadavg()[0]
    try:
        for port in ports.values():
            _wait_port(port)
        out = uvloop.run(run(ports, {k: pr.pid for k, pr in procs.items()}, args))
    finally:
        for pr in procs.values():
            pr.send_signal(signal.SIGTERM)
        for pr in procs.values():
            try:
                pr.wait(10)
            except subprocess.TimeoutExpired:
                pr.kill()
                pr.wait(5)
    command = "python -m bench.server_layer " + " ".join(argv if argv is not None else sys.argv[1:])
    md = (
        f"`{command.strip()}` ({platform.machine()}, {os.cpu_count()} cores, load average {load0:.1f} at the"
        f" start, {os.getloadavg()[0]:.1f} at the end; best req/s and least server CPU of the rounds)\n\n{out}\n"
    )
    print(md)
    if args.write:
        write_section("server-layer", "### The server layer alone (issue 30, round 5, item 1)\n\n" + md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
