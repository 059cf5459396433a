"""The hot upstream hop: a pooled HTTP/1.1 client on an asyncio ``Protocol`` with ``httptools``.

Every answer the gateway relays crosses this hop. Through the same ``Upstream`` code (deadlines
included) this client spends 0.029-0.048 ms of CPU a request where aiohttp spent 0.087-0.186, 0.24-0.39x,
over whole answers and streams at concurrency 1, 8 and 32, in two runs; aiohttp with what the gateway
does not use turned off spent 0.81-1.25x, no consistent gain (``python -m bench.upstream_hop --requests
3000 --rounds 3 --concurrency 1 8 32``, load 7.6-10.3, and ``--requests 2000 --rounds 2``, load 1.7;
docs/benchmarks.md, "Issue 30, round 6"). It does only what the gateway's POST to a replica needs, and
keeps what its tests hold (``tests/integration/test_upstream_lean.py``):

* a keep-alive pool per replica (``host:port``), most recently used first, an idle connection closed
  after ``keepalive_s`` (aiohttp's 30 s) and dropped when the replica closes it; a connection goes
  back only after its whole answer was read and the replica did not say ``Connection: close``;
* the connect timeout (``TimeoutError``, as aiohttp's ``ConnectionTimeoutError`` is one), the total
  one (the whole exchange, body included, as aiohttp's ``ClientTimeout.total``) and the deadline of
  the wait in progress that ``Upstream`` sets (``gateway.upstream.client``: the first byte, a stream's
  idle gap; ``post``'s ``within``, ``read_within``, ``readany_within``), all on one timer handle: a
  deadline moved later is an attribute write, and the timer, when it fires early, re-arms itself for
  the later one. ``asyncio.timeout`` around each wait cost 8-9 Python calls to enter and leave, 16 a
  whole answer and two more reschedules a stream's chunk (``python -m bench.profile --calls``,
  issue 30 round 9); the deadline is lifted (back to the total) whenever no read is waiting, so time
  spent writing to a slow client never counts, as ``Upstream`` had it;
* back-pressure: a stream's body is buffered up to ``HIGH_WATER`` bytes, then the socket's reading is
  paused until the consumer (the relay, waiting on a slow client's socket) reads again;
* cancellation: a request cancelled while it waits for the headers closes its connection, and
  ``close()`` of an answer not read to its end closes it too, so the replica sees the disconnect and
  aborts the generation (``dispatch.attempt_once``'s ``finally``);
* errors as three kinds (``ConnectFailed``, ``Disconnected``, ``BadResponse``) that ``Upstream``
  maps as it maps aiohttp's.

Left to aiohttp (``Upstream`` chooses per URL): ``https`` replicas (no TLS here), and every other use
of the session (health checks, scrapes, adapter loads), which is not per request. No redirects, no
cookies, no proxies, no decompression: every request says ``Accept-Encoding: identity`` (the relay
drops ``Content-Encoding``), as the session does, which has ``auto_decompress=False`` and no
``trust_env``. Requests are not retried on a broken keep-alive connection (aiohttp does not retry a POST
either); the dispatcher's attempt loop does, on another replica.
"""

from __future__ import annotations

import asyncio
from collections import deque
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict, CIMultiDictProxy

# No content coding asked: none is relayed or decoded (RFC 9110: a request without Accept-Encoding
# accepts any; the aiohttp session sends the same, gateway.upstream.client.make_session).
IDENTITY = "Accept-Encoding: identity\r\n"

# Bytes of a stream's body buffered before the socket's reading pauses (aiohttp's: twice 64 KiB).
HIGH_WATER = 2**17


class HopError(Exception):
    """A failure of the hop; the subclass says which (``Upstream`` maps each to its kind)."""


class ConnectFailed(HopError):
    pass


class Disconnected(HopError):
    pass


class BadResponse(HopError):
    pass


