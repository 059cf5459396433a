"""Prompt-cache billing on the request path: markers before, one ledger row when the answer completes.

Before the request (``prepare``): ``cache_control`` markers are found (more than the policy allows →
400), the marked prefix is rendered and counted with the pool's tokenizer, and the markers are
stripped from what the replica receives (the rendering is streamed into its digest and its token
count, never held whole); ``pin`` reads which replica holds the prefix's live explicit
entry (a routing hint for the router's pin filter). When the answer completes (the ``completed``
hook): the replica's usage (or, for an aborted stream, what was generated) is priced by
``cache.billing.pricing.bill`` and written to the ledger, once per request, before the client sees
the end of its answer. A batch line the fleet answered is priced the same way with source ``batch``, every
amount times ``billing.batch_price_factor``; one the response cache answered is a cache hit like any other. A client that goes away (``cancelled``) still gets its row, written in the
background.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import xxhash

from cache.billing.markers import MarkerError, TooManyMarkers, find_markers, strip_markers
from cache.billing.pricing import (
    FULL_PRICE_BP,
    ExplicitOutcome,
    RequestUsage,
    bill,
    explicit_eligible,
    usage_from_response,
)
from cache.store_redis import REDIS_ERRORS
from gateway.errors import GatewayError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.lifecycle import Event, Hooks
from gateway.pipeline.parse import ENDPOINTS
from router.prompt import chat_pieces

# A marked prefix is counted exactly this far, the rest at the same characters per token: an hf
# tokenizer took 3.8 s of the event loop to count a 3.9 MB marked prefix (tests/load/test_memory.py).
EXACT_PREFIX_TOKENS = 32_768


@dataclass(slots=True)
class Marked:
    """The request's explicit cache prefix (marker to start), as the registry keys it."""

    prefix_hash: str
    prefix_tokens: int


def prepare(ctx: RequestContext) -> None:
    """Find and strip ``cache_control`` markers (``ctx.payload``, ``ctx.marked``); a bad marker is the
    client's 400."""
    assert ctx.parsed is not None and ctx.pool is not None and ctx.tenant is not None
    parsed, pool = ctx.parsed, ctx.pool
    ctx.payload = parsed.body
    if parsed.endpoint != "chat":
        return
    rules = ctx.state.rules[pool.name]
    try:
        found = find_markers(parsed.body, rules.max_markers)
    except TooManyMarkers as exc:
        raise GatewayError(400, str(exc), param="messages", code="too_many_cache_markers") from None
    except MarkerError as exc:
        raise GatewayError(400, str(exc), param="messages", code="invalid_cache_marker") from None
    if found is None:
        return
    if not pool.cfg.accepts_cache_control:
        ctx.payload = strip_markers(parsed.body)
    # One pass over the marked prefix's rendering, piece by piece: its digest and its token count.
    hasher = xxhash.xxh3_128(seed=0)

    def hashed(pieces: Iterator[str]) -> Iterator[str]:
        for piece in pieces:
            hasher.update(piece.encode("utf-8", "surrogatepass"))
            yield piece

    messages = found.body.get("messages") or []
    pieces = hashed(chat_pieces(messages, found.body.get("tools")))
    tokens = pool.router.tokenizer.tokens(pieces, EXACT_PREFIX_TOKENS).count
    # The registry is per tenant already; the salt in the hash keeps digests unlinkable across tenants,
    # the model name (a LoRA adapter's own) keeps an adapter's entries apart from its base model's.
    seed = ctx.tenant.salt.encode() + b"\x00" + parsed.model.encode("utf-8", "surrogatepass") + b"\x00"
    prefix_hash = xxhash.xxh3_128_hexdigest(seed + hasher.hexdigest().encode())
    ctx.marked = Marked(prefix_hash, tokens)


async def pin(ctx: RequestContext) -> None:
    """The replica holding the request's live explicit entry, if any (read only: no renewal)."""
    metering, marked = ctx.process.metering, ctx.marked
    if metering is None or marked is None or ctx.pool is None or ctx.tenant is None:
        return
    if not explicit_eligible(marked.prefix_tokens, ctx.state.rules[ctx.pool.name]):
        return
    try:
        entry = await metering.registry.get(ctx.tenant.id, ctx.pool.name, marked.prefix_hash)
    except REDIS_ERRORS:  # no pin while Redis is away; routing still works
        metrics = ctx.process.metrics
        metrics.child(metrics.redis_errors, "explicit", "get").inc()
        return
    ctx.pinned_replica = entry.replica_id if entry is not None else None


def _aborted_usage(ctx: RequestContext) -> dict[str, Any] | None:
    """A stream cut before its usage chunk is billed for what was generated (estimated)."""
    prompt = ctx.decision.prompt_tokens if ctx.decision is not None else 0
    if prompt <= 0 and ctx.generated_chunks <= 0:
        return None
    return {"prompt_tokens": prompt, "completion_tokens": max(0, ctx.generated_chunks - 1)}


async def settle(ctx: RequestContext) -> None:
    """Price the request and write its ledger row (once per request)."""
    metering = ctx.process.metering
    if metering is None or ctx.billed or ctx.pool is None or ctx.tenant is None:
        return
    ctx.billed = True
    if ctx.source == "fallback" or ctx.status not in (0, 200):
        return
    if ctx.parsed is None or not ENDPOINTS[ctx.parsed.endpoint].billed:
        return
    decision, pool, tenant = ctx.decision, ctx.pool, ctx.tenant
    usage_json = ctx.usage
    index_cached = decision.matched_tokens if decision is not None and decision.prompt_tokens else None
    if usage_json is None:
        usage_json = _aborted_usage(ctx)
        if usage_json is None:
            return
    usage: RequestUsage = usage_from_response(usage_json, index_cached)
    rules = ctx.state.rules[pool.name]
    explicit: ExplicitOutcome | None = None
    marked = ctx.marked
    if marked is not None and ctx.source == "upstream" and explicit_eligible(marked.prefix_tokens, rules):
        try:
            kind, _ = await metering.registry.lookup_or_create(
                tenant.id, pool.name, marked.prefix_hash, marked.prefix_tokens, ctx.replica_id
            )
            explicit = ExplicitOutcome(marked.prefix_tokens, kind)
        except REDIS_ERRORS:  # registry away: billed as implicit (never more than without markers)
            metrics = ctx.process.metrics
            metrics.child(metrics.redis_errors, "explicit", "lookup").inc()
    batch = ctx.batch_id is not None and ctx.source == "upstream"  # a batch line the fleet answered
    item = bill(
        usage,
        ctx.state.prices[pool.name],
        rules,
        explicit,
        "batch" if batch else ctx.source,
        request_id=ctx.request_id,
        client_request_id=ctx.client_request_id,
        tenant=tenant.id,
        model=pool.name,
        ts_ms=int(time.time() * 1000),
        price_factor_bp=ctx.state.policy.billing.batch_price_factor_bp if batch else FULL_PRICE_BP,
    )
    await metering.record(item)
    m = ctx.process.metrics
    label = tenant.metric_label
    for kind, n in item.tokens.as_dict().items():
        if n:
            m.child(m.billed_tokens, label, kind).inc(n)
    m.child(m.billed_cost, label).inc(item.total_micros)
    ctx.line_item = item


def _settle_in_background(ctx: RequestContext) -> None:
    """The client went away: finish its row without holding the cancelled handler."""
    if ctx.process.metering is not None and not ctx.billed:
        ctx.process.metering.in_background(settle(ctx))


def install(hooks: Hooks) -> None:
    hooks.on(Event.COMPLETED, settle)
    hooks.on(Event.CANCELLED, _settle_in_background)
