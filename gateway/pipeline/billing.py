"""Prompt-cache billing on the request path, before the answer: markers and the explicit entry's pin.

Before the request (``prepare``): ``cache_control`` markers are found (more than the policy allows →
400) and the marked prefix is rendered and counted with the pool's tokenizer (the rendering is
streamed into its digest and its token count, never held whole); the markers are stripped from what
the replica receives where the request is built (``pipeline.upstream_request``); ``pin`` reads which replica holds the prefix's live explicit
entry (a routing hint for the router's pin filter).

After: one ledger row for every generation, written by the billing hooks (``pipeline.hooks.billing``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import xxhash

from cache.billing.markers import MarkerError, TooManyMarkers, find_markers
from cache.billing.pricing import (
    explicit_eligible,
)
from cache.store_redis import REDIS_ERRORS
from gateway.errors import GatewayError
from gateway.pipeline.context import RequestContext
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
    """Find ``cache_control`` markers and count the marked prefix (``ctx.marked``); a bad marker is the
    client's 400. The replica's copy is stripped where it is built (``pipeline.upstream_request``)."""
    assert ctx.parsed is not None and ctx.pool is not None and ctx.tenant is not None
    parsed, pool = ctx.parsed, ctx.pool
    if parsed.endpoint != "chat":
        return
    rules = ctx.state.rules[pool.cfg.name]  # ``pool.name``, one call less
    try:
        found = find_markers(parsed.body, rules.max_markers)
    except TooManyMarkers as exc:
        raise GatewayError(400, str(exc), param="messages", code="too_many_cache_markers") from None
    except MarkerError as exc:
        raise GatewayError(400, str(exc), param="messages", code="invalid_cache_marker") from None
    if found is None:
        return
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
