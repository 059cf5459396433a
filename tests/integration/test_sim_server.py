"""The simulated replica over real sockets: prefix cache, queueing, wire formats, bookkeeping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from sim import Fleet, SimConfig, start_replicas

FAST = {"speed": 0.0, "mode": "simple"}


def parse_sse(text: str) -> list[Any]:
    """Events of an SSE body: parsed JSON objects, and the string "[DONE]"."""
    assert text.endswith("\n\n"), "an SSE body ends with a blank line"
    events: list[Any] = []
    for block in text.split("\n\n")[:-1]:
        assert block.startswith("data: "), block
        data = block[len("data: ") :]
        events.append("[DONE]" if data == "[DONE]" else orjson.loads(data))
    return events


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": "sim-llama", "messages": [{"role": "user", "content": content}], **extra}


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as s:
        yield s


async def start(**cfg: Any) -> Fleet:
    return await start_replicas([SimConfig(**{**FAST, **cfg})], base_port=0)


@pytest.fixture
async def sim() -> AsyncIterator[Fleet]:
    fleet = await start()
    yield fleet
    await fleet.stop()


async def post(
    session: aiohttp.ClientSession, url: str, body: Any, path: str = "/v1/chat/completions"
) -> Any:
    async with session.post(url + path, json=body) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def stats(session: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with session.get(url + "/sim/stats") as r:
        return await r.json()


# ---------------------------------------------------------------- prefix cache


async def test_repeated_prompt_hits_whole_blocks(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    body = chat("tell me about prefix caching " * 20, temperature=0)
    first = await post(session, url, body)
    second = await post(session, url, body)
    prompt_tokens = first["usage"]["prompt_tokens"]
    assert prompt_tokens > 32
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached > 0 and cached % 16 == 0
    assert cached == prompt_tokens // 16 * 16  # every full block, not the partial tail
    st = await stats(session, url)
    assert st["requests"] == 2 and st["cached_tokens"] == cached and st["prompt_tokens"] == 2 * prompt_tokens


async def test_next_turn_hits_the_previous_turn(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    turn1 = [
        {"role": "system", "content": "You are a helpful assistant. " * 10},
        {"role": "user", "content": "hi"},
    ]
    r1 = await post(session, url, {"messages": turn1})
    turn2 = [*turn1, {"role": "assistant", "content": r1["choices"][0]["message"]["content"]}]
    turn2.append({"role": "user", "content": "and then?"})
    r2 = await post(session, url, {"messages": turn2})
    assert r2["usage"]["prompt_tokens_details"]["cached_tokens"] == r1["usage"]["prompt_tokens"] // 16 * 16


async def test_no_hit_across_cache_salts(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    text = "a shared system prompt " * 20
    await post(session, url, chat(text, cache_salt="tenant-a"))
    other = await post(session, url, chat(text, cache_salt="tenant-b"))
    unsalted = await post(session, url, chat(text))
    same = await post(session, url, chat(text, cache_salt="tenant-a"))
    assert other["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert unsalted["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert same["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_lru_eviction_at_capacity(session: aiohttp.ClientSession) -> None:
    # Each prompt below is 4+ full blocks (16 tokens × 4 bytes = 64 bytes a block); capacity 8 blocks.
    fleet = await start(kv_capacity_blocks=8)
    try:
        url = fleet.urls[0]

        def prompt(c: str) -> dict[str, Any]:
            return {"prompt": c * 256, "max_tokens": 1}

        def cached(r: dict[str, Any]) -> int:
            return r["usage"]["prompt_tokens_details"]["cached_tokens"]

        await post(session, url, prompt("a"), "/v1/completions")
        await post(session, url, prompt("b"), "/v1/completions")
        assert cached(await post(session, url, prompt("a"), "/v1/completions")) == 64  # a is now warmest
        await post(session, url, prompt("c"), "/v1/completions")  # evicts b, the coldest
        assert cached(await post(session, url, prompt("a"), "/v1/completions")) == 64
        assert cached(await post(session, url, prompt("b"), "/v1/completions")) == 0
        st = await stats(session, url)
        assert st["kv_cached_blocks"] == 8 and st["kv_evictions"] >= 4
    finally:
        await fleet.stop()


async def test_token_id_prompts_are_cached_too(sim: Fleet, session: aiohttp.ClientSession) -> None:
    body = {"prompt": list(range(40)), "max_tokens": 2}
    await post(session, sim.urls[0], body, "/v1/completions")
    r = await post(session, sim.urls[0], body, "/v1/completions")
    assert r["usage"]["prompt_tokens"] == 40
    assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 32


# ---------------------------------------------------------------- queueing and latency


async def test_queueing_beyond_max_num_seqs(session: aiohttp.ClientSession) -> None:
    overhead = 0.25
    fleet = await start(
        speed=1.0, max_num_seqs=2, overhead_s=overhead, prefill_s_per_token=0.0, decode_s_per_token=0.0
    )
    try:
        url = fleet.urls[0]

        async def one(i: int) -> float:
            t0 = time.perf_counter()
            await post(session, url, chat(f"request {i}", max_tokens=1))
            return time.perf_counter() - t0

        tasks = [asyncio.create_task(one(i)) for i in range(6)]
        seen_waiting = 0.0
        for _ in range(100):  # bounded poll of the gauge while the queue drains
            async with session.get(url + "/metrics") as r:
                text = await r.text()
            line = next(x for x in text.splitlines() if x.startswith("vllm:num_requests_waiting{"))
            seen_waiting = max(seen_waiting, float(line.rsplit(" ", 1)[1]))
            if seen_waiting > 0:
                break
            await asyncio.sleep(0.01)
        latencies = sorted(await asyncio.gather(*tasks))
        assert seen_waiting > 0
        st = await stats(session, url)
        assert st["max_running_seen"] == 2
        assert st["max_waiting_seen"] >= 3
        assert (st["running"], st["waiting"]) == (0, 0)
        # Three waves of two: the last wave waited for two before it (sleeps are never shorter).
        assert latencies[0] >= overhead
        assert latencies[-1] >= 3 * overhead
        assert latencies[-1] > latencies[0] + overhead
    finally:
        await fleet.stop()


async def test_prefill_of_cached_tokens_is_skipped(session: aiohttp.ClientSession) -> None:
    # 2000 uncached tokens at 0.5 ms each take >= 1 s; the same prompt cached leaves < 16 tokens.
    fleet = await start(speed=1.0, prefill_s_per_token=0.0005, overhead_s=0.0, decode_s_per_token=0.0)
    try:
        body = {"prompt": "x" * 8000, "max_tokens": 1}
        t0 = time.perf_counter()
        await post(session, fleet.urls[0], body, "/v1/completions")
        cold = time.perf_counter() - t0
        assert cold >= 1.0
        r = await post(session, fleet.urls[0], body, "/v1/completions")
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 2000
        async with session.get(fleet.urls[0] + "/metrics") as resp:
            text = await resp.text()
        assert 'vllm:time_to_first_token_seconds_count{model_name="sim-llama"} 2.0' in text
    finally:
        await fleet.stop()


# ---------------------------------------------------------------- wire formats


async def test_non_stream_chat_shape(sim: Fleet, session: aiohttp.ClientSession) -> None:
    r = await post(session, sim.urls[0], chat("hello", max_tokens=5))
    assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-") and r["model"] == "sim-llama"
    (choice,) = r["choices"]
    assert choice["message"]["role"] == "assistant" and choice["finish_reason"] == "length"
    assert len(choice["message"]["content"].split()) == 5
    u = r["usage"]
    assert u["completion_tokens"] == 5 and u["total_tokens"] == u["prompt_tokens"] + 5
    assert "cached_tokens" in u["prompt_tokens_details"]


async def test_stream_chat_shape_with_usage(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    body = chat("stream me", max_tokens=7, temperature=0, stream=True, stream_options={"include_usage": True})
    async with session.post(url + "/v1/chat/completions", json=body) as r:
        assert r.status == 200
        assert r.headers["Content-Type"].startswith("text/event-stream")
        events = parse_sse(await r.text())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 7
    final = chunks[-2]["choices"][0]
    assert final["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-2])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1])
    plain = await post(session, url, chat("stream me", max_tokens=7, temperature=0))
    assert text == plain["choices"][0]["message"]["content"]


async def test_stream_without_usage_and_completions_stream(
    sim: Fleet, session: aiohttp.ClientSession
) -> None:
    url = sim.urls[0]
    async with session.post(url + "/v1/chat/completions", json=chat("x", stream=True, max_tokens=3)) as r:
        events = parse_sse(await r.text())
    assert events[-1] == "[DONE]" and all("usage" not in e for e in events[:-1])
    assert len(events) == 1 + 3 + 1 + 1  # role, tokens, finish, DONE
    body = {
        "prompt": "once upon a time",
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with session.post(url + "/v1/completions", json=body) as r:
        events = parse_sse(await r.text())
    assert events[-1] == "[DONE]"
    assert all(e["object"] == "text_completion" for e in events[:-1])
    assert events[-2]["usage"]["completion_tokens"] == 4
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert len("".join(e["choices"][0]["text"] for e in events[:-2]).split()) == 4


async def test_completions_non_stream_shape(sim: Fleet, session: aiohttp.ClientSession) -> None:
    r = await post(session, sim.urls[0], {"prompt": "abc", "max_tokens": 2}, "/v1/completions")
    assert r["object"] == "text_completion" and r["id"].startswith("cmpl-")
    assert len(r["choices"][0]["text"].split()) == 2 and r["usage"]["prompt_tokens"] == 1


async def test_max_tokens_and_default(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    assert (await post(session, url, chat("q")))["usage"]["completion_tokens"] == 16
    assert (await post(session, url, chat("q", max_tokens=3)))["usage"]["completion_tokens"] == 3
    r = await post(session, url, chat("q", max_tokens=3, max_completion_tokens=9))
    assert r["usage"]["completion_tokens"] == 9


async def test_text_is_deterministic_for_temperature_zero_or_seed(
    sim: Fleet, session: aiohttp.ClientSession
) -> None:
    url = sim.urls[0]

    async def text(**kw: Any) -> str:
        return (await post(session, url, chat("same prompt", **kw)))["choices"][0]["message"]["content"]

    assert await text(temperature=0) == await text(temperature=0)
    assert await text(temperature=0.9, seed=7) == await text(temperature=0.9, seed=7)
    assert await text(temperature=0.9, seed=7) != await text(temperature=0.9, seed=8)
    sampled = {await text(temperature=0.9) for _ in range(3)}
    assert len(sampled) == 3
    other_prompt = (await post(session, url, chat("other prompt", temperature=0)))["choices"][0]["message"]
    assert other_prompt["content"] != await text(temperature=0)


@pytest.mark.parametrize(
    ("path", "body", "status"),
    [
        ("/v1/chat/completions", {"model": "sim-llama"}, 400),
        ("/v1/chat/completions", {"model": "sim-llama", "messages": []}, 400),
        ("/v1/chat/completions", chat("x", max_tokens=0), 400),
        ("/v1/chat/completions", chat("x", max_tokens=40_000), 400),
        ("/v1/chat/completions", chat("x", temperature="hot"), 400),
        ("/v1/chat/completions", chat("x", cache_salt=""), 400),
        ("/v1/chat/completions", {**chat("x"), "model": "gpt-nope"}, 404),
        ("/v1/completions", {"model": "sim-llama"}, 400),
        ("/v1/completions", {"model": "nope", "prompt": "x"}, 404),
        ("/v1/embeddings", {"model": "sim-llama"}, 400),
        ("/v1/embeddings", {"model": "nope", "input": "x"}, 404),
    ],
)
async def test_invalid_requests_get_openai_errors(
    sim: Fleet, session: aiohttp.ClientSession, path: str, body: dict[str, Any], status: int
) -> None:
    async with session.post(sim.urls[0] + path, json=body) as r:
        assert r.status == status
        err = (await r.json())["error"]
    assert err["code"] == status and isinstance(err["message"], str) and err["type"]
    assert (await stats(session, sim.urls[0]))["errors"] == 1


async def test_invalid_json_is_400(sim: Fleet, session: aiohttp.ClientSession) -> None:
    async with session.post(sim.urls[0] + "/v1/chat/completions", data=b"{nope") as r:
        assert r.status == 400
        assert "error" in await r.json()
    async with session.post(sim.urls[0] + "/v1/chat/completions", data=b"[1]") as r:
        assert r.status == 400


async def test_model_is_optional_and_aliases_are_served(session: aiohttp.ClientSession) -> None:
    fleet = await start(models=("m-a", "m-b"))
    try:
        url = fleet.urls[0]
        r = await post(session, url, {"messages": [{"role": "user", "content": "x"}]})
        assert r["model"] == "m-a"
        r = await post(session, url, {"model": "m-b", "messages": [{"role": "user", "content": "x"}]})
        assert r["model"] == "m-b"
        async with session.get(url + "/v1/models") as resp:
            listed = await resp.json()
        assert [m["id"] for m in listed["data"]] == ["m-a", "m-b"] and listed["object"] == "list"
    finally:
        await fleet.stop()


async def test_embeddings(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    r1 = await post(session, url, {"model": "sim-llama", "input": ["abc", "abcdefgh"]}, "/v1/embeddings")
    r2 = await post(session, url, {"model": "sim-llama", "input": "abc"}, "/v1/embeddings")
    assert [d["index"] for d in r1["data"]] == [0, 1]
    assert r1["data"][0]["embedding"] == r2["data"][0]["embedding"]
    assert r1["data"][0]["embedding"] != r1["data"][1]["embedding"]
    assert len(r2["data"][0]["embedding"]) == 8
    assert r1["usage"]["prompt_tokens"] == 1 + 2


# ---------------------------------------------------------------- health, metrics, bookkeeping


async def test_health_and_metrics_names(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    async with session.get(url + "/health") as r:
        assert r.status == 200
    body = chat("metrics " * 30, max_tokens=4)
    await post(session, url, body)
    r2 = await post(session, url, body)
    async with session.get(url + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        text = await r.text()
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            samples[name] = float(value)
    lab = '{model_name="sim-llama"}'
    for gauge in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert samples[gauge + lab] == 0.0
    prompt = r2["usage"]["prompt_tokens"]
    assert samples["vllm:prefix_cache_queries_total" + lab] == 2 * prompt
    assert (
        samples["vllm:prefix_cache_hits_total" + lab] == r2["usage"]["prompt_tokens_details"]["cached_tokens"]
    )
    assert samples["vllm:prompt_tokens_total" + lab] == 2 * prompt
    assert samples["vllm:generation_tokens_total" + lab] == 8
    assert samples["vllm:time_to_first_token_seconds_count" + lab] == 2
    assert samples['vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="sim-llama"}'] == 2
    assert "vllm:cache_config_info" in text and 'num_gpu_blocks="2048"' in text


async def test_kv_usage_reflects_running_requests(session: aiohttp.ClientSession) -> None:
    fleet = await start(
        speed=1.0, overhead_s=0.0, prefill_s_per_token=0.0, decode_s_per_token=0.05, kv_capacity_blocks=10
    )
    try:
        url = fleet.urls[0]
        # 64 prompt bytes = 16 tokens, +16 output tokens = 2 blocks of 10 while it runs.
        task = asyncio.create_task(
            post(session, url, {"prompt": "p" * 64, "max_tokens": 16}, "/v1/completions")
        )
        usage = 0.0
        for _ in range(100):
            await asyncio.sleep(0.01)
            usage = (await stats(session, url))["kv_usage"]
            if usage:
                break
        assert usage == pytest.approx(0.2)
        await task
        assert (await stats(session, url))["kv_usage"] == 0.0
    finally:
        await fleet.stop()


async def test_requests_are_recorded_and_reset_clears(sim: Fleet, session: aiohttp.ClientSession) -> None:
    url = sim.urls[0]
    bodies = [chat(f"r{i}" * 40, cache_salt="s", user="u1") for i in range(3)]
    for b in bodies:
        await post(session, url, b)
    await post(session, url, bodies[0])
    async with session.get(url + "/sim/requests") as r:
        assert await r.json() == [*bodies, bodies[0]]
    async with session.post(url + "/sim/reset") as r:
        assert r.status == 200
    st = await stats(session, url)
    assert st["requests"] == 0 and st["cached_tokens"] == 0 and st["kv_cached_blocks"] == 0
    async with session.get(url + "/sim/requests") as r:
        assert await r.json() == []
    again = await post(session, url, bodies[0])
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_request_log_is_bounded(session: aiohttp.ClientSession) -> None:
    async with await start(max_recorded_requests=3) as fleet:
        for i in range(5):
            await post(session, fleet.urls[0], chat(f"n{i}", max_tokens=1))
        async with session.get(fleet.urls[0] + "/sim/requests") as r:
            log = await r.json()
        assert [b["messages"][0]["content"] for b in log] == ["n2", "n3", "n4"]
    with pytest.raises(aiohttp.ClientConnectionError):  # the context manager stopped it
        await session.get(fleet.urls[0] + "/health")


async def test_replicas_are_independent(session: aiohttp.ClientSession) -> None:
    fleet = await start_replicas(
        [SimConfig(speed=0, mode="simple"), SimConfig(speed=0, mode="simple", kv_capacity_blocks=99)],
        base_port=0,
    )
    try:
        assert len(set(fleet.urls)) == 2 and all(u.startswith("http://127.0.0.1:") for u in fleet.urls)
        body = chat("independent " * 20)
        await post(session, fleet.urls[0], body)
        r = await post(session, fleet.urls[1], body)
        assert r["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        async with session.get(fleet.urls[1] + "/metrics") as resp:
            assert 'num_gpu_blocks="99"' in await resp.text()
        assert fleet.replicas[0].counters.requests == 1 and fleet.replicas[1].counters.requests == 1
    finally:
        await fleet.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        async with session.get(fleet.urls[0] + "/health"):
            pass


async def test_engine_mode_streams_tokens_as_steps_end(session: aiohttp.ClientSession) -> None:
    """Engine mode over HTTP: a repeated prompt hits all its blocks but the last token's, tokens of a
    stream come one step apart, and a client that goes away frees the request's KV blocks."""
    cfg = SimConfig(mode="engine", speed=1.0, kv_capacity_blocks=512)
    fleet = await start_replicas([cfg], base_port=0)
    try:
        url = fleet.urls[0] + "/v1/chat/completions"
        body = {"model": "sim-llama", "messages": [{"role": "user", "content": "x" * 4000}], "max_tokens": 6}
        async with session.post(url, json=body) as r:
            first = (await r.json())["usage"]
        async with session.post(
            url, json={**body, "stream": True, "stream_options": {"include_usage": True}}
        ) as r:
            times, text = [], b""
            t0 = time.perf_counter()
            async for chunk in r.content.iter_any():
                times.append(time.perf_counter() - t0)
                text += chunk
        usage = orjson.loads(text.split(b"data: ")[-2])["usage"]
        prompt = first["prompt_tokens"]
        assert first["prompt_tokens_details"]["cached_tokens"] == 0
        assert usage["prompt_tokens_details"]["cached_tokens"] == (prompt - 1) // 16 * 16
        assert times[-1] - times[0] >= 4 * 0.0097 * 0.9  # at least the 5 later decode steps' overhead
        rep = fleet.replicas[0]
        assert rep.engine is not None and rep.engine.idle
        long = {**body, "max_tokens": 2000, "stream": True}
        async with session.post(url, json=long) as r:
            async for _ in r.content.iter_any():
                break  # the first token came; go away
        for _ in range(100):
            if rep.engine.idle:
                break
            await asyncio.sleep(0.01)
        assert rep.engine.idle and rep.engine.pool.held == 0
        assert rep.counters.cancelled == 1
    finally:
        await fleet.stop()