class LeanResponse:
    """One answer: ``status`` and ``headers`` once the head arrived, the body read by ``read`` (whole)
    or ``readany`` (what has arrived; ``b""`` at the end). ``content`` is itself, so code written for
    aiohttp's ``resp.content.readany()`` reads it unchanged."""

    __slots__ = (
        "_chunks",
        "_conn",
        "_deadline",
        "_done",
        "_error",
        "_head",
        "_loop",
        "_paused",
        "_raw_headers",
        "_size",
        "_timer",
        "_timer_at",
        "_total_at",
        "_waiter",
        "_whole",
        "headers",
        "status",
    )

    def __init__(
        self, conn: _Conn, loop: asyncio.AbstractEventLoop, total_at: float, deadline: float
    ) -> None:
        self.status = 0
        self.headers: CIMultiDictProxy[str] = _EMPTY
        self._conn: _Conn | None = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._head = False
        self._done = False
        self._error: HopError | TimeoutError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._loop = loop
        self._total_at = total_at  # loop time by which the whole exchange must be over
        self._deadline = deadline  # the wait in progress must end by then (the total when none waits)
        self._timer_at = deadline  # when ``_timer`` fires: never later than ``_deadline``
        self._timer: asyncio.TimerHandle | None = loop.call_at(deadline, self._timed_out)
        self._paused = False
        self._whole = False
        self._raw_headers: list[bytes] = []  # name, value, name, value, ... as the parser gave them

    @property
    def content(self) -> LeanResponse:
        return self

    @property
    def content_type(self) -> str:
        value = self.headers.get("Content-Type")
        if value == "application/json":  # what replicas send: no partition, strip and lower
            return value
        if not value:
            return "application/octet-stream"
        return value.partition(";")[0].strip().lower()

    # -- the consumer's side --------------------------------------------------------------------------
    def _within(self, seconds: float | None) -> None:
        """The wait that follows must end within ``seconds`` (never past the total); None: lifted."""
        if seconds is None:
            self._deadline = self._total_at
            return
        at = self._loop.time() + seconds
        if at >= self._total_at:
            at = self._total_at
        self._deadline = at
        if at < self._timer_at and self._timer is not None:  # sooner than the timer: re-arm it
            self._timer.cancel()
            self._timer_at = at
            self._timer = self._loop.call_at(at, self._timed_out)

    async def _wait(self) -> None:
        if self._error is not None:
            raise self._error
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
        if self._error is not None:
            raise self._error

    async def read(self) -> bytes:
        """The whole body (nothing paused meanwhile: it is all wanted)."""
        self._whole = True
        self._resume()
        while not self._done:
            await self._wait()
        return b"".join(self._chunks)

    async def read_within(self, seconds: float) -> bytes:
        """``read``, its wait ending within ``seconds`` (``TimeoutError`` then; the connection closes)."""
        self._within(seconds)
        try:
            return await self.read()
        finally:
            self._deadline = self._total_at

    async def readany(self) -> bytes:
        """What arrived since the last call, waiting for something; ``b""`` once the body ended."""
        while not self._chunks:
            if self._done:
                return b""
            await self._wait()
        chunks, self._chunks, self._size = self._chunks, [], 0
        self._resume()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    async def readany_within(self, seconds: float) -> bytes:
        """``readany``, a wait for it ending within ``seconds`` (``TimeoutError``), lifted once it has
        returned: the consumer's time with the chunk (writing it to its client) is not counted."""
        if self._chunks or self._done:  # nothing to wait for: no deadline to set
            return await self.readany()
        self._within(seconds)
        try:
            return await self.readany()
        finally:
            self._deadline = self._total_at

    def close(self) -> None:
        """Done with the answer: a connection whose answer was not read to its end is closed (the
        replica sees the disconnect); one read to its end went back to the pool already."""
        self._cancel_timer()
        conn, self._conn = self._conn, None
        if conn is not None and not self._done:
            conn.resp = None
            conn.transport.close()

    release = close

    # -- the protocol's side -------------------------------------------------------------------------
    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _resume(self) -> None:
        if self._paused and self._conn is not None:
            self._paused = False
            self._conn.transport.resume_reading()

    def _fail(self, error: HopError | TimeoutError) -> None:
        if not self._done and self._error is None:
            self._error = error
            self._cancel_timer()
            self._wake()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _timed_out(self) -> None:
        self._timer = None
        now = self._loop.time()
        if now < self._deadline:  # the deadline moved later since the timer was set: wait on
            self._timer_at = self._deadline
            self._timer = self._loop.call_at(self._deadline, self._timed_out)
            return
        conn = self._conn
        total = now >= self._total_at
        self._fail(TimeoutError(f"the upstream exchange exceeded its {'total' if total else 'read'} timeout"))
        if conn is not None and not self._done:
            conn.resp = None
            conn.transport.close()


