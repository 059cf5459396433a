"""The response cache on the request path: bypass rules, PII, lookup, coalescing, fill.

``serve`` is the whole story for one request that has a pool and a tenant:

1. ``Cache-Control: no-store`` / body ``cache: {"no-store": true}``, a non-deterministic request (per
   the route's rule), or PII in ``bypass`` mode → proxied untouched, ``x-cache: bypass``.
2. In ``mask`` mode PII becomes typed placeholders before the key is made and before the replica sees
   the prompt; the answer is unmasked with this request's own values.
3. A live entry (younger than the client's ``max-age``) is served as JSON or replayed as SSE, whichever
   the client asked for: ``x-cache: hit`` and ``age``. ``no-cache`` skips this step (``refresh``).
4. A miss joins the key's flight: the leader goes upstream (within the key's bucket), followers get the
   leader's answer (streaming followers get its chunks as they arrive): ``x-cache: coalesced``. A failed
   leader sends its followers upstream themselves.
5. The leader stores the answer only if it completed normally, is small enough, and (bypass mode)
   carries no PII. Errors are never stored.
"""

from __future__ import annotations

import time
from typing import Any

import orjson
from aiohttp import web

from cache.coalesce import Flight, FlightFailed
from cache.entry import Entry, make_entry, storable
from cache.keys import CacheControl, cache_key, is_cacheable, parse_cache_control
from cache.pii import (
    ChunkUnmasker,
    PiiMapping,
    find_pii_in_request,
    find_pii_in_response,
    mask_request,
    unmask_response,
)
from cache.sse import DONE, replay_sse
from config.cache import CacheConfig
from gateway.errors import GatewayError, error_body
from gateway.pipeline.context import Call, Outcome
from gateway.pipeline.dispatch import SSE_HEADERS, Relay, proxy
from gateway.pipeline.stream_tap import StreamTap, is_usage_only
from gateway.process.state import GatewayState


def wants_usage(body: dict[str, Any]) -> bool:
    opts = body.get("stream_options")
    return isinstance(opts, dict) and opts.get("include_usage") is True


def with_usage_requested(payload: dict[str, Any]) -> dict[str, Any]:
    """Ask the replica for the usage chunk (billing needs it) without changing what the client asked."""
    if not payload.get("stream") or wants_usage(payload):
        return payload
    opts = payload.get("stream_options")
    return {**payload, "stream_options": {**(opts if isinstance(opts, dict) else {}), "include_usage": True}}


async def forward(
    call: Call,
    payload: dict[str, Any],
    *,
    mapping: PiiMapping | None = None,
    assemble: bool = False,
    flight: Flight | None = None,
) -> web.StreamResponse:
    """Proxy with a tap that collects usage (and the whole answer when someone needs it)."""
    parsed = call.parsed
    client_wants_usage = wants_usage(parsed.body)
    relay = Relay(
        tap=StreamTap(
            assemble=assemble,
            strip_usage=not client_wants_usage,
            unmasker=ChunkUnmasker(mapping) if mapping else None,
            publish=flight.publish if flight is not None else None,
        )
        if parsed.stream
        else None,
        rewrite_whole=(lambda r: unmask_response(r, mapping)) if mapping else None,
    )
    return await proxy(call, with_usage_requested(payload), relay)


def _bypass(state: GatewayState, outcome: Outcome, reason: str) -> None:
    state.metrics.cache_bypass.labels(reason).inc()
    outcome.cache = "bypass"
    outcome.extra_headers["x-cache"] = "bypass"