@pytest.mark.parametrize("policy", ["fcfs", "priority"])
async def test_engine_reads_the_body_priority(policy: str, session: aiohttp.ClientSession) -> None:
    """One seat: while a long stream runs, a request of priority 5 then one of priority 1 wait. A
    ``priority`` engine queues the second first (vLLM's order, lower first), an ``fcfs`` one in
    arrival order; both answer 200 (vLLM V1 ignores the field under fcfs). When the stream goes away the
    head of the queue runs to its end before the other starts. A priority that is no integer: 400."""
    cfg = SimConfig(mode="engine", speed=1.0, max_num_seqs=1, scheduling_policy=policy)  # type: ignore[arg-type]
    fleet = await start_replicas([cfg], base_port=0)
    try:
        url = fleet.urls[0] + "/v1/chat/completions"
        rep = fleet.replicas[0]
        assert rep.engine is not None
        engine = rep.engine
        async with session.post(url, json=chat("q", priority="high")) as r:
            assert r.status == 400 and "priority" in await r.text()
        done: list[str] = []

        async def one(name: str, priority: int) -> None:
            body = chat(name, priority=priority, max_tokens=3, temperature=0)
            await post(session, fleet.urls[0], body)
            done.append(name)

        async def waiting(n: int) -> None:
            for _ in range(3000):
                if len(engine.waiting) == n:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError(f"{len(engine.waiting)} waiting, not {n}")

        async with session.post(url, json=chat("blocker", max_tokens=20000, stream=True)) as r:
            async for _ in r.content.iter_any():
                break  # it runs (its first token came) and holds the one seat
            low = asyncio.create_task(one("low", 5))
            await waiting(1)
            high = asyncio.create_task(one("high", 1))
            await waiting(2)
            order = [e.priority for e in engine.waiting]
            assert order == ([1, 5] if policy == "priority" else [5, 1])
        await asyncio.gather(low, high)  # the blocker went away: the seat frees
        assert done == (["high", "low"] if policy == "priority" else ["low", "high"])
    finally:
        await fleet.stop()
