"""What a front end is: the map from one API's request onto the pipeline's stages, and back.

Every API the gateway speaks reaches a replica as chat completions (or as the replica's own
completions, embeddings and pass-through endpoints), so that routing, tenancy, the response cache,
limits and billing exist once. A front end is four plain functions over the request's context:

- ``prepare``: after parse, turn the client's validated body into the request the stages read
  (``ctx.parsed``: a chat-completions body) and keep what the answer needs (``ctx.exchange``);
- ``answer``: a complete chat completion (relayed, cached, coalesced) → the API's answer body;
- ``encoder``: a stream's events: ``start`` when it opens, ``chunk`` per chat chunk, ``end`` after the
  ledger row (``respond.close_stream``) with the final usage;
- ``error``: the API's error shape.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from aiohttp import web

from gateway.errors import GatewayError

if TYPE_CHECKING:
    from gateway.pipeline.context import RequestContext


class Encoder(Protocol):
    """One stream's events in the client's API, from the chat chunks the replica sends."""

    def start(self) -> bytes: ...

    def chunk(self, chunk: Any) -> bytes: ...

    async def end(self, ctx: RequestContext, *, done: bool, error: str | None) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FrontEnd:
    name: str
    prepare: Callable[[RequestContext], Awaitable[None]]
    answer: Callable[[RequestContext, dict[str, Any]], Awaitable[dict[str, Any]]]
    encoder: Callable[[RequestContext], Encoder]
    error: Callable[[GatewayError], web.Response]
    passthrough: bool = False  # the client speaks the replica's API: bodies and chunks pass as they came


def error_message(data: bytes) -> str:
    """The message of a replica's error body (OpenAI's shape, or vLLM's), else a generic one."""
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        return "the replica failed to answer"
    if not isinstance(body, dict):
        return "the replica failed to answer"
    err = body.get("error")
    message = err.get("message") if isinstance(err, dict) else body.get("message")
    return str(message) if message else "the replica failed to answer"
