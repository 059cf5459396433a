"""OpenAI-format errors: ``{"error": {"message", "type", "param", "code"}}`` with the right status."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
    502: "upstream_error",
    503: "service_unavailable",
    504: "timeout_error",
}


class GatewayError(Exception):
    """An error the client sees in OpenAI's format. Raised anywhere on the request path."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or _TYPE_BY_STATUS.get(
            status, "invalid_request_error" if status < 500 else "server_error"
        )
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def error_response(err: GatewayError) -> web.Response:
    try:
        body = orjson.dumps(err.body())
    except TypeError:  # a lone surrogate (a client's non-UTF-8 byte kept by surrogateescape) in the text
        body = orjson.dumps(
            error_body(_encodable(err.message), err.type, err.param and _encodable(err.param), err.code)
        )
    return web.Response(
        status=err.status,
        body=body,
        content_type="application/json",
        headers=err.headers,
    )


def _encodable(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
