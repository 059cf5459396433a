"""Issue 19, item 8: truthful outcomes.

- An error a replica answers reaches the client in OpenAI's shape, with the replica's status and
  message (vLLM and SGLang answer ``"type": "BadRequestError", "code": 400``).
- A stream the replica cuts ends with an error event that carries no aiohttp internals.
- A stream (or answer) that vLLM ends with ``finish_reason: "abort"`` is logged and counted as aborted,
  and never stored in the response cache.
- A ledger write that fails logs a warning (rate-limited), not only the recovery.
"""

from __future__ import annotations

import logging

import aiohttp
import openai
import orjson
import pytest

from gateway.pipeline.protocols.base import replica_error
from tests.fault.support import chat, gateway_with, post
from tests.support.redis_server import RedisServer
from tests.support.stack import policy_for, sim_faults, sim_fleet

ONE_TRY = {"max_attempts": 1}


def sse_events(raw: bytes) -> list[bytes]:
    return [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e.startswith(b"data: ")]


async def test_a_replica_error_keeps_its_status_and_message_in_openai_shape() -> None:
    async with (
        sim_fleet(1, max_model_len=64) as fleet,
        gateway_with(policy_for(fleet.urls, retries=ONE_TRY)) as gw,
    ):
        client = openai.AsyncOpenAI(base_url=gw.url + "/v1", api_key="EMPTY", max_retries=0)
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="sim-llama", messages=[{"role": "user", "content": "long " * 200}]
            )
        err = info.value
        assert err.status_code == 400
        assert err.type == "invalid_request_error" and err.code is None
        assert "maximum context length is 64 tokens" in err.message
        body = orjson.loads(err.response.content)
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}
        assert "BadRequestError" not in err.response.text
        assert err.response.headers["x-gateway-replica"] == "r0"

        await sim_faults(fleet.urls[0], {"fail_status": 500})
        with pytest.raises(openai.InternalServerError) as info:
            await client.chat.completions.create(
                model="sim-llama", messages=[{"role": "user", "content": "x"}]
            )
        assert info.value.status_code == 500 and info.value.type == "server_error"
        assert "simulated failure 500" in info.value.message
        await client.close()


def test_replica_error_shapes_of_vllm_sglang_and_others() -> None:
    vllm = b'{"error": {"message": "bad n", "type": "BadRequestError", "param": "n", "code": 400}}'
    assert replica_error(400, vllm).body() == {
        "error": {"message": "bad n", "type": "invalid_request_error", "param": "n", "code": None}
    }
    sglang = (
        b'{"object": "error", "message": "too long", "type": "BadRequestError", "param": null, "code": 400}'
    )
    assert replica_error(400, sglang).body()["error"]["message"] == "too long"
    openai_like = (
        b'{"error": {"message": "m", "type": "invalid_request_error", "param": null, "code": "x_y"}}'
    )
    assert replica_error(400, openai_like).body()["error"]["code"] == "x_y"
    html = b"<html><body>502 Bad Gateway</body></html>"
    err = replica_error(502, html)
    assert err.status == 502 and err.body()["error"]["message"] == "the replica answered 502"
    assert replica_error(429, b"{}").body()["error"]["type"] == "rate_limit_error"


async def test_a_stream_the_replica_cuts_ends_with_an_error_event_without_internals() -> None:
    async with sim_fleet(1) as fleet, gateway_with(policy_for(fleet.urls, retries=ONE_TRY)) as gw:
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 2})
        async with aiohttp.ClientSession() as s:
            status, _, raw = await post(s, gw.url, chat("cut me", stream=True))
        assert status == 200
        err = orjson.loads(sse_events(raw)[-1])["error"]
        assert err["code"] == "upstream_stream_error"
        for internal in (
            "TransferEncodingError",
            "ClientPayloadError",
            "payload",
            "aiohttp",
            "transfer length",
        ):
            assert internal not in err["message"], err["message"]
        assert err["message"] == "the replica's stream broke off before its end: the connection closed early"


@pytest.mark.parametrize("stream", [True, False])
async def test_an_answer_vllm_aborted_is_logged_counted_and_not_cached(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="prefix_gateway")
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, retries=ONE_TRY, cache={"enabled": True})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            await sim_faults(fleet.urls[0], {"abort_after": 2})
            body = chat("abort me", stream=stream, temperature=0, max_tokens=8)
            status, headers, raw = await post(s, gw.url, body)
            assert status == 200
            if stream:
                events = sse_events(raw)
                assert events[-1] == b"[DONE]"
                finishes = [
                    c["choices"][0]["finish_reason"] for c in map(orjson.loads, events[:-1]) if c["choices"]
                ]
            else:
                finishes = [c["finish_reason"] for c in orjson.loads(raw)["choices"]]
            assert "abort" in finishes
            async with s.get(gw.metrics_url + "/metrics") as r:
                text = await r.text()
            assert 'prefix_gateway_upstream_errors_total{kind="aborted",replica="r0"} 1.0' in text
            assert any(getattr(rec, "event", None) == "upstream_aborted" for rec in caplog.records)
            await sim_faults(fleet.urls[0], {})
            _, again, _ = await post(s, gw.url, body)
            assert (
                headers["x-cache"] == "miss" and again["x-cache"] == "miss"
            )  # the aborted one was not stored


async def test_ledger_write_failures_log_a_rate_limited_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="prefix_gateway")
    server = RedisServer()
    server.start()
    try:
        async with sim_fleet(1) as fleet:
            policy = policy_for(fleet.urls, redis={"url": server.url}, billing={"ledger": {"kind": "redis"}})
            async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
                assert (await post(s, gw.url, chat("before")))[0] == 200
                server.stop()
                for i in range(5):
                    assert (await post(s, gw.url, chat(f"during {i}")))[0] == 200
                warnings = [r for r in caplog.records if getattr(r, "event", None) == "ledger_write_failed"]
                assert len(warnings) == 1, [r.getMessage() for r in warnings]  # one line per interval
                assert warnings[0].levelno == logging.WARNING and warnings[0].pending >= 1
                assert "during" not in warnings[0].getMessage()
    finally:
        server.stop()
