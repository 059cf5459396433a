"""Replicas failing in every way the simulator can: the gateway routes around them, tells clients
in OpenAI's shapes, and keeps serving everyone else."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import orjson
import pytest

from bench.procs import free_port
from sim import SimConfig
from sim.fleet import start_replica
from tests.fault.support import ADMIN_TOKEN, admin_replicas, chat, gateway_with, post, wait_for
from tests.support.stack import policy_for, sim_faults, sim_fleet, sim_requests

NO_HEALTH = {"enabled": False}


def sse_events(raw: bytes) -> list[bytes]:
    return [e.removeprefix(b"data: ") for e in raw.split(b"\n\n") if e.startswith(b"data: ")]


async def test_replica_killed_mid_stream(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 2})
        policy = policy_for(fleet.urls, health=NO_HEALTH)
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            results = [await post(s, gw.url, chat(f"q{i}", stream=True)) for i in range(10)]
            cut = [r for r in results if r[1].get("x-gateway-replica") == "r0"]
            whole = [r for r in results if r[1].get("x-gateway-replica") == "r1"]
            assert cut and whole
            for status, _, raw in cut:
                events = sse_events(raw)
                assert status == 200
                err = orjson.loads(events[-1])["error"]  # the error event is the last thing sent
                assert err["code"] == "upstream_stream_error" and err["type"] == "upstream_error"
                assert b"[DONE]" not in events
            for status, _, raw in whole:
                assert status == 200 and sse_events(raw)[-1] == b"[DONE]"
            # three dropped streams in a row open r0's breaker: later requests all went to r1
            rows = await admin_replicas(s, gw.url)
            assert rows["r0"]["breaker"] == "open" and not rows["r0"]["healthy"]
            assert len(cut) == 3
            assert [r[1]["x-gateway-replica"] for r in results[-3:]] == ["r1"] * 3


async def test_replica_down_at_start_is_ejected_then_readmitted(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    port = free_port()
    async with sim_fleet(1) as fleet:
        urls = [fleet.urls[0], f"http://127.0.0.1:{port}"]
        # r1's port refuses at once; a 5 s timeout keeps a healthy r0 that a loaded machine answers
        # slowly from being ejected by its first late check (0.5 s did, once, under load 11).
        policy = policy_for(urls, health={"interval_s": 0.1, "timeout_s": 5.0, "fails_to_eject": 1})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:

            async def r1_state() -> dict:
                return (await admin_replicas(s, gw.url))["r1"]

            await wait_for(lambda: _not(r1_state()))
            row = await r1_state()
            assert row["active_ok"] is False and row["index_blocks"] == 0
            for i in range(6):
                status, headers, _ = await post(s, gw.url, chat(f"a{i}"))
                assert status == 200 and headers["x-gateway-replica"] == "r0"
            runner, _, _ = await start_replica(SimConfig(speed=0.0), port=port)
            try:
                await wait_for(lambda: _healthy(r1_state()))
                seen = set()
                for i in range(6):
                    status, headers, _ = await post(s, gw.url, chat(f"b{i}"))
                    assert status == 200
                    seen.add(headers["x-gateway-replica"])
                assert seen == {"r0", "r1"}
            finally:
                await runner.cleanup()


async def _not(coro) -> bool:  # type: ignore[no-untyped-def]
    return not (await coro)["healthy"]


async def _healthy(coro) -> bool:  # type: ignore[no-untyped-def]
    return (await coro)["healthy"]


async def test_all_replicas_down_answers_503_with_retry_after() -> None:
    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    policy = policy_for(urls, health={"interval_s": 0.1, "timeout_s": 0.2, "fails_to_eject": 1})
    async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
        await wait_for(lambda: not any(r.healthy for r in gw.state.pools["sim-llama"].router.replicas))
        status, headers, raw = await post(s, gw.url, chat())
        assert status == 503
        assert headers["Retry-After"] == "1"
        err = orjson.loads(raw)["error"]
        assert err["code"] == "no_replica_available" and err["type"] == "service_unavailable"
        async with s.get(gw.url + "/ready") as r:
            assert r.status == 503


async def test_breaker_alone_ejects_refused_replicas_without_health_checks() -> None:
    """Active checks off: connect-refused attempts open the breakers, then 503 without any attempt."""
    urls = [f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"]
    policy = policy_for(urls, health=NO_HEALTH, breaker={"transport_failures": 2, "open_s": 5.0})
    async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
        first = [await post(s, gw.url, chat(f"x{i}")) for i in range(3)]
        assert {f[0] for f in first} <= {502, 503}
        status, headers, raw = await post(s, gw.url, chat("after"))
        assert status == 503 and headers["Retry-After"] == "1"
        assert orjson.loads(raw)["error"]["code"] == "no_replica_available"
        fleet = gw.process.fleet
        assert fleet is not None and {r.breaker.state for r in fleet.records()} == {"open"}
        async with s.get(gw.url + "/ready") as r:
            assert r.status == 503  # open breakers count in readiness


async def test_breaker_opens_on_5xx_and_closes_after_recovery(monkeypatch) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"fail_status": 503})
        # r0's first open period outlasts the rest of the first phase (four more requests and two reads of
        # the gateway): at 0.3 s a loaded machine let it go half-open meanwhile, and the next request's
        # probe of the still failing r0 opened it a second time.
        policy = policy_for(
            fleet.urls,
            health=NO_HEALTH,
            breaker={"status_failures": 2, "open_s": 2.0, "max_open_s": 4.0, "close_after": 2},
        )
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            for i in range(6):  # 503 is retried on r1: every client succeeds
                status, headers, _ = await post(s, gw.url, chat(f"c{i}"))
                assert status == 200 and headers["x-gateway-replica"] == "r1"
            rows = await admin_replicas(s, gw.url)
            assert rows["r0"]["breaker"] == "open"
            async with s.get(gw.metrics_url + "/metrics") as r:
                text = await r.text()
            assert 'prefix_gateway_breaker_state{replica="r0"} 2.0' in text
            assert 'prefix_gateway_breaker_transitions_total{replica="r0",to="open"} 1.0' in text
            await sim_faults(fleet.urls[0], {})
            await wait_for(lambda: gw.process.fleet.get(fleet.urls[0]).breaker.state == "half_open")
            replicas = []
            for i in range(8):
                status, headers, _ = await post(s, gw.url, chat(f"d{i}"))
                assert status == 200
                replicas.append(headers["x-gateway-replica"])
            assert "r0" in replicas
            assert (await admin_replicas(s, gw.url))["r0"]["breaker"] == "closed"


async def test_hung_replica_costs_only_its_own_requests_their_timeout() -> None:
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"hang": True})
        policy = policy_for(
            fleet.urls,
            health=NO_HEALTH,
            routing={"policy": "least_load"},
            # long enough for r1 to serve several requests meanwhile on a loaded machine (at 0.6 s, part
            # of which passes before the others start, a busy two-core machine serves only a few)
            timeouts={"first_byte_s": 1.5},
            retries={"max_attempts": 1},
            breaker={"transport_failures": 100},
        )
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            hung_done = asyncio.Event()
            served_meanwhile = 0

            async def hung(i: int) -> tuple[int, bytes, float]:
                t0 = time.monotonic()
                status, _, raw = await post(s, gw.url, chat(f"h{i}"))
                return status, raw, time.monotonic() - t0

            async def others() -> None:
                nonlocal served_meanwhile
                while not hung_done.is_set() and served_meanwhile < 2000:
                    status, headers, _ = await post(s, gw.url, chat("o"))
                    if status == 200:
                        assert headers["x-gateway-replica"] == "r1"
                        served_meanwhile += 1

            # least load: of 4 concurrent requests some land on r0 and hang there; while they do, r0's
            # in-flight count sends every other request to r1
            pinned = [asyncio.create_task(hung(i)) for i in range(4)]
            router = gw.process.state.pools["sim-llama"].router
            r0, r1 = router.replica("r0"), router.replica("r1")
            assert r0 is not None and r1 is not None
            deadline = time.monotonic() + 5
            while not (r0.in_flight and not r1.in_flight):  # r0 holds some, r1 has answered its own
                assert time.monotonic() < deadline, (r0.in_flight, r1.in_flight)
                await asyncio.sleep(0.005)
            bg = asyncio.create_task(others())
            results = await asyncio.gather(*pinned)
            hung_done.set()
            await bg
            timed_out = [r for r in results if r[0] == 504]
            assert timed_out, results
            for _status, raw, elapsed in timed_out:
                assert orjson.loads(raw)["error"]["code"] == "upstream_timeout"
                assert 1.4 <= elapsed < 6.0
            assert served_meanwhile >= 5  # r1 kept serving while r0's requests waited


async def test_idle_timeout_cuts_a_silent_stream_with_an_error_event() -> None:
    async with sim_fleet(
        1, speed=1.0, decode_s_per_token=0.6, overhead_s=0.0, prefill_s_per_token=0.0
    ) as fleet:
        policy = policy_for(fleet.urls, health=NO_HEALTH, timeouts={"first_byte_s": 5.0, "idle_s": 0.2})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            status, _, raw = await post(s, gw.url, chat("slow", stream=True, max_tokens=4))
            assert status == 200
            last = orjson.loads(sse_events(raw)[-1])
            assert last["error"]["code"] == "upstream_stream_error"
            assert "silent" in last["error"]["message"]


async def test_malformed_json_is_retried_elsewhere_and_broken_sse_does_not_break_the_gateway() -> None:
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"malformed": True})
        policy = policy_for(fleet.urls, health=NO_HEALTH, breaker={"transport_failures": 100})
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            for i in range(6):  # invalid JSON from r0 never reaches a client: retried on r1
                status, headers, raw = await post(s, gw.url, chat(f"m{i}"))
                assert status == 200 and headers["x-gateway-replica"] == "r1"
                assert orjson.loads(raw)["choices"]
            errors = gw.process.metrics.registry.get_sample_value(
                "prefix_gateway_upstream_errors_total", {"replica": "r0", "kind": "protocol"}
            )
            assert errors == 6  # round robin: each request tried r0 first (the retry took r1's turn)
            for i in range(4):  # a broken SSE event is relayed as is (the stream had begun)
                status, headers, raw = await post(s, gw.url, chat(f"s{i}", stream=True))
                assert status == 200
                if headers["x-gateway-replica"] == "r1":
                    assert sse_events(raw)[-1] == b"[DONE]"
            async with s.get(gw.url + "/health") as r:
                assert r.status == 200


async def test_connect_timeout_to_a_replica_that_never_accepts() -> None:
    """A listener whose backlog is full drops new SYNs: connecting times out (``timeouts.connect_s``),
    the attempt is retried on the other replica, and the client never notices."""
    import socket

    blackhole = socket.socket()
    blackhole.bind(("127.0.0.1", 0))
    blackhole.listen(0)
    port = blackhole.getsockname()[1]
    fillers = []
    for _ in range(4):  # fill the accept queue (never accepted)
        c = socket.socket()
        c.setblocking(False)
        c.connect_ex(("127.0.0.1", port))
        fillers.append(c)
    await asyncio.sleep(0.1)
    try:
        async with sim_fleet(1) as fleet:
            urls = [f"http://127.0.0.1:{port}", fleet.urls[0]]
            policy = policy_for(
                urls,
                health=NO_HEALTH,
                timeouts={"connect_s": 0.3, "first_byte_s": 5.0},
                breaker={"transport_failures": 1},
            )
            async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
                t0 = time.monotonic()
                results = [await post(s, gw.url, chat(f"k{i}")) for i in range(3)]
                elapsed = time.monotonic() - t0
                assert [r[0] for r in results] == [200, 200, 200]
                assert {r[1]["x-gateway-replica"] for r in results} == {"r1"}
                errors = gw.process.metrics.registry.get_sample_value(
                    "prefix_gateway_upstream_errors_total", {"replica": "r0", "kind": "timeout"}
                ) or gw.process.metrics.registry.get_sample_value(
                    "prefix_gateway_upstream_errors_total", {"replica": "r0", "kind": "connect"}
                )
                assert errors == 1  # one timed-out connect, then r0's breaker kept requests away
                assert 0.25 <= elapsed < 5.0
    finally:
        for c in fillers:
            c.close()
        blackhole.close()


async def test_total_timeout_ends_a_long_stream_with_an_error_event() -> None:
    async with sim_fleet(
        1, speed=1.0, decode_s_per_token=0.1, overhead_s=0.0, prefill_s_per_token=0.0
    ) as fleet:
        policy = policy_for(
            fleet.urls, health=NO_HEALTH, timeouts={"first_byte_s": 0.8, "idle_s": 5.0, "total_s": 0.8}
        )
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            t0 = time.monotonic()
            long = chat("long", stream=True, max_tokens=100)  # 10 s of tokens
            status, _, raw = await post(s, gw.url, long)
            assert status == 200
            assert orjson.loads(sse_events(raw)[-1])["error"]["code"] == "upstream_stream_error"
            assert time.monotonic() - t0 < 6.0  # the 0.8 s total, not the 10 s stream


async def test_ready_does_not_count_a_half_open_breaker_before_an_active_check_passes() -> None:
    """Issue 19, item 9: a replica that just died (requests fail, /health fails) is half-open one
    open period later; until an active check passes again it is no reason for /ready to say 200."""
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls,
            retries={"max_attempts": 1},
            health={"interval_s": 0.2, "timeout_s": 0.5, "fails_to_eject": 50},
            breaker={"status_failures": 2, "open_s": 0.3},
        )
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            async with s.get(gw.url + "/ready") as r:
                assert r.status == 200
            await sim_faults(fleet.urls[0], {"fail_status": 500, "health_status": 503})
            for i in range(2):
                await post(s, gw.url, chat(f"dying {i}"))
            (rec,) = gw.process.fleet.records()
            await wait_for(lambda: rec.breaker.state == "half_open")
            assert rec.active_ok  # not ejected by the checks yet (50 failures needed)
            async with s.get(gw.url + "/ready") as r:
                assert r.status == 503 and await r.json() == {"ready": False}
            await sim_faults(fleet.urls[0], {})  # back: the next check passes
            await wait_for(lambda: rec.checked_since_open)

            async def ready() -> bool:
                async with s.get(gw.url + "/ready") as r:
                    return r.status == 200

            await wait_for(ready)


PASSTHROUGH = {  # every endpoint that is not generation, with a body the simulator answers
    "/tokenize": {"prompt": "hello world"},
    "/detokenize": {"tokens": [1, 2, 3]},
    "/pooling": {"input": ["x", "y"]},
    "/classify": {"input": "great"},
    "/v1/rerank": {"query": "q", "documents": ["a", "b"]},
    "/v1/score": {"text_1": "q", "text_2": ["a"]},
    "/v1/embeddings": {"input": "x"},
}


@pytest.mark.parametrize("path", list(PASSTHROUGH))
async def test_the_breaker_counts_and_stops_every_endpoint(path: str) -> None:
    """r0 answers 503 to everything: its breaker opens after ``status_failures`` answers of this
    endpoint alone (health checks off, nothing else sent), and no request of it reaches r0 after that;
    every client is answered by r1 (503 is retried)."""
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"fail_status": 503})
        policy = policy_for(
            fleet.urls, health=NO_HEALTH, breaker={"status_failures": 2, "open_s": 60.0, "max_open_s": 60.0}
        )
        async with gateway_with(policy) as gw, aiohttp.ClientSession() as s:
            for _ in range(8):  # round robin: r0 gets every other first attempt while it may
                async with s.post(gw.url + path, json={"model": "sim-llama", **PASSTHROUGH[path]}) as r:
                    assert r.status == 200, await r.text()
            record = gw.process.fleet.get(fleet.urls[0])
            assert record is not None and record.breaker.state == "open"
            assert len(await sim_requests(fleet.urls[0])) == 2  # the two that opened it, then none
