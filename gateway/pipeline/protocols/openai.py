"""OpenAI's own endpoints (chat, completions, embeddings, vLLM's pass-through endpoints): the client
speaks the replica's API, so bodies and chunks pass as they came; a stream ends with ``[DONE]`` or, when
it failed part-way, an error event in OpenAI's shape."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from gateway.errors import error_body, error_response
from gateway.pipeline.protocols.base import FrontEnd

if TYPE_CHECKING:
    from gateway.pipeline.context import RequestContext
    from gateway.pipeline.protocols.base import Prepared

DONE_EVENT = b"data: [DONE]\n\n"


def sse_event(data: Any) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


class ChatEncoder:
    def start(self) -> bytes:
        return b""

    def chunk(self, chunk: Any) -> bytes:
        return sse_event(chunk)

    async def end(self, ctx: RequestContext, *, done: bool, error: str | None) -> bytes:
        if error is not None:
            return sse_event(error_body(error, "upstream_error", None, "upstream_stream_error"))
        return DONE_EVENT if done else b""


async def _as_is(ctx: RequestContext) -> Prepared:
    return None


async def _answer(ctx: RequestContext, body: dict[str, Any]) -> dict[str, Any]:
    return body


FRONTEND = FrontEnd(
    name="openai",
    prepare=_as_is,
    answer=_answer,
    encoder=lambda ctx: ChatEncoder(),
    error=error_response,
    passthrough=True,
)
