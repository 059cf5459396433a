"""The response cache on the request path: bypass rules, PII, lookup, coalescing, fill.

``serve`` is the whole story for one request that has a pool and a tenant:

1. ``Cache-Control: no-store`` / body ``cache: {"no-store": true}``, a non-deterministic request (per
   the route's rule), or PII in ``bypass`` mode → proxied untouched, ``x-cache: bypass``.
2. In ``mask`` mode PII becomes typed placeholders before the key is made and before the replica sees
   the prompt; the answer is unmasked with this request's own values.
3. A live entry (younger than the client's ``max-age``) is served as JSON or replayed as SSE, whichever
   the client asked for: ``x-cache: hit`` and ``age``. ``no-cache`` skips this step (``refresh``).
   On an exact miss, the semantic layer (``cache.semantic``, for models that have one) looks for an
   entry by the question's domain fingerprint or a guarded embedding: ``x-cache: semantic-hit``,
   billed as a response-cache hit (ledger source ``semantic_cache``).
4. A miss joins the key's flight: the leader goes upstream (within the key's bucket), followers get the
   leader's answer (streaming followers get its chunks as they arrive): ``x-cache: coalesced``. A failed
   leader sends its followers upstream themselves, and so does a leader whose entity epochs differ
   from the follower's (a business event came in between: its answer predates the event).
5. The leader stores the answer only if it completed normally, is small enough, and (bypass mode)
   carries no PII, under its exact key and, when the semantic lookup missed, under its semantic key.
   When the semantic layer ties the request to entities (``SemanticLayer.tie``), the exact entry is
   stored through the semantic store, indexed under those entities and stamped with the epochs read
   before generation: refused when a business event came while it was being generated, removed by
   the next event about them, refused at read if one came since. Errors are never stored.

How the answer is served (``Served``: x-cache, bypass reason, age) is decided in one function,
``_serve_as``, before the answer starts; the ledger's source is derived from it (``Served.source``),
never set beside it (four hand-set pairs of ``ctx.cache`` and ``ctx.source`` before: one of them left a
follower whose leader failed marked ``coalesced`` while it went upstream). The request a replica
receives is built once, here, by ``pipeline.upstream_request`` (``ctx.upstream``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from cache.coalesce import Flight, FlightFailed
from cache.entry import make_entry, storable
from cache.keys import CacheControl, cache_key, is_cacheable, parse_cache_control
from cache.pii import (
    ChunkUnmasker,
    PiiMapping,
    find_pii_in_request,
    find_pii_in_response,
    unmask_response,
)
from cache.sse import DONE, replay_chunks
from config.cache import CacheConfig
from gateway.errors import GatewayError
from gateway.pipeline import respond, upstream_request
from gateway.pipeline.context import RequestContext, Served
from gateway.pipeline.dispatch import dispatch
from gateway.pipeline.parse import ENDPOINTS
from gateway.pipeline.relay import Relay
from gateway.pipeline.stream_tap import StreamTap, is_usage_only
from gateway.pipeline.upstream_request import UpstreamRequest, wants_usage

if TYPE_CHECKING:
    from cache.semantic.layer import Lookup, SemanticLayer, Tie
    from cache.semantic.route import Analysis
    from gateway.process.cache_runtime import CacheRuntime


def _upstream(ctx: RequestContext, *, mask: bool = False) -> UpstreamRequest:
    """The request the replica receives (``pipeline.upstream_request``), built once for this request."""
    assert ctx.parsed is not None and ctx.pool is not None and ctx.tenant is not None
    marked = ctx.marked is not None
    rank = ctx.fair.spec.rank if ctx.fair is not None else None
    bands = len(ctx.state.policy.fairness.classes) + 1  # the classes and the batch band
    request = upstream_request.build(
        ctx.parsed, ctx.pool, ctx.tenant, ctx.adapter, marked=marked, mask=mask, rank=rank, bands=bands
    )
    ctx.upstream = request
    return request


def _serve_as(
    ctx: RequestContext, cache: str, bypass_reason: str | None = None, age_s: float | None = None
) -> None:
    """How the answer is served (x-cache; the ledger source derives from it): decided here only."""
    ctx.served = Served(cache, bypass_reason, age_s)


async def forward(
    ctx: RequestContext, request: UpstreamRequest, *, assemble: bool = False, flight: Flight | None = None
) -> web.StreamResponse:
    """Dispatch with a tap that collects usage (and the whole answer when someone needs it)."""
    assert ctx.parsed is not None
    parsed, frontend, mapping = ctx.parsed, ctx.frontend, request.mapping
    how = Relay(
        tap=StreamTap(
            assemble=assemble,
            strip_usage=request.strip_usage,
            unmasker=ChunkUnmasker(mapping) if mapping else None,
            publish=flight.publish if flight is not None else None,
            encoder=None if frontend.passthrough else respond.encoder_of(ctx),
        )
        if parsed.stream
        else None,
        rewrite_whole=(lambda r: unmask_response(r, mapping)) if mapping else None,
    )
    return await dispatch(ctx, request.body, how)


def _bypass(ctx: RequestContext, reason: str) -> None:
    metrics = ctx.process.metrics
    metrics.cache_bypass.inc(reason)
    _serve_as(ctx, "bypass", reason)


async def serve(ctx: RequestContext) -> web.StreamResponse:
    """Answer one request through the cache, or from a replica (``ctx.upstream``: what it receives)."""
    assert ctx.parsed is not None and ctx.pool is not None
    parsed = ctx.parsed
    rt = ctx.state.cache
    cfg = rt.configs.get(ctx.pool.cfg.name) if rt is not None else None  # ``pool.name``, a call less
    if rt is None or cfg is None or not cfg.enabled or not ENDPOINTS[parsed.endpoint].cacheable:
        return await forward(ctx, _upstream(ctx))
    control = parse_cache_control(ctx.headers.get("Cache-Control"), parsed.body)
    if control.no_store:
        _bypass(ctx, "no_store")
        return await forward(ctx, _upstream(ctx))
    # The rule reads sampling parameters and the PII scan the texts: neither is changed by the markers
    # the upstream request strips, so both read the client's body.
    ok, reason = is_cacheable(parsed.body, cfg.rule)
    if not ok:
        _bypass(ctx, reason)
        return await forward(ctx, _upstream(ctx))
    if cfg.pii == "bypass" and find_pii_in_request(parsed.body):
        _bypass(ctx, "pii")
        return await forward(ctx, _upstream(ctx))
    request = _upstream(ctx, mask=cfg.pii == "mask")
    payload, mapping = request.payload, request.mapping
    key = cache_key(parsed.endpoint, payload, ctx.tenant.salt)  # type: ignore[union-attr]

    if not control.no_cache:
        t0 = time.perf_counter()
        entry = await rt.store.get(key)
        _store_seconds(ctx, "get", t0)
        if entry is not None and control.accepts_age(entry.age_s()):
            _serve_as(ctx, "hit", age_s=entry.age_s())
            return await _answer_from(ctx, entry.response, mapping)
    semantic: Lookup | None = None
    tie: Tie | None = None
    layer = rt.semantic
    analysis = layer.analyse(ctx.pool.name, parsed.endpoint, payload) if layer is not None else None
    if layer is not None and analysis is not None:
        if not control.no_cache:
            semantic = await _semantic_lookup(ctx, layer, analysis)
            found = semantic.entry
            if found is not None and control.accepts_age(found.age_s()):
                _serve_as(ctx, "semantic-hit", age_s=found.age_s())
                return await _answer_from(ctx, found.response, mapping)
        # Read before the answer is generated: an event after this keeps the answer out of the cache.
        tie = await layer.tie(ctx.pool.name, analysis, semantic)

    if cfg.fill_breaker.enabled:
        tripped = await rt.gate.breaker_check(key)
        if not tripped.allowed:
            return await _fallback(ctx, cfg)

    if not cfg.coalescing.enabled:
        return await _lead(ctx, rt, request, key, cfg, control, None, semantic, tie)
    async with rt.coalescer.acquire(key, tie) as flight:
        if flight.role == "leader":
            return await _lead(ctx, rt, request, key, cfg, control, flight, semantic, tie)
        outdated = flight.meta != tie
        if not outdated:
            try:
                return await _follow(ctx, flight, mapping)
            except FlightFailed:
                pass
    metrics = ctx.process.metrics
    if outdated:
        # A business event came between the leader's basis and ours: generate (and store) our own.
        metrics.cache_bypass.inc("leader_outdated")
        return await _lead(ctx, rt, request, key, cfg, control, None, semantic, tie)
    # The leader failed (its error is its own): go upstream ourselves, uncoalesced.
    _serve_as(ctx, "miss")
    metrics.cache_bypass.inc("leader_failed")
    return await forward(ctx, request)


async def _semantic_lookup(ctx: RequestContext, layer: SemanticLayer, analysis: Analysis) -> Lookup:
    """The semantic layer's lookup for this request, counted."""
    assert ctx.pool is not None and ctx.tenant is not None
    found = await layer.lookup(ctx.pool.name, analysis, ctx.tenant.salt)
    m = ctx.process.metrics
    m.child(m.semantic_requests, found.mode, found.outcome).inc()
    if found.outcome == "bypass":
        m.child(m.semantic_bypass, found.reason).inc()
    for guard in found.vetoes:
        m.child(m.semantic_vetoes, guard).inc()
    if found.similarity is not None:
        m.semantic_similarity.observe(found.similarity)
    return found