_EMPTY: CIMultiDictProxy[str] = CIMultiDictProxy(CIMultiDict())


class _Conn(asyncio.Protocol):
    """One keep-alive connection; ``resp`` is the answer it is reading, if any."""

    def __init__(self, pool: LeanPool, loop: asyncio.AbstractEventLoop) -> None:
        self.pool = pool
        self.loop = loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpResponseParser(self)
        self.resp: LeanResponse | None = None
        self.idle_since = 0.0
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None:  # nothing asked: a replica that talks out of turn is not reused
            self.transport.close()
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError:
            resp._fail(BadResponse("the replica's answer is not valid HTTP"))
            self.resp = None
            self.transport.close()
            return
        if resp is self.resp and resp._size > HIGH_WATER and not resp._whole and not resp._paused:
            resp._paused = True
            self.transport.pause_reading()

    def on_header(self, name: bytes, value: bytes) -> None:
        resp = self.resp
        if resp is not None:
            resp._raw_headers += (name, value)  # decoded once, all together, when the head is complete

    def on_headers_complete(self) -> None:
        resp = self.resp
        if resp is not None:
            resp.status = self.parser.get_status_code()
            # One join, decode and split for the whole head instead of two decodes and an append a
            # header (16 calls a request with the simulator's four headers, 4 now: ``python -m
            # bench.profile --calls``). NUL cannot be in a name or a value: llhttp refuses it ("Invalid
            # header value char"), as it refuses a folded line (tests/integration/test_upstream_lean.py).
            raw = resp._raw_headers
            if raw:
                text = b"\0".join(raw).decode("latin-1").split("\0")
                resp.headers = CIMultiDictProxy(CIMultiDict(zip(text[::2], text[1::2], strict=True)))
            resp._head = True
            waiter = resp._waiter  # ``_wake``, inlined on the protocol's per-answer callbacks
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def on_body(self, body: bytes) -> None:
        resp = self.resp
        if resp is not None:
            resp._chunks.append(body)
            resp._size += len(body)
            if not resp._whole:  # ``read`` waits for the end (``on_message_complete`` wakes it)
                waiter = resp._waiter
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)

    def on_message_complete(self) -> None:
        resp = self.resp
        if resp is None:
            return
        resp._done = True
        resp._cancel_timer()
        self.resp = None
        resp._conn = None
        if resp._paused:
            resp._paused = False
            self.transport.resume_reading()
        if self.parser.should_keep_alive() and not self.closed:
            self.pool.put_back(self)
        else:
            self.transport.close()
        resp._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        resp, self.resp = self.resp, None
        if resp is None:
            return
        if resp._head and not resp._done and _until_close(resp):
            resp._done = True  # a body delimited by the connection's end (no length, not chunked)
            resp._cancel_timer()
            resp._wake()
            return
        resp._fail(Disconnected("the replica closed the connection"))


def _until_close(resp: LeanResponse) -> bool:
    h = resp.headers
    return "Content-Length" not in h and "chunked" not in h.get("Transfer-Encoding", "").lower()


