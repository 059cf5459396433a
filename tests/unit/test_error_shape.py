"""``error_response``: OpenAI's error shape for any text a message may carry; the middleware's answer to\na malformed body a handler read."""

from __future__ import annotations

import logging

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.http_exceptions import InvalidHeader

from gateway.errors import GatewayError, error_response
from gateway.server.app import create_app, runner_for
from tests.support.stack import policy_for


def test_a_lone_surrogate_in_a_message_is_escaped_not_a_crash() -> None:
    """aiohttp keeps a client's non-UTF-8 header byte as a lone surrogate (surrogateescape); orjson
    refuses those, so an error echoing such a name once failed to render (a 500)."""
    resp = error_response(GatewayError(400, "unknown field 'a\udcffb'", param="a\udcffb", code="x"))
    assert resp.status == 400
    assert orjson.loads(resp.body)["error"] == {  # type: ignore[arg-type]
        "message": "unknown field 'a\\udcffb'",
        "type": "invalid_request_error",
        "param": "a\\udcffb",
        "code": "x",
    }


async def test_a_malformed_body_a_handler_reads_is_a_400_logged_nowhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """aiohttp's ``BadHttpMessage`` (``InvalidHeader``, ``LineTooLong``) escaping a handler is the
    client's fault: a 400 in fixed words; its message (the client's bytes) reaches no log."""
    policy = policy_for(["http://127.0.0.1:9"], health={"enabled": False})
    app = create_app(policy, secret=b"s")

    async def reads_a_bad_part(_request: web.Request) -> web.Response:
        raise InvalidHeader(b"CLIENTBYTES: form-data; name=\x01")

    app.router.add_post("/test/bad-part", reads_a_bad_part)
    runner = runner_for(app, policy)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        with caplog.at_level(logging.DEBUG):
            async with (
                aiohttp.ClientSession() as s,
                s.post(f"http://127.0.0.1:{port}/test/bad-part", data=b"x") as r,
            ):
                status, body = r.status, await r.json()
    finally:
        await runner.cleanup()
    assert status == 400 and body["error"]["type"] == "invalid_request_error", body
    assert "CLIENTBYTES" not in caplog.text and "CLIENTBYTES" not in orjson.dumps(body).decode()
