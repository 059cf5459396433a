"""The upstream side: the hop to the replicas, timeouts, error mapping.

A request to an ``http`` replica goes through ``hop``, the lean pooled client of
``gateway.upstream.lean``: on the hop alone it spends 0.24-0.39x aiohttp's CPU a request (0.029-0.048
ms against 0.087-0.186, whole answers and streams at concurrency 1, 8 and 32, two runs; ``python -m
bench.upstream_hop``, docs/benchmarks.md "Issue 30, round 6"), while aiohttp with what the gateway
does not use turned off spent 0.81-1.25x: no consistent gain. In the whole gateway, CPU a request at
concurrency 32 fell 7-34 % non-stream and 8-20 % stream against 98ecde5 in three ``bench.overhead``
runs. Either answer is read through the same ``Upstream`` methods (``read``,
``content.readany``, ``close``), with the same deadlines and error kinds. ``https`` replicas and the
session's other users (health checks, scrapes, adapter loads, not per request) stay on the aiohttp
session; ``hop = None`` sends every request through aiohttp (the benchmark's reference).

Four timeouts, each from the policy: connect, first byte (headers and, for a stream, its first chunk),
idle (longest silence between two chunks) and total. On the lean hop each wait's deadline is the
answer's own (``post``'s ``within``, ``read_within``, ``readany_within``: one timer handle, moved by
attribute writes); on aiohttp's, ``asyncio.timeout``, rescheduled per chunk so the idle timer costs
no task per read. The lean hop's way saves 16 Python calls a whole answer and 8 a stream's read
(``python -m bench.profile --calls``, issue 30 round 9); the deadlines, their errors and the closed
connection are the same (``tests/integration/test_upstream_lean.py``).

A failure's message is ours and may reach a client (a 502, a stream's error event): it says what
happened, never the HTTP client's exception text ("TransferEncodingError: 400, ...") nor the
replica's address; ``kind`` says which failure it was.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

from config.policy import TimeoutsConfig
from gateway.errors import GatewayError
from gateway.upstream.coding import StreamDecoder, UnreadableCoding, coding_of, decode_whole
from gateway.upstream.lean import BadResponse, ConnectFailed, Disconnected, HopError, LeanClient, LeanResponse

Response = aiohttp.ClientResponse | LeanResponse

HOP_BY_HOP = frozenset(
    h.lower()
    for h in (
        "Connection",
        "Keep-Alive",
        "Proxy-Authenticate",
        "Proxy-Authorization",
        "TE",
        "Trailers",
        "Transfer-Encoding",
        "Upgrade",
        "Content-Length",
        "Content-Encoding",
        "Date",
        "Server",
    )
)


class UpstreamFailure(Exception):
    """An attempt failed before anything reached the client; ``kind`` says how."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind  # "connect" | "timeout" | "disconnect" | "protocol"

    def to_gateway_error(self) -> GatewayError:
        if self.kind == "timeout":
            return GatewayError(504, f"upstream timed out: {self}", code="upstream_timeout")
        return GatewayError(502, f"upstream failed: {self}", code=f"upstream_{self.kind}")


def make_session(timeouts: TimeoutsConfig, limit_per_host: int = 0) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=limit_per_host, keepalive_timeout=30.0)
    timeout = aiohttp.ClientTimeout(total=timeouts.total_s, connect=timeouts.connect_s)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        # No content coding: the relay drops Content-Encoding and nothing decompresses, and aiohttp
        # would ask for gzip by itself (tests/integration/test_upstream_encoding.py).
        headers={"Accept-Encoding": "identity"},
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
        json_serialize=None,  # type: ignore[arg-type]
    )


