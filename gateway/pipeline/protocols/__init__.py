"""The APIs clients speak (front ends): one file each, registered in this table by the name that
``gateway.pipeline.parse.ENDPOINTS`` gives them. Each maps its request onto chat completions and the
answer back (``gateway.pipeline.protocols.base``)."""

from __future__ import annotations

from gateway.pipeline.protocols import messages, openai, responses
from gateway.pipeline.protocols.base import Encoder, FrontEnd

FRONTENDS: dict[str, FrontEnd] = {
    "openai": openai.FRONTEND,
    "responses": responses.FRONTEND,
    "messages": messages.FRONTEND,
    "count_tokens": messages.COUNT_TOKENS,
}

__all__ = ["FRONTENDS", "Encoder", "FrontEnd"]
