"""OpenTelemetry through the gateway, with the SDK's in-memory exporter: the client's trace context
reaches the replica through the attempt's span, spans for admission, the cache, routing and each
attempt carry GenAI attributes and no prompt text."""

from __future__ import annotations

import aiohttp
import orjson
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from gateway.pipeline.hooks import TRACE_HOOKS
from tests.support.stack import gateway, policy_for, sim_faults, sim_fleet

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{CLIENT_SPAN}-01"
SECRET = "zebra-secret-prompt-9931"


async def traces(s: aiohttp.ClientSession, url: str) -> list[dict]:
    async with s.get(url + "/sim/traces") as r:
        return await r.json()


async def ask(s: aiohttp.ClientSession, url: str, **extra) -> aiohttp.ClientResponse:  # type: ignore[no-untyped-def]
    body = {"model": "sim-llama", "messages": [{"role": "user", "content": SECRET}], "max_tokens": 2, **extra}
    async with s.post(url + "/v1/chat/completions", json=body, headers={"traceparent": TRACEPARENT}) as r:
        await r.read()
        return r


async def test_spans_continue_the_clients_trace_to_the_replica() -> None:
    exporter = InMemorySpanExporter()
    async with sim_fleet(2) as fleet:
        await sim_faults(fleet.urls[0], {"fail_status": 503})  # the first attempt fails: a retry
        policy = policy_for(fleet.urls, tracing={"enabled": True}, retries={"backoff_base_s": 0})
        async with gateway(policy, span_exporter=exporter) as gw, aiohttp.ClientSession() as s:
            r = await ask(s, gw.url, stream=True)
            assert r.status == 200
            gw.process.tracing.provider.force_flush()
            seen = await traces(s, fleet.urls[0]) + await traces(s, fleet.urls[1])
            running = {h for event in gw.process.hooks._hooks.values() for h, _ in event}
            assert running >= TRACE_HOOKS  # kept with tracing on
    spans = exporter.get_finished_spans()
    by_name: dict[str, list] = {}
    for span in spans:
        by_name.setdefault(span.name, []).append(span)
    (server,) = [sp for sp in spans if sp.kind == SpanKind.SERVER]
    attempts = [sp for sp in spans if sp.kind == SpanKind.CLIENT]
    assert server.name == "chat sim-llama"
    assert format(server.context.trace_id, "032x") == TRACE_ID
    assert format(server.parent.span_id, "016x") == CLIENT_SPAN  # a child of the client's span
    assert {"admission", "cache", "route"} <= set(by_name)
    assert len(by_name["route"]) == 2 and len(attempts) == 2
    assert attempts[0].status.status_code == StatusCode.ERROR
    assert attempts[1].attributes["gen_ai.usage.output_tokens"] == 2
    assert attempts[1].attributes["gen_ai.request.model"] == "sim-llama"
    assert attempts[1].attributes["server.address"] == "127.0.0.1"
    assert server.attributes["gen_ai.usage.input_tokens"] > 0
    assert by_name["cache"][0].attributes["prefix_gateway.cache"] == "off"  # the policy has no cache
    assert all(sp.context.trace_id == server.context.trace_id for sp in spans)
    # each replica got the trace context of the attempt that reached it, not the client's span
    sent = sorted(seen, key=lambda t: t["traceparent"])
    attempt_ids = sorted(format(a.context.span_id, "016x") for a in attempts)
    assert sorted(t["traceparent"].split("-")[2] for t in sent) == attempt_ids
    assert all(t["traceparent"].split("-")[1] == TRACE_ID for t in sent)
    # counts, names and ids only: the prompt is nowhere in what was exported
    exported = orjson.dumps([orjson.loads(sp.to_json()) for sp in spans]).decode()
    assert SECRET not in exported


async def test_cache_hits_have_a_cache_span_and_no_attempt() -> None:
    exporter = InMemorySpanExporter()
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, tracing={"enabled": True}, cache={"enabled": True})
        async with gateway(policy, span_exporter=exporter) as gw, aiohttp.ClientSession() as s:
            await ask(s, gw.url, temperature=0)
            gw.process.tracing.provider.force_flush()
            exporter.clear()
            hit = await ask(s, gw.url, temperature=0)
            assert hit.headers["x-cache"] == "hit"
            gw.process.tracing.provider.force_flush()
    spans = exporter.get_finished_spans()
    assert sorted(sp.name for sp in spans) == ["admission", "cache", "chat sim-llama"]
    (cache,) = [sp for sp in spans if sp.name == "cache"]
    assert cache.attributes["prefix_gateway.cache"] == "hit"


async def test_without_tracing_the_clients_traceparent_is_passed_on() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        assert gw.process.tracing is None
        await ask(s, gw.url)
        assert [t["traceparent"] for t in await traces(s, fleet.urls[0])] == [TRACEPARENT]


async def test_without_tracing_the_trace_hooks_are_not_run() -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw, aiohttp.ClientSession() as s:
        running = {h for event in gw.process.hooks._hooks.values() for h, _ in event}
        assert gw.process.tracing is None and not TRACE_HOOKS & running and running
        r = await ask(s, gw.url)
        assert r.status == 200  # the client's context passed on as it sent it, no span of ours in it
        assert (await traces(s, fleet.urls[0]))[-1]["traceparent"] == TRACEPARENT