async def serve(call: Call, payload: dict[str, Any]) -> web.StreamResponse:
    """Answer one request through the cache; ``payload`` is what a replica would receive."""
    state, pool, parsed, outcome = call.state, call.pool, call.parsed, call.outcome
    rt = state.cache
    cfg = rt.configs.get(pool.name) if rt is not None else None
    if rt is None or cfg is None or not cfg.enabled or parsed.endpoint == "embeddings":
        return await forward(call, payload)
    control = parse_cache_control(call.request.headers.get("Cache-Control"), parsed.body)
    if control.no_store:
        _bypass(state, outcome, "no_store")
        return await forward(call, payload)
    ok, reason = is_cacheable(payload, cfg.rule)
    if not ok:
        _bypass(state, outcome, reason)
        return await forward(call, payload)
    mapping: PiiMapping | None = None
    if cfg.pii == "bypass" and find_pii_in_request(payload):
        _bypass(state, outcome, "pii")
        return await forward(call, payload)
    if cfg.pii == "mask":
        payload, mapping = mask_request(payload)
    key = cache_key(parsed.endpoint, payload, call.tenant.salt)

    if not control.no_cache:
        entry = await _timed_get(state, key)
        if entry is not None and control.accepts_age(entry.age_s()):
            return await _answer_from_entry(call, entry.response, mapping, "hit", age_s=entry.age_s())

    if cfg.fill_breaker.enabled:
        tripped = await rt.gate.breaker_check(key)
        if not tripped.allowed:
            return await _fallback(call, cfg)

    if not cfg.coalescing.enabled:
        return await _lead(call, payload, mapping, key, cfg, control, None)
    async with rt.coalescer.acquire(key) as flight:
        if flight.role == "leader":
            return await _lead(call, payload, mapping, key, cfg, control, flight)
        try:
            return await _follow(call, flight, mapping)
        except FlightFailed:
            pass
    # The leader failed (its error is its own): go upstream ourselves, uncoalesced.
    outcome.extra_headers["x-cache"] = outcome.cache = "miss"
    state.metrics.cache_bypass.labels("leader_failed").inc()
    return await forward(call, payload, mapping=mapping)


async def _timed_get(state: GatewayState, key: str) -> Entry | None:
    assert state.cache is not None
    t0 = time.perf_counter()
    entry = await state.cache.store.get(key)
    state.metrics.cache_store_seconds.labels("get").observe(time.perf_counter() - t0)
    return entry


async def _lead(
    call: Call,
    payload: dict[str, Any],
    mapping: PiiMapping | None,
    key: str,
    cfg: CacheConfig,
    control: CacheControl,
    flight: Flight | None,
) -> web.StreamResponse:
    state, outcome = call.state, call.outcome
    rt = state.cache
    assert rt is not None
    if cfg.key_bucket.enabled:
        admitted = await rt.gate.admit(key)
        if not admitted.allowed:
            state.metrics.ratelimited.labels(call.tenant.metric_label, "cache_key").inc()
            retry = (
                max(1, int(admitted.retry_after_s + 0.999)) if admitted.retry_after_s != float("inf") else 60
            )
            raise GatewayError(
                429,
                "this exact request is being sent too often; retry later",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(retry)},
            )
    outcome.cache = "refresh" if control.no_cache else "miss"
    outcome.extra_headers["x-cache"] = outcome.cache
    answer = await forward(call, payload, mapping=mapping, assemble=True, flight=flight)
    response = outcome.response if outcome.status == 200 else None
    if response is not None:
        await _fill(state, key, response, cfg, control)
    if flight is not None:
        if response is not None:
            await flight.finish(response)
        else:
            await flight.fail("no_answer")
    return answer


async def _fill(
    state: GatewayState, key: str, response: dict[str, Any], cfg: CacheConfig, control: CacheControl
) -> bool:
    ok, why = storable(response)
    if ok and cfg.pii == "bypass" and find_pii_in_response(response):
        ok, why = False, "pii_in_answer"
    if not ok:
        state.metrics.cache_not_stored.labels(why).inc()
        return False
    ttl = cfg.ttl_s if control.ttl_s is None else min(cfg.ttl_s, max(1, control.ttl_s))
    assert state.cache is not None
    t0 = time.perf_counter()
    stored = await state.cache.store.set(key, make_entry(response), ttl)
    state.metrics.cache_store_seconds.labels("set").observe(time.perf_counter() - t0)
    if not stored:
        state.metrics.cache_not_stored.labels("too_large_or_store_error").inc()
    return stored