def _store_seconds(ctx: RequestContext, op: str, t0: float) -> None:
    metrics = ctx.process.metrics
    metrics.child(metrics.cache_store_seconds, op).observe(time.perf_counter() - t0)


async def _lead(
    ctx: RequestContext,
    rt: CacheRuntime,
    request: UpstreamRequest,
    key: str,
    cfg: CacheConfig,
    control: CacheControl,
    flight: Flight | None,
    semantic: Lookup | None,
    tie: Tie | None,
) -> web.StreamResponse:
    if cfg.key_bucket.enabled:
        admitted = await rt.gate.admit(key)
        if not admitted.allowed:
            metrics = ctx.process.metrics
            metrics.child(metrics.ratelimited, ctx.tenant.metric_label, "cache_key").inc()  # type: ignore[union-attr]
            retry = (
                max(1, int(admitted.retry_after_s + 0.999)) if admitted.retry_after_s != float("inf") else 60
            )
            raise GatewayError(
                429,
                "this exact request is being sent too often; retry later",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(retry)},
            )
    _serve_as(ctx, "refresh" if control.no_cache else "miss")
    answer = await forward(ctx, request, assemble=True, flight=flight)
    outcome = ctx.outcome
    response = outcome.response if outcome is not None and outcome.status == 200 else None
    if response is not None:
        await _fill(ctx, rt, key, response, cfg, control, semantic, tie)
    if flight is not None:
        if response is not None:
            await flight.finish(response)
        else:
            await flight.fail("no_answer")
    return answer


