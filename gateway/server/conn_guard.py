"""Slow-client (slowloris) protection for the gateway's HTTP server, and its parser errors.

aiohttp bounds an idle connection (``keepalive_timeout``, armed from the moment a connection is made)
but has no timeout for *reading a request*: a client that sends its headers one byte at a time keeps
the connection, and its memory, for as long as it likes, and a handler that reads a body which never
ends waits as long. Two guards:

- **Headers**: ``GuardedHandler`` (a ``RequestHandler`` subclass) arms a timer when bytes of a new
  request arrive while the connection waits for one; if no complete request head was parsed when it
  fires (aiohttp's own request counter did not move and the connection still waits for a message), the
  connection is closed. One timer per connection at most, armed only while a head is incomplete.
- **Body**: ``read_body_within`` (called by the app's middleware) reads the whole body of a POST
  within ``body_timeout_s`` (aiohttp caches it, so handlers read it again for free), else 408 in
  OpenAI's format and the connection is closed.

The header guard uses aiohttp internals (``_waiter``, ``_request_count``, ``_loop``); the tests in
``tests/fault/test_slow_clients.py`` fail if an aiohttp upgrade changes them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler

from gateway.errors import GatewayError, error_response
from gateway.process.process import PROCESS

log = logging.getLogger("prefix_gateway")


class GuardedHandler(RequestHandler):
    __slots__ = ("_field_limit", "_head_count", "_head_timeout", "_head_timer", "_headers_limit")

    def __init__(self, manager: web.Server, *, head_timeout_s: float, **kwargs: Any):
        super().__init__(manager, **kwargs)
        self._field_limit = kwargs.get("max_field_size", 8190)
        self._headers_limit = kwargs.get("max_headers", 128)
        self._head_timeout = head_timeout_s
        self._head_timer: asyncio.TimerHandle | None = None
        self._head_count = 0

    def data_received(self, data: bytes) -> None:
        count = self._request_count
        super().data_received(data)
        if self._head_timer is None and self._request_count == count and data:
            # Bytes that completed no request head: a head is (or a body is) under way.
            self._head_count = self._request_count
            self._head_timer = self._loop.call_later(self._head_timeout, self._head_expired)

    def _head_expired(self) -> None:
        self._head_timer = None
        waiter = self._waiter
        if self._request_count == self._head_count and waiter is not None and not waiter.done():
            # Still waiting for the head that started arriving ``head_timeout_s`` ago.
            self.force_close()

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """Errors the HTTP parser raises before any handler runs (a header over ``max_header_bytes``,
        a malformed request): an OpenAI-format answer, and one log line that carries neither the
        request's bytes nor a traceback (aiohttp's own echoes part of the offending header)."""
        if isinstance(exc, LineTooLong):
            err = GatewayError(
                431,
                f"request line or a header field is longer than the limit of {self._field_limit} bytes",
                code="header_too_large",
            )
        elif isinstance(exc, BadHttpMessage) and exc.message.startswith("Too many headers"):
            # aiohttp has no class of its own for this one (both of its parsers word it alike)
            err = GatewayError(
                431,
                f"more header fields than the limit of {self._headers_limit}",
                code="too_many_headers",
            )
        elif isinstance(exc, HttpProcessingError):
            err = GatewayError(400, "malformed HTTP request", code="bad_http_request")
        else:
            err = GatewayError(
                status,
                "internal gateway error" if status >= 500 else "bad request",
                code="internal_error" if status >= 500 else "bad_http_request",
            )
        log.warning(
            "request refused by the HTTP parser",
            extra={
                "event": "bad_http",
                "status": err.status,
                "error": type(exc).__name__,
                "peer": getattr(request, "remote", None),
            },
        )
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        resp = error_response(err)
        resp.force_close()
        return resp

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)


class GuardedServer(web.Server):
    """A ``web.Server`` whose connections are ``GuardedHandler``s."""

    head_timeout_s: float = 10.0

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, head_timeout_s=self.head_timeout_s, **self._kwargs)


class GatewayRunner(web.AppRunner):
    """``AppRunner`` serving with ``GuardedServer``."""

    def __init__(self, app: web.Application, *, head_timeout_s: float, **kwargs: Any):
        super().__init__(app, **kwargs)
        self.head_timeout_s = head_timeout_s

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = GuardedServer  # same object and fields, only the protocol factory differs
        server.head_timeout_s = self.head_timeout_s  # type: ignore[attr-defined]
        if PROCESS in self.app:
            self.app[PROCESS].server = server  # for the admin API's connection count
        return server


async def read_body_within(request: web.BaseRequest, timeout_s: float) -> web.Response | None:
    """Read a POST body within ``timeout_s`` (aiohttp keeps it: handlers read it again for free).
    None when it arrived; else the answer to send (408, or 413 past the body limit), closing the
    connection."""
    limit = request.client_max_size  # the app's ``client_max_size``, given to each request it makes
    declared = request.content_length
    if not request.body_exists or (declared and declared > limit):
        return None
    try:
        if request.content.is_eof():
            # The whole body came with the head (the common case): reading it cannot wait, so no
            # deadline is armed (a timer, its handle and the context manager: 8 of the ~1,000 Python
            # calls of a request, ``python -m bench.profile --calls``).
            await request.read()
            return None
        async with asyncio.timeout(timeout_s):
            await request.read()
        return None
    except TimeoutError:
        resp = error_response(GatewayError(408, "request body not received in time", code="request_timeout"))
    except web.HTTPRequestEntityTooLarge:
        resp = error_response(
            GatewayError(413, f"request body exceeds the limit of {limit} bytes", code="body_too_large")
        )
    resp.force_close()
    return resp
