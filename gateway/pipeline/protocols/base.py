"""What a front end is: the map from one API's request onto the pipeline's stages, and back.

Every API the gateway speaks reaches a replica as chat completions (or as the replica's own
completions, embeddings and pass-through endpoints), so that routing, tenancy, the response cache,
limits and billing exist once. A front end is four plain functions over the request's context:

- ``prepare``: after parse, turn the client's validated body into the request the stages read (a
  chat-completions body) and what the answer needs, returned (``Prepared``: the handler sets them as
  ``ctx.parsed`` and ``ctx.exchange``, inputs no other module writes), or None to keep the request;
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
    from typing import TypeAlias

    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.parse import ParsedRequest

    Prepared: TypeAlias = tuple[ParsedRequest, Any] | None  # what ``prepare`` returns


class Encoder(Protocol):
    """One stream's events in the client's API, from the chat chunks the replica sends."""

    def start(self) -> bytes: ...

    def chunk(self, chunk: Any) -> bytes: ...

    async def end(self, ctx: RequestContext, *, done: bool, error: str | None) -> bytes: ...


@dataclass(frozen=True, slots=True)
class FrontEnd:
    name: str
    prepare: Callable[[RequestContext], Awaitable[Prepared]]
    answer: Callable[[RequestContext, dict[str, Any]], Awaitable[dict[str, Any]]]
    encoder: Callable[[RequestContext], Encoder]
    error: Callable[[GatewayError], web.Response]
    passthrough: bool = False  # the client speaks the replica's API: bodies and chunks pass as they came


def replica_error(status: int, data: bytes) -> GatewayError:
    """A replica's error answer as the gateway's own, for any front end's error shape: the replica's
    status and message (OpenAI's shape, or vLLM's and SGLang's ``{"object": "error", "message", "type":
    "BadRequestError", "code": 400}``), the type OpenAI gives that status, ``param`` and ``code`` kept
    only when they are OpenAI-style strings; a body without a message says the status."""
    err: Any = None
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        err = body.get("error") if isinstance(body.get("error"), dict) else body
    message = err.get("message") if isinstance(err, dict) else None
    if not isinstance(message, str) or not message:
        message = f"the replica answered {status}"
    param = err.get("param") if isinstance(err, dict) else None
    code = err.get("code") if isinstance(err, dict) else None
    return GatewayError(
        status,
        message,
        param=param if isinstance(param, str) else None,
        code=code if isinstance(code, str) else None,
    )