async def _follow(call: Call, flight: Flight, mapping: PiiMapping | None) -> web.StreamResponse:
    """Answer from the leader's flight: its chunks as they come (stream), or its final answer."""
    parsed, outcome = call.parsed, call.outcome
    outcome.source = "coalesced"
    if parsed.stream and flight.role == "follower":
        out: web.StreamResponse | None = None
        unmasker = ChunkUnmasker(mapping) if mapping else None
        keep_usage = wants_usage(parsed.body)
        try:
            async for chunk in flight.chunks():
                if out is None:
                    out = await _start_sse(call, "coalesced")
                if chunk == DONE:
                    if outcome.settle is not None:
                        await outcome.settle()
                    await out.write(b"data: [DONE]\n\n")
                    continue
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    outcome.usage = chunk["usage"]
                if is_usage_only(chunk) and not keep_usage:
                    continue
                if unmasker is not None:
                    chunk = unmasker.process(chunk)
                await out.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            if out is not None:
                outcome.response = await flight.result()
        except FlightFailed as failed:
            if out is None:
                raise
            # Part of the leader's stream already reached this client: end it as a failed stream.
            event = error_body(
                f"the shared upstream stream failed ({failed})",
                "upstream_error",
                None,
                "upstream_stream_error",
            )
            await out.write(b"data: " + orjson.dumps(event) + b"\n\n")
        if out is not None:
            await out.write_eof()
            return out
    response = await flight.result()
    return await _answer_from_entry(call, response, mapping, "coalesced")


async def _start_sse(call: Call, cache: str) -> web.StreamResponse:
    outcome = call.outcome
    outcome.cache = cache
    headers = {**SSE_HEADERS, **outcome.extra_headers, "x-cache": cache, "x-request-id": outcome.request_id}
    out = web.StreamResponse(status=200, headers=headers)
    await out.prepare(call.request)
    outcome.status = 200
    outcome.first_byte_s = time.perf_counter() - outcome.started
    return out


async def _answer_from_entry(
    call: Call,
    response: dict[str, Any],
    mapping: PiiMapping | None,
    cache: str,
    age_s: float | None = None,
) -> web.StreamResponse:
    parsed, outcome = call.parsed, call.outcome
    if cache == "hit":
        outcome.source = "response_cache"
    outcome.response = response
    usage = response.get("usage")
    outcome.usage = usage if isinstance(usage, dict) else None
    outcome.replica = "-"
    if mapping:
        response = unmask_response(response, mapping)
    if age_s is not None:
        outcome.extra_headers["age"] = str(int(age_s))
    if parsed.stream:
        out = await _start_sse(call, cache)
        events = replay_sse(response, include_usage=wants_usage(parsed.body))
        await out.write(b"".join(events[:-1]))
        if outcome.settle is not None:
            await outcome.settle()
        await out.write(events[-1])  # [DONE], after the ledger row
        await out.write_eof()
        return out
    outcome.cache = cache
    outcome.status = 200
    headers = {**outcome.extra_headers, "x-cache": cache, "x-request-id": outcome.request_id}
    return web.Response(body=orjson.dumps(response), content_type="application/json", headers=headers)


async def _fallback(call: Call, cfg: CacheConfig) -> web.StreamResponse:
    """The fill breaker is open for this key: the configured answer instead of the fleet (not billed)."""
    parsed, outcome = call.parsed, call.outcome
    fb = cfg.fill_breaker
    call.state.metrics.ratelimited.labels(call.tenant.metric_label, "fill_breaker").inc()
    outcome.cache = "fallback"
    outcome.source = "fallback"
    if fb.fallback_text is None:
        raise GatewayError(
            fb.fallback_status,
            "this request is temporarily answered by a fallback; retry later",
            code="fill_breaker_open",
            headers={"Retry-After": str(fb.retry_after_s)},
        )
    chat = parsed.endpoint == "chat"
    choice: dict[str, Any] = {"index": 0, "finish_reason": "stop", "logprobs": None}
    if chat:
        choice["message"] = {"role": "assistant", "content": fb.fallback_text}
    else:
        choice["text"] = fb.fallback_text
    body = {
        "id": f"fallback-{outcome.request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": parsed.model,
        "choices": [choice],
    }
    return await _answer_from_entry(call, body, None, "fallback")
