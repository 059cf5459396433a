"""The ledger row of a request: ``completed`` and ``finished`` (the markers before the request are
the billing stage's, ``pipeline.billing``).

``row_source`` is the one rule for a row (a generation the replica started is one row, whatever
ended the request; docs/billing.md has the table). A request whose answer completes is billed at the
``completed`` hook, before the client can see the end of its answer; any other end (the client went
away before the first byte, mid-stream or before ``[DONE]``, a batch run was stopped, an error) at
``finished``, without holding the handler. Tokens are the replica's usage when it sent one, else the
gateway's estimate (``usage_estimated`` on the row). The row is written in a task of its own
(``Metering.in_background``): a handler cancelled while its row is being written, the client gone
after the last chunk, cancels its wait, never the write (the task and its shield cost about 10 µs a
request on the 2-core development machine). Issue 23 measured the need: a status-based
rule (499 on a disconnect) left five streams closed after 20 chunks without a row.

A batch line the fleet answered is priced the same way with source ``batch``, every amount times
``billing.batch_price_factor``; one the response cache answered is a cache hit like any other.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING

from cache.billing.pricing import (
    FULL_PRICE_BP,
    SERVED,
    ExplicitOutcome,
    RequestUsage,
    bill,
    explicit_eligible,
    usage_from_response,
)
from cache.store_redis import REDIS_ERRORS
from gateway.pipeline import budgets
from gateway.pipeline.billing import EXACT_PREFIX_TOKENS
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import ENDPOINTS
from router.prompt import prompt_pieces
from router.tokenizers import tokenize

if TYPE_CHECKING:
    from gateway.pipeline.services import Meter


def row_source(ctx: RequestContext, *, completed: bool) -> str | None:
    """The one rule for a ledger row: the source the request is billed as, or None for no row.

    Decided from what happened, not from the outcome's status (what the client saw): a generation the
    replica started (``ctx.generation_started``: the last attempt's
    request was sent and not refused, whatever ended the request after that) is one row, ``upstream``
    or, for a batch line, ``batch``; an answer served without one (a response-cache or semantic hit, a
    coalesced follower) is a row at its source's rules once it ``completed`` (its usage is the served
    answer's); anything else (a 4xx before dispatch, a request every attempt of which failed, a
    fallback) is none. The table, path by path, is in docs/billing.md ("A row on every path")."""
    outcome = ctx.outcome
    if ctx.pool is None or ctx.tenant is None or ctx.parsed is None or outcome is None:
        return None
    if not ENDPOINTS[ctx.parsed.endpoint].billed:
        return None
    if ctx.generation_started:
        if outcome.ended == "resent":  # cut, to be sent again under its request id: that run's row
            return None
        return "batch" if ctx.batch_id is not None else "upstream"
    if completed and outcome.source in SERVED and outcome.usage is not None:
        return outcome.source
    return None


def _estimated_usage(ctx: RequestContext) -> RequestUsage:
    """The replica sent no usage: the prompt by the gateway's count (the router's, or the pool's
    tokenizer over what the replica received), the output one token per stream event relayed after
    the role-only chunk a chat stream opens with (none for an answer that was not streamed)."""
    assert ctx.parsed is not None and ctx.pool is not None
    decision, parsed = ctx.decision, ctx.parsed
    prompt = decision.prompt_tokens if decision is not None else 0
    if prompt <= 0:
        sent = ctx.upstream.payload if ctx.upstream is not None else parsed.body  # what the replica received
        pieces = prompt_pieces(parsed.endpoint, sent)
        prompt = tokenize(ctx.pool.router.tokenizer, pieces, EXACT_PREFIX_TOKENS).count
    lead = 1 if parsed.endpoint == "chat" else 0
    attempt = ctx.attempt
    completion = max(0, (attempt.chunks if attempt is not None else 0) - lead)
    cached = decision.matched_tokens if decision is not None and decision.prompt_tokens else None
    return RequestUsage(
        prompt, completion, cached or 0, "gateway_index" if cached is not None else "none", estimated=True
    )


async def _write_row(ctx: RequestContext, metering: Meter, source: str) -> None:
    """Price the request and write its ledger row."""
    assert ctx.pool is not None and ctx.tenant is not None and ctx.outcome is not None
    decision, pool, tenant = ctx.decision, ctx.pool, ctx.tenant
    model = pool.cfg.name  # ``pool.name``, one call less
    if ctx.outcome.usage is not None:
        index_cached = decision.matched_tokens if decision is not None and decision.prompt_tokens else None
        usage = usage_from_response(ctx.outcome.usage, index_cached)
    else:
        usage = _estimated_usage(ctx)
    rules = ctx.state.rules[model]
    explicit: ExplicitOutcome | None = None
    marked = ctx.marked
    fleet = source in ("upstream", "batch")
    if marked is not None and fleet and explicit_eligible(marked.prefix_tokens, rules):
        try:
            kind, _ = await metering.registry.lookup_or_create(
                tenant.id, model, marked.prefix_hash, marked.prefix_tokens, ctx.replica_id
            )
            explicit = ExplicitOutcome(marked.prefix_tokens, kind)
        except REDIS_ERRORS:  # registry away: billed as implicit (never more than without markers)
            metrics = ctx.process.metrics
            metrics.child(metrics.redis_errors, "explicit", "lookup").inc()
    batch = source == "batch"
    item = bill(
        usage,
        ctx.state.prices[model],
        rules,
        explicit,
        source,
        request_id=ctx.request_id,
        client_request_id=ctx.client_request_id,
        tenant=tenant.id,
        model=model,
        ts_ms=int(time.time() * 1000),
        price_factor_bp=ctx.state.policy.billing.batch_price_factor_bp if batch else FULL_PRICE_BP,
        replica_id=decision.replica.id if fleet and decision is not None else None,
    )
    new = await metering.record(item)
    if new:  # a row the ledger already had is counted already
        await budgets.count(ctx, item)
    m = ctx.process.metrics
    label = tenant.metric_label
    for token_kind, n in item.tokens.as_dict().items():
        if n:
            m.billed_tokens.inc(label, token_kind, by=n)
    m.billed_cost.inc(label, by=item.total_micros)
    ctx.line_item = item


def _start(ctx: RequestContext, *, completed: bool) -> asyncio.Task[None] | None:
    """Decide the request's row (once) and start writing it in a task of its own: a client that goes
    away while it is written cancels its handler, never the write."""
    metering = ctx.process.metering
    if metering is None or ctx.billed:
        return None
    ctx.billed = True
    source = row_source(ctx, completed=completed)
    if source is None:
        return None
    return metering.in_background(_write_row(ctx, metering, source))


async def settle(ctx: RequestContext) -> None:
    """``completed``: the row, written before the client can see the end of its answer."""
    write = _start(ctx, completed=True)
    if write is not None:
        await asyncio.shield(write)


def settle_unfinished(ctx: RequestContext) -> None:
    """``finished`` without ``completed`` (the client went away, a batch run was stopped, an error):
    the row of a generation the replica started, written without holding the handler."""
    _start(ctx, completed=False)