@dataclass(slots=True)
class Upstream:
    """``session`` for what the lean client does not serve; ``hop`` the lean client (None: aiohttp for
    every request, as the benchmark sets it for its reference)."""

    session: aiohttp.ClientSession
    timeouts: TimeoutsConfig
    hop: LeanClient | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.hop = LeanClient(self.timeouts.connect_s, self.timeouts.total_s)

    async def open(self, url: str, body: bytes, headers: dict[str, str]) -> Response:
        """POST and wait for the response headers within the first-byte timeout."""
        hop = self.hop
        route = hop.route(url) if hop is not None else None
        try:
            if route is not None:
                return await route[0].post(route[1], body, headers, self.timeouts.first_byte_s)
            async with asyncio.timeout(self.timeouts.first_byte_s):
                return await self.session.post(url, data=body, headers=headers)
        except TimeoutError:
            raise UpstreamFailure("timeout", f"no response within {self.timeouts.first_byte_s}s") from None
        except (aiohttp.ClientConnectorError, ConnectFailed):
            raise UpstreamFailure("connect", "cannot connect to the replica") from None
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, Disconnected):
            raise UpstreamFailure("disconnect", "the replica closed the connection") from None
        except (aiohttp.ClientError, BadResponse):
            raise UpstreamFailure("protocol", "the replica's answer is not valid HTTP") from None

    async def close(self) -> None:
        """Close the lean client's connections and the session."""
        if self.hop is not None:
            self.hop.close()
        await self.session.close()

    async def read_all(self, resp: Response) -> bytes:
        """Whole body of a non-stream answer (within first-byte timeout: nothing was sent back yet)."""
        try:
            if type(resp) is LeanResponse:
                data = await resp.read_within(self.timeouts.first_byte_s)
            else:
                async with asyncio.timeout(self.timeouts.first_byte_s):
                    data = await resp.read()
        except TimeoutError:
            raise UpstreamFailure(
                "timeout", f"no complete answer within {self.timeouts.first_byte_s}s"
            ) from None
        except (aiohttp.ClientError, HopError):
            raise UpstreamFailure("disconnect", "the connection closed before the whole answer") from None
        try:
            return decode_whole(data, coding_of(resp.headers.get("Content-Encoding")))
        except UnreadableCoding as e:
            raise UpstreamFailure("protocol", str(e)) from None

    async def iter_chunks(self, resp: Response) -> AsyncIterator[bytes]:
        """Chunks of a streamed body as they arrive. The first within the first-byte timeout, then each
        within the idle timeout. Raises ``UpstreamFailure`` on silence or a broken connection."""
        limit = self.timeouts.first_byte_s
        try:
            coding = coding_of(resp.headers.get("Content-Encoding"))
        except UnreadableCoding as e:
            raise UpstreamFailure("protocol", str(e)) from None
        decoder = StreamDecoder(coding) if coding is not None else None
        try:
            if type(resp) is LeanResponse:  # the answer keeps the deadline, lifted between reads
                while True:
                    chunk = await resp.readany_within(limit)
                    if not chunk:
                        break
                    limit = self.timeouts.idle_s
                    if decoder is None:
                        yield chunk
                        continue
                    for piece in decoder.feed(chunk):
                        yield piece
            else:
                # The deadline covers only the read: while the consumer writes to its client it is
                # lifted, so the timeout can never fire outside this frame.
                loop = asyncio.get_running_loop()
                async with asyncio.timeout(None) as cm:
                    while True:
                        cm.reschedule(loop.time() + limit)
                        chunk = await resp.content.readany()
                        cm.reschedule(None)
                        if not chunk:
                            break
                        limit = self.timeouts.idle_s
                        if decoder is None:
                            yield chunk
                            continue
                        for piece in decoder.feed(chunk):
                            yield piece
        except TimeoutError:
            raise UpstreamFailure("timeout", f"stream silent for {limit}s") from None
        except (aiohttp.ClientError, HopError):
            raise UpstreamFailure("disconnect", "the connection closed early") from None
        except UnreadableCoding as e:
            raise UpstreamFailure("protocol", str(e)) from None
        if decoder is not None and not decoder.complete:
            raise UpstreamFailure("disconnect", "the connection closed before the coded stream's end")
