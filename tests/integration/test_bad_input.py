"""Every bad input answers an OpenAI-format error with the right status; the gateway keeps serving."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

import gateway.pipeline.handler as handler_module
from gateway.observability.logs import JsonFormatter
from tests.support.stack import gateway, policy_for, sim_fleet, sim_requests

GOOD = b'{"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}]}'


def assert_openai_error(body: dict, code: str | None = None, param: str | None = None) -> None:
    assert set(body) == {"error"}
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    if code is not None:
        assert err["code"] == code, err
    if param is not None:
        assert err["param"] == param, err


CASES = [
    # (name, path, raw body, content type, status, code, param)
    ("invalid json", "/v1/chat/completions", b'{"model": ', "application/json", 400, "invalid_json", None),
    ("empty body", "/v1/chat/completions", b"", "application/json", 400, "invalid_json", None),
    ("not an object", "/v1/chat/completions", b"[1, 2]", "application/json", 400, "invalid_json", None),
    (
        "non utf-8",
        "/v1/chat/completions",
        b'{"model": "\xff\xfe"}',
        "application/json",
        400,
        "invalid_encoding",
        None,
    ),
    (
        "missing model",
        "/v1/chat/completions",
        b'{"messages": [{"role": "user", "content": "x"}]}',
        "application/json",
        400,
        "missing_required_parameter",
        "model",
    ),
    (
        "model wrong type",
        "/v1/chat/completions",
        b'{"model": 5, "messages": []}',
        "application/json",
        400,
        "invalid_request",
        "model",
    ),
    (
        "missing messages",
        "/v1/chat/completions",
        b'{"model": "sim-llama"}',
        "application/json",
        400,
        "missing_required_parameter",
        "messages",
    ),
    (
        "messages not a list",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "messages": "hi"}',
        "application/json",
        400,
        "invalid_request",
        "messages",
    ),
    (
        "message without role",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "messages": [{"content": "x"}]}',
        "application/json",
        400,
        "invalid_request",
        "messages[0].role",
    ),
    (
        "content wrong type",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "messages": [{"role": "user", "content": 7}]}',
        "application/json",
        400,
        "invalid_request",
        "messages[0].content",
    ),
    (
        "stream not bool",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "stream": "yes", "messages": [{"role": "user", "content": "x"}]}',
        "application/json",
        400,
        "invalid_request",
        "stream",
    ),
    (
        "max_tokens zero",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}',
        "application/json",
        400,
        "invalid_request",
        "max_tokens",
    ),
    (
        "temperature string",
        "/v1/chat/completions",
        b'{"model": "sim-llama", "temperature": "hot", "messages": [{"role": "user", "content": "x"}]}',
        "application/json",
        400,
        "invalid_request",
        "temperature",
    ),
    (
        "missing prompt",
        "/v1/completions",
        b'{"model": "sim-llama"}',
        "application/json",
        400,
        "missing_required_parameter",
        "prompt",
    ),
    (
        "prompt wrong type",
        "/v1/completions",
        b'{"model": "sim-llama", "prompt": {"a": 1}}',
        "application/json",
        400,
        "invalid_request",
        "prompt",
    ),
    (
        "missing input",
        "/v1/embeddings",
        b'{"model": "sim-llama"}',
        "application/json",
        400,
        "missing_required_parameter",
        "input",
    ),
    (
        "unknown model",
        "/v1/chat/completions",
        b'{"model": "gpt-17", "messages": [{"role": "user", "content": "x"}]}',
        "application/json",
        404,
        "model_not_found",
        "model",
    ),
    ("wrong content type", "/v1/chat/completions", GOOD, "text/plain", 415, "unsupported_media_type", None),
    (
        "form content type",
        "/v1/chat/completions",
        GOOD,
        "application/x-www-form-urlencoded",
        415,
        "unsupported_media_type",
        None,
    ),
]


@pytest.fixture
async def stack():
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls, limits={"max_body_bytes": 4096, "max_prompt_chars": 1000, "max_header_bytes": 2048}
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as session:
            yield gw, session


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
async def test_bad_input(stack, case) -> None:
    gw, session = stack
    _, path, raw, ctype, status, code, param = case
    async with session.post(gw.url + path, data=raw, headers={"Content-Type": ctype}) as r:
        assert r.status == status, await r.text()
        assert r.headers["Content-Type"].startswith("application/json")
        assert_openai_error(await r.json(), code, param)
    # The gateway still serves after every bad input.
    async with session.post(
        gw.url + "/v1/chat/completions", data=GOOD, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200


async def test_body_over_limit_is_413(stack) -> None:
    gw, session = stack
    big = b'{"model": "sim-llama", "messages": [{"role": "user", "content": "' + b"x" * 5000 + b'"}]}'
    async with session.post(
        gw.url + "/v1/chat/completions", data=big, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 413
        assert_openai_error(await r.json(), "body_too_large")


async def test_chunked_body_over_limit_is_413(stack) -> None:
    """No Content-Length: the limit still holds while reading."""
    gw, session = stack

    async def gen():
        yield b'{"model": "sim-llama", "messages": [{"role": "user", "content": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}]}'

    async with session.post(
        gw.url + "/v1/chat/completions", data=gen(), headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 413
        assert_openai_error(await r.json(), "body_too_large")


async def test_prompt_over_limit_is_400(stack) -> None:
    gw, session = stack
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": "z" * 1500}]}
    async with session.post(gw.url + "/v1/chat/completions", json=body) as r:
        assert r.status == 400
        assert_openai_error(await r.json(), "prompt_too_long")


async def test_header_over_limit_is_431_in_openai_format_without_echoing_it(stack, caplog) -> None:
    gw, session = stack
    secret = "sk-" + "s" * 4000
    async with session.post(
        gw.url + "/v1/chat/completions",
        data=GOOD,
        headers={"Content-Type": "application/json", "x-big": secret},
    ) as r:
        assert r.status == 431
        body = await r.json()
        assert_openai_error(body, "header_too_large")
        assert "sss" not in body["error"]["message"]
    assert "sss" not in caplog.text  # the log line carries neither the header nor a traceback
    async with session.post(
        gw.url + "/v1/chat/completions", data=GOOD, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 200


async def test_malformed_http_is_400_in_openai_format(stack) -> None:
    gw, _ = stack
    host, port = gw.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    await writer.drain()
    raw = await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.") and b" 400 " in head.split(b"\r\n")[0]
    assert_openai_error(orjson.loads(body), "bad_http_request")


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1/chat/completions", 405, "method_not_allowed"),
        ("PUT", "/v1/completions", 405, "method_not_allowed"),
        ("POST", "/v1/nope", 404, "not_found"),
    ],
)
async def test_wrong_method_or_path(stack, method: str, path: str, status: int, code: str) -> None:
    gw, session = stack
    async with session.request(method, gw.url + path) as r:
        assert r.status == status
        assert_openai_error(await r.json(), code)


async def test_limits_on_messages_and_sequences_are_named_and_answered_in_openai_shape() -> None:
    """Issue 19, item 1: ``limits.max_messages`` and ``limits.max_n`` (``n=1000000`` was forwarded)."""
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, limits={"max_messages": 8, "max_n": 4})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:

            async def ask(**body: object) -> tuple[int, dict]:
                payload = {"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], **body}
                async with s.post(gw.url + "/v1/chat/completions", json=payload) as r:
                    return r.status, await r.json()

            many = [{"role": "user", "content": "m"}] * 9
            status, body = await ask(messages=many)
            assert status == 400
            assert_openai_error(body, "too_many_messages", "messages")
            assert "9" in body["error"]["message"] and "8" in body["error"]["message"]
            assert (await ask(messages=many[:8]))[0] == 200
            for name in ("n", "best_of"):
                status, body = await ask(**{name: 1_000_000})
                assert status == 400
                assert_openai_error(body, "too_many_sequences", name)
            assert (await ask(n=4))[0] == 200
            received = await sim_requests(fleet.urls[0])
            assert all(r.get("n", 1) <= 4 and len(r["messages"]) <= 8 for r in received)


async def test_the_default_limits_refuse_the_issue_body_before_any_work() -> None:
    """The 3.9 MB body of 100,000 messages is answered 400 by the gateway (2,048 messages at most, as
    OpenAI's API), before it is rendered, hashed, keyed or sent anywhere."""
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        body = {"model": "sim-llama", "messages": [{"role": "user", "content": "hello"}] * 100_000}
        async with s.post(
            gw.url + "/v1/chat/completions",
            data=orjson.dumps(body),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 400
            assert_openai_error(await r.json(), "too_many_messages", "messages")
        assert await sim_requests(fleet.urls[0]) == []


async def test_an_unhandled_error_is_a_500_whose_log_names_the_code_not_the_clients_text(
    stack, caplog, monkeypatch
) -> None:
    """A bug whose exception message carries the request's text (here a prompt with an SSN) answers
    500 in OpenAI's shape; the log line gives the exception's type and where it was raised, never its
    message (logger.exception wrote the whole message, and so the client's text, into the log)."""
    gw, session = stack
    secret = "my ssn is 078-05-1120"

    async def broken_parse(*_args, **_kwargs):
        raise RuntimeError(secret) from KeyError(secret)

    monkeypatch.setattr(handler_module, "parse_request", broken_parse)
    async with session.post(
        gw.url + "/v1/chat/completions", data=GOOD, headers={"Content-Type": "application/json"}
    ) as r:
        assert r.status == 500
        assert_openai_error(await r.json(), "internal_error")
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "unhandled"]
    assert record.exc_type == "RuntimeError" and "broken_parse" in record.traceback
    assert "KeyError" in record.traceback  # the chain, by type
    logged = caplog.text + JsonFormatter().format(record)
    assert "078-05-1120" not in logged and "ssn" not in logged