async def _fill(
    ctx: RequestContext,
    rt: CacheRuntime,
    key: str,
    response: dict[str, Any],
    cfg: CacheConfig,
    control: CacheControl,
    semantic: Lookup | None,
    tie: Tie | None,
) -> bool:
    metrics = ctx.process.metrics
    ok, why = storable(response)
    if ok and cfg.pii == "bypass" and find_pii_in_response(response):
        ok, why = False, "pii_in_answer"
    if not ok:
        metrics.child(metrics.cache_not_stored, why).inc()
        return False
    ttl = cfg.ttl_s if control.ttl_s is None else min(cfg.ttl_s, max(1, control.ttl_s))
    t0 = time.perf_counter()
    if tie is None or rt.semantic is None:
        stored = await rt.store.set(key, make_entry(response), ttl)
        why = "too_large_or_store_error"
    elif tie.basis is None:  # the entity epochs were unreadable: an event could not reach the entry
        stored, why = False, "store_error"
    else:  # indexed under its entities and stamped with the epochs read before generation
        why = await rt.semantic.store.put(key, make_entry(response), ttl, tie.refs, tie.basis)
        stored = why == "stored"
    _store_seconds(ctx, "set", t0)
    if not stored:
        metrics.child(metrics.cache_not_stored, why).inc()
    if semantic is not None and semantic.outcome == "miss" and rt.semantic is not None:
        result = await rt.semantic.fill(semantic, response, control.ttl_s)
        if result != "stored":
            metrics.child(metrics.semantic_not_stored, result).inc()
    return stored


