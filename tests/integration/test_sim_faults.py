"""Fault knobs and client disconnects of the simulated replica, over real sockets."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from sim import Faults, Fleet, SimConfig, start_replicas

SLOW_DECODE = {
    "mode": "simple",
    "speed": 1.0,
    "overhead_s": 0.0,
    "prefill_s_per_token": 0.0,
    "decode_s_per_token": 0.05,
}


def chat(content: str = "hello", **extra: Any) -> dict[str, Any]:
    return {"model": "sim-llama", "messages": [{"role": "user", "content": content}], **extra}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        yield s


@pytest.fixture
async def sim() -> AsyncIterator[Fleet]:
    fleet = await start_replicas([SimConfig(speed=0.0)], base_port=0)
    yield fleet
    await fleet.stop()


async def set_faults(session: aiohttp.ClientSession, url: str, faults: dict[str, Any]) -> dict[str, Any]:
    async with session.post(url + "/sim/faults", json=faults) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def stats(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/sim/stats") as r:
        return await r.json()


async def wait_stats(session: aiohttp.ClientSession, url: str, **want: int) -> dict[str, Any]:
    """Poll /sim/stats (bounded: 3 s) until it shows ``want``."""
    st: dict[str, Any] = {}
    for _ in range(300):
        st = await stats(session, url)
        if all(st[k] == v for k, v in want.items()):
            return st
        await asyncio.sleep(0.01)
    raise AssertionError(f"stats never reached {want}: {st}")


async def read_events(
    resp: aiohttp.ClientResponse, limit: int, events: list[bytes] | None = None
) -> list[bytes]:
    """Up to ``limit`` SSE events (raw ``data: ...`` payloads) from a streaming response, into ``events``."""
    events = [] if events is None else events
    while len(events) < limit:
        line = await resp.content.readline()
        if not line:
            break
        if line.startswith(b"data: "):
            events.append(line[6:].rstrip(b"\n"))
    return events


async def test_fail_status_answers_every_request_then_clears(
    sim: Fleet, session: aiohttp.ClientSession
) -> None:
    url = sim.urls[0]
    assert (await set_faults(session, url, {"fail_status": 503}))["fail_status"] == 503
    for path, body in (("/v1/chat/completions", chat()), ("/v1/completions", {"prompt": "x"})):
        async with session.post(url + path, json=body) as r:
            assert r.status == 503
            assert r.headers["Retry-After"] == "1"
            assert (await r.json())["error"]["code"] == 503
    async with session.post(url + "/v1/chat/completions", json=chat(stream=True)) as r:
        assert r.status == 503
    assert (await set_faults(session, url, {}))["fail_status"] is None
    async with session.post(url + "/v1/chat/completions", json=chat()) as r:
        assert r.status == 200
    st = await stats(session, url)
    assert st["requests"] == 4 and st["errors"] == 3


async def test_faults_in_simconfig_and_bad_fault_json(session: aiohttp.ClientSession) -> None:
    fleet = await start_replicas([SimConfig(speed=0, faults=Faults(fail_status=429))], base_port=0)
    try:
        url = fleet.urls[0]
        async with session.post(url + "/v1/chat/completions", json=chat()) as r:
            assert r.status == 429
            assert (await r.json())["error"]["type"] == "RateLimitError"
        for bad in ({"hang": "yes"}, {"unknown": 1}, [1]):
            async with session.post(url + "/sim/faults", json=bad) as r:
                assert r.status == 400
        async with session.get(url + "/sim/faults") as r:
            assert (await r.json())["fail_status"] == 429  # unchanged by the rejected updates
    finally:
        await fleet.stop()


async def test_health_status_fault(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    await set_faults(session, url, {"health_status": 503})
    async with session.get(url + "/health") as r:
        assert r.status == 503
    await set_faults(session, url, {})
    async with session.get(url + "/health") as r:
        assert r.status == 200


async def test_hang_until_the_client_goes_away(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    await set_faults(session, url, {"hang": True})
    with pytest.raises(asyncio.TimeoutError):
        async with session.post(
            url + "/v1/chat/completions", json=chat(), timeout=aiohttp.ClientTimeout(total=0.3)
        ) as r:
            await r.read()
    st = await wait_stats(session, url, cancelled=1)
    assert st["completed"] == 0


async def test_drop_mid_stream_after_n_events(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    await set_faults(session, url, {"drop_mid_stream_after": 3})
    got: list[bytes] = []
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(url + "/v1/chat/completions", json=chat(stream=True, max_tokens=10)) as r:
            assert r.status == 200
            await read_events(r, 100, got)  # the chunked body never ends properly
    assert len(got) == 3 and b"[DONE]" not in got
    assert all(orjson.loads(e)["object"] == "chat.completion.chunk" for e in got)
    st = await wait_stats(session, url, dropped=1, running=0)
    assert st["completed"] == 0 and st["cancelled"] == 0


async def test_drop_truncates_a_non_stream_answer(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    await set_faults(session, url, {"drop_mid_stream_after": 0})
    with pytest.raises(aiohttp.ClientPayloadError):
        async with session.post(url + "/v1/chat/completions", json=chat()) as r:
            await r.read()
    await wait_stats(session, url, dropped=1)
    await set_faults(session, url, {})
    async with session.post(url + "/v1/chat/completions", json=chat()) as r:
        assert r.status == 200 and (await r.json())["object"] == "chat.completion"


async def test_slow_factor_multiplies_delays(session: aiohttp.ClientSession) -> None:
    cfg = SimConfig(
        mode="simple", speed=1.0, overhead_s=0.05, prefill_s_per_token=0.0, decode_s_per_token=0.0
    )
    fleet = await start_replicas([cfg], base_port=0)
    try:
        url = fleet.urls[0]
        await set_faults(session, url, {"slow_factor": 10})
        t0 = time.perf_counter()
        async with session.post(url + "/v1/chat/completions", json=chat(max_tokens=1)) as r:
            assert r.status == 200
        assert time.perf_counter() - t0 >= 0.5
    finally:
        await fleet.stop()


async def test_malformed_non_stream_and_stream(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    await set_faults(session, url, {"malformed": True})
    async with session.post(url + "/v1/chat/completions", json=chat()) as r:
        assert r.status == 200 and r.content_type == "application/json"
        raw = await r.read()
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(raw)
    async with session.post(url + "/v1/chat/completions", json=chat(stream=True)) as r:
        assert r.status == 200 and r.content_type == "text/event-stream"
        text = (await r.read()).decode()
    payloads = [b[6:] for b in text.split("\n\n") if b.startswith("data: ") and b != "data: [DONE]"]
    assert payloads
    with pytest.raises(orjson.JSONDecodeError):
        for p in payloads:
            orjson.loads(p)


async def test_client_disconnect_mid_stream_is_counted_and_frees_the_slot(
    session: aiohttp.ClientSession,
) -> None:
    fleet = await start_replicas([SimConfig(**SLOW_DECODE)], base_port=0)
    try:
        url = fleet.urls[0]
        r = await session.post(url + "/v1/chat/completions", json=chat(stream=True, max_tokens=200))
        assert r.status == 200
        assert len(await read_events(r, 3)) == 3
        assert (await stats(session, url))["running"] == 1
        r.close()  # drop the connection mid-stream (200 tokens would take 10 s)
        st = await wait_stats(session, url, cancelled=1, running=0)
        assert st["completed"] == 0 and 2 <= st["generation_tokens"] < 200  # role chunk + 2 tokens read
        # The replica still serves.
        async with session.post(url + "/v1/chat/completions", json=chat(max_tokens=1)) as ok:
            assert ok.status == 200
    finally:
        await fleet.stop()


async def test_client_disconnect_while_queued_is_counted(session: aiohttp.ClientSession) -> None:
    fleet = await start_replicas([SimConfig(**SLOW_DECODE, max_num_seqs=1)], base_port=0)
    try:
        url = fleet.urls[0]
        first = await session.post(url + "/v1/chat/completions", json=chat(stream=True, max_tokens=100))
        queued = asyncio.create_task(session.post(url + "/v1/chat/completions", json=chat("second")))
        await wait_stats(session, url, running=1, waiting=1)
        queued.cancel()
        await asyncio.gather(queued, return_exceptions=True)
        st = await wait_stats(session, url, cancelled=1, waiting=0)
        assert st["running"] == 1
        first.close()
        await wait_stats(session, url, cancelled=2, running=0)
    finally:
        await fleet.stop()


async def test_stop_ends_hung_requests(session: aiohttp.ClientSession) -> None:
    fleet = await start_replicas([SimConfig(speed=0, faults=Faults(hang=True))], base_port=0)
    task = asyncio.create_task(session.post(fleet.urls[0] + "/v1/chat/completions", json=chat()))
    await wait_stats(session, fleet.urls[0], requests=1)
    t0 = time.perf_counter()
    await fleet.stop()
    assert time.perf_counter() - t0 < 5  # bounded by the runner's shutdown timeout, not the hang limit
    with pytest.raises(aiohttp.ClientError):
        await task


async def test_faults_are_per_replica_even_with_a_shared_config(session: aiohttp.ClientSession) -> None:
    shared = SimConfig(speed=0)
    fleet = await start_replicas([shared, shared], base_port=0)
    try:
        await set_faults(session, fleet.urls[0], {"fail_status": 500})
        async with session.post(fleet.urls[0] + "/v1/chat/completions", json=chat()) as r:
            assert r.status == 500
        async with session.post(fleet.urls[1] + "/v1/chat/completions", json=chat()) as r:
            assert r.status == 200
        assert shared.faults.fail_status is None
    finally:
        await fleet.stop()


async def test_a_replica_whose_kv_is_smaller_than_its_context_refuses_what_cannot_fit(
    session: aiohttp.ClientSession,
) -> None:
    """8 blocks of 16 tokens under the default max_model_len: the context is the KV's 128 tokens, a longer
    request is the context-length 400 at once (before, it waited for blocks forever), a short one is served."""
    fleet = await start_replicas([SimConfig(speed=0.0, kv_capacity_blocks=8, block_size=16)], base_port=0)
    try:
        url = fleet.urls[0] + "/v1/chat/completions"
        async with session.post(url, json=chat("word " * 400, max_tokens=4)) as r:
            body = await r.json()
            assert r.status == 400, body
            assert "maximum context length is 128 tokens" in body["error"]["message"]
        async with session.post(url, json=chat("hello", max_tokens=4)) as r:
            assert r.status == 200, await r.text()
    finally:
        await fleet.stop()
