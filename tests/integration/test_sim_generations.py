"""The simulator's per-generation record (``GET /sim/generations``), over real sockets: what a billing
test compares a ledger with (request id in, prompt and generated tokens out, how the generation ended)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sim import Fleet, SimConfig, start_replicas

SLOW_DECODE = {"mode": "simple", "speed": 1.0, "overhead_s": 0.0, "decode_s_per_token": 0.05}


@pytest.fixture(params=["simple", "engine"])
async def sim(request: pytest.FixtureRequest) -> AsyncIterator[Fleet]:
    cfg = {**SLOW_DECODE, "mode": request.param}
    fleet = await start_replicas([SimConfig(**cfg)], base_port=0)
    yield fleet
    await fleet.stop()


async def generations(s: aiohttp.ClientSession, url: str) -> list[dict[str, Any]]:
    async with s.get(url + "/sim/generations") as r:
        assert r.status == 200
        return await r.json()


async def until(s: aiohttp.ClientSession, url: str, outcome: str, n: int = 1) -> list[dict[str, Any]]:
    """The records once ``n`` of them ended with ``outcome`` (bounded: 5 s)."""
    deadline = time.monotonic() + 5.0
    while True:
        records = await generations(s, url)
        if sum(r["outcome"] == outcome for r in records) >= n:
            return records
        assert time.monotonic() < deadline, records
        await asyncio.sleep(0.01)


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-llama", "messages": [{"role": "user", "content": content}], **extra}


async def test_a_completed_and_an_abandoned_stream_are_recorded_by_request_id(sim: Fleet) -> None:
    url = sim.urls[0]
    async with aiohttp.ClientSession() as s:
        body = chat("a whole answer", max_tokens=4, stream=True, stream_options={"include_usage": True})
        async with s.post(url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "g-1"}) as r:
            raw = await r.read()
        assert raw.endswith(b"data: [DONE]\n\n")
        body = chat("a long answer nobody waits for", max_tokens=400, stream=True)
        r = await s.post(url + "/v1/chat/completions", json=body, headers={"X-Request-Id": "g-2"})
        await r.content.readline()  # the stream has started
        r.close()  # the client goes away
        records = await until(s, url, "aborted")
        # A request the replica refuses (no model) is no generation.
        async with s.post(url + "/v1/chat/completions", json={**chat("x"), "model": "nope"}) as r:
            assert r.status == 404
        assert len(await generations(s, url)) == 2
    done, cut = records
    assert (done["request_id"], done["outcome"], done["finish_reason"]) == ("g-1", "completed", "length")
    assert done["completion_tokens"] == 4 and done["stream"] is True
    assert done["prompt_tokens"] > 0
    assert (cut["request_id"], cut["outcome"]) == ("g-2", "aborted")
    assert 0 <= cut["completion_tokens"] < 400
    counters = sim.replicas[0].counters
    assert counters.generation_tokens == done["completion_tokens"] + cut["completion_tokens"]
    assert counters.cancelled == 1


async def test_the_record_agrees_with_the_usage_the_replica_sent(sim: Fleet) -> None:
    url = sim.urls[0]
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/chat/completions", json=chat("count me", max_tokens=3)) as r:
            usage = (await r.json())["usage"]
        (record,) = await until(s, url, "completed")
        assert record["request_id"] is None  # none was sent
        assert (record["prompt_tokens"], record["completion_tokens"], record["cached_tokens"]) == (
            usage["prompt_tokens"],
            usage["completion_tokens"],
            usage["prompt_tokens_details"]["cached_tokens"],
        )
        async with s.post(url + "/sim/reset") as r:
            assert r.status == 200
        assert await generations(s, url) == []


async def test_a_replica_abort_and_a_dropped_connection_say_so(sim: Fleet) -> None:
    url = sim.urls[0]
    async with aiohttp.ClientSession() as s:
        async with s.post(url + "/sim/faults", json={"abort_after": 2}) as r:
            assert r.status == 200
        simple = sim.replicas[0].cfg.mode == "simple"  # the abort fault is the simple model's
        async with s.post(url + "/v1/chat/completions", json=chat("abort", max_tokens=9)) as r:
            assert (await r.json())["choices"][0]["finish_reason"] == ("abort" if simple else "length")
        async with s.post(url + "/sim/faults", json={"drop_mid_stream_after": 3}) as r:
            assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with s.post(
                url + "/v1/chat/completions", json=chat("drop", max_tokens=9, stream=True)
            ) as r:
                await r.read()
        aborted, dropped = await until(s, url, "dropped")
    if simple:
        assert (aborted["outcome"], aborted["finish_reason"], aborted["completion_tokens"]) == (
            "completed",
            "abort",
            2,
        )
    assert dropped["outcome"] == "dropped" and dropped["completion_tokens"] < 9


def counter_values(text: str) -> tuple[float, float]:
    values = {}
    for line in text.splitlines():
        for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"):
            if line.startswith(name + "{") or line.startswith(name + " "):
                values[name] = values.get(name, 0.0) + float(line.rsplit(" ", 1)[1])
    return values["vllm:prompt_tokens_total"], values["vllm:generation_tokens_total"]


async def test_the_token_counters_are_the_sums_of_the_generation_records(sim: Fleet) -> None:
    """What usage reconciliation relies on: ``vllm:prompt_tokens_total`` and
    ``vllm:generation_tokens_total`` add up the records of every generation, however it ended
    (completed whole or streamed, aborted by the client, dropped, malformed)."""
    url = sim.urls[0]
    async with aiohttp.ClientSession() as s:
        for i, extra in enumerate(
            ({"stream": True, "max_tokens": 5}, {"max_tokens": 5}, {"stream": True, "max_tokens": 2})
        ):
            async with s.post(url + "/v1/chat/completions", json=chat(f"whole {i}", **extra)) as r:
                await r.read()
        r = await s.post(url + "/v1/chat/completions", json=chat("left", max_tokens=400, stream=True))
        await r.content.readline()
        await r.content.readline()
        r.close()
        await until(s, url, "aborted")
        async with s.post(url + "/sim/faults", json={"drop_mid_stream_after": 3}) as r:
            assert r.status == 200
        with pytest.raises(aiohttp.ClientError):
            async with s.post(
                url + "/v1/chat/completions", json=chat("drop", max_tokens=9, stream=True)
            ) as r:
                await r.read()
        async with s.post(url + "/sim/faults", json={"malformed": True}) as r:
            assert r.status == 200
        async with s.post(url + "/v1/chat/completions", json=chat("broken", max_tokens=9)) as r:
            await r.read()
        async with s.post(url + "/sim/faults", json={}) as r:
            assert r.status == 200
        records = await until(s, url, "malformed")
        async with s.get(url + "/metrics") as r:
            prompt, generation = counter_values(await r.text())
    assert {r["outcome"] for r in records} == {"completed", "aborted", "dropped", "malformed"}
    assert prompt == sum(r["prompt_tokens"] for r in records)
    assert generation == sum(r["completion_tokens"] for r in records)