async def _follow(ctx: RequestContext, flight: Flight, mapping: PiiMapping | None) -> web.StreamResponse:
    """Answer from the leader's flight: its chunks as they come (stream), or its final answer."""
    assert ctx.parsed is not None
    parsed = ctx.parsed
    _serve_as(ctx, "coalesced")
    if parsed.stream and flight.role == "follower":
        out: web.StreamResponse | None = None
        unmasker = ChunkUnmasker(mapping) if mapping else None
        keep_usage = wants_usage(parsed.body)
        done = False
        try:
            async for chunk in flight.chunks():
                if out is None:
                    out = await respond.open_stream(ctx, ctx.answer_headers())
                if chunk == DONE:
                    done = True
                    continue
                if is_usage_only(chunk) and not keep_usage:
                    continue
                if unmasker is not None:
                    chunk = unmasker.process(chunk)
                await out.write(respond.encoder_of(ctx).chunk(chunk))
            if out is not None:
                response = await flight.result()
        except FlightFailed as failed:
            if out is None:
                raise
            # Part of the leader's stream already reached this client: end it as a failed stream.
            return await respond.close_stream(
                ctx, out, done=False, error=f"the shared upstream stream failed ({failed})"
            )
        if out is not None:
            return await respond.close_stream(ctx, out, done=done, answer=response)
    response = await flight.result()
    return await _answer_from(ctx, response, mapping)


async def _answer_from(
    ctx: RequestContext, response: dict[str, Any], mapping: PiiMapping | None
) -> web.StreamResponse:
    """Answer with a stored (or the leader's, or a fallback) response, as JSON or replayed SSE
    (``ctx.served`` says which)."""
    assert ctx.parsed is not None
    if ctx.parsed.stream:
        shown = unmask_response(response, mapping) if mapping else response
        out = await respond.open_stream(ctx, ctx.answer_headers())
        encode = respond.encoder_of(ctx).chunk
        chunks = replay_chunks(shown, include_usage=wants_usage(ctx.parsed.body))
        await out.write(b"".join(map(encode, chunks)))  # its end comes after the ledger row
        return await respond.close_stream(ctx, out, done=True, answer=response)
    if mapping:  # ``whole`` serialises the rewritten answer
        unmask = lambda r: unmask_response(r, mapping)  # noqa: E731
        return await respond.whole(ctx, 200, b"", ctx.answer_headers(), response, unmask)
    return await respond.whole(ctx, 200, orjson.dumps(response), ctx.answer_headers(), response)


async def _fallback(ctx: RequestContext, cfg: CacheConfig) -> web.StreamResponse:
    """The fill breaker is open for this key: the configured answer instead of the fleet (not billed)."""
    assert ctx.parsed is not None
    parsed = ctx.parsed
    fb = cfg.fill_breaker
    metrics = ctx.process.metrics
    metrics.child(metrics.ratelimited, ctx.tenant.metric_label, "fill_breaker").inc()  # type: ignore[union-attr]
    _serve_as(ctx, "fallback")
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
        "id": f"fallback-{ctx.request_id}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": parsed.model,
        "choices": [choice],
    }
    return await _answer_from(ctx, body, None)