class LeanPool:
    """The keep-alive connections to one ``host:port``; no limit on their number (the gateway's
    aiohttp connector had ``limit=0, limit_per_host=0``)."""

    def __init__(self, host: str, port: int, connect_s: float, total_s: float, keepalive_s: float) -> None:
        self.host, self.port = host, port
        self.connect_s, self.total_s, self.keepalive_s = connect_s, total_s, keepalive_s
        self.idle: deque[_Conn] = deque()
        self.authority = host if port == 80 else f"{host}:{port}"
        self.fixed = f"Host: {self.authority}\r\n{IDENTITY}"  # the head's lines every request has
        self.closing = False

    def put_back(self, conn: _Conn) -> None:
        if self.closing:
            conn.transport.close()
            return
        now = conn.loop.time()
        conn.idle_since = now
        idle = self.idle
        while idle and (idle[0].closed or now - idle[0].idle_since > self.keepalive_s):
            old = idle.popleft()
            if not old.closed:
                old.transport.close()
        idle.append(conn)

    async def _connection(self, loop: asyncio.AbstractEventLoop, deadline: float) -> _Conn:
        """An idle connection, else a new one within the connect timeout and before ``deadline`` (the
        first byte's: a connect counts in it, as it did under ``Upstream``'s ``asyncio.timeout``)."""
        idle = self.idle
        now = loop.time()
        while idle:
            conn = idle.pop()
            if conn.closed or conn.transport.is_closing():
                continue
            if now - conn.idle_since > self.keepalive_s:
                conn.transport.close()
                continue
            return conn
        try:
            async with asyncio.timeout_at(min(deadline, now + self.connect_s)):
                _, conn = await loop.create_connection(lambda: _Conn(self, loop), self.host, self.port)
        except OSError:
            raise ConnectFailed("cannot connect to the replica") from None
        return conn

    async def post(
        self, path: str, body: bytes, headers: dict[str, str], within: float | None = None
    ) -> LeanResponse:
        """Send the request; return once the answer's head arrived (its body is read from the answer),
        the head within ``within`` seconds when given (``TimeoutError``), the whole exchange within the
        total timeout."""
        lines = [f"POST {path} HTTP/1.1\r\n{self.fixed}Content-Length: {len(body)}\r\n"]
        for k, v in headers.items():
            if "\n" in v or "\r" in v or "\n" in k or "\r" in k:  # as aiohttp: no header injection
                raise ValueError("newline or carriage return in a request header")
            lines.append(f"{k}: {v}\r\n")
        lines.append("\r\n")
        head = "".join(lines).encode()
        loop = asyncio.get_running_loop()
        now = loop.time()
        total_at = now + self.total_s
        deadline = total_at if within is None or now + within >= total_at else now + within
        conn = await self._connection(loop, deadline)
        resp = LeanResponse(conn, loop, total_at, deadline)
        conn.resp = resp
        try:
            conn.transport.write(head + body)
            while not resp._head:
                await resp._wait()
        except BaseException:
            resp.close()  # cancelled or failed before the head: the replica sees the disconnect
            raise
        resp._deadline = total_at  # the head is in: the first byte's deadline is over
        return resp

    def close(self) -> None:
        self.closing = True
        while self.idle:
            self.idle.pop().transport.close()


class LeanClient:
    """The pools by ``scheme://host:port``, found by the URL's prefix; ``None`` for a URL it does not
    serve (``https``), which ``Upstream`` sends through aiohttp."""

    def __init__(self, connect_s: float, total_s: float, keepalive_s: float = 30.0) -> None:
        self.connect_s, self.total_s, self.keepalive_s = connect_s, total_s, keepalive_s
        self.pools: dict[str, LeanPool] = {}
        self._split: dict[str, tuple[LeanPool, str] | None] = {}

    def route(self, url: str) -> tuple[LeanPool, str] | None:
        """The pool and the path of ``url``, or None when this client does not serve it."""
        found = self._split.get(url, False)
        if found is not False:
            return found  # type: ignore[return-value]
        parts = urlsplit(url)
        route: tuple[LeanPool, str] | None = None
        if parts.scheme == "http" and parts.hostname and not parts.username:
            port = parts.port or 80
            key = f"{parts.hostname}:{port}"
            pool = self.pools.get(key)
            if pool is None:
                pool = self.pools[key] = LeanPool(
                    parts.hostname, port, self.connect_s, self.total_s, self.keepalive_s
                )
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            route = (pool, path)
        if len(self._split) > 4096:  # replicas come and go: keep the map bounded
            self._split.clear()
        self._split[url] = route
        return route

    def close(self) -> None:
        for pool in self.pools.values():
            pool.close()
