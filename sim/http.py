"""What every endpoint of the simulated replica shares: its state key, request reading, model checks,
and vLLM's OpenAI-style error body."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from sim.state import Replica

REPLICA_KEY: web.AppKey[Replica] = web.AppKey("sim_replica", Replica)

JSON = "application/json"
_ERROR_TYPES = {
    400: "BadRequestError",
    401: "AuthenticationError",
    403: "PermissionDeniedError",
    404: "NotFoundError",
    408: "RequestTimeoutError",
    422: "UnprocessableEntityError",
    429: "RateLimitError",
}


class BadRequest(Exception):
    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.param = param


def error_response(status: int, message: str, param: str | None = None) -> web.Response:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    kind = _ERROR_TYPES.get(status, "InternalServerError" if status >= 500 else "APIError")
    body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return web.Response(status=status, body=orjson.dumps(body), content_type=JSON, headers=headers)


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type=JSON)


async def read_body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(400, f"invalid JSON body: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "the request body must be a JSON object")
    return body


def check_model(rep: Replica, body: dict[str, Any]) -> str:
    """The model a request names: a served model or a LoRA adapter loaded here (404 otherwise)."""
    model = body.get("model")
    if model is None:
        return rep.model_name
    if model not in rep.cfg.models and model not in rep.adapters:
        raise BadRequest(404, f"The model `{model}` does not exist.", "model")
    return model


def record_trace(rep: Replica, request: web.Request) -> None:
    """Keep the W3C trace context a request arrived with (vLLM continues it with --otlp-traces-endpoint)."""
    traceparent = request.headers.get("traceparent")
    if traceparent is not None:
        rep.traces.append({"traceparent": traceparent, "path": request.path})
