"""Prompt-cache billing on the request path: markers before, one ledger row after.

Before the request: ``cache_control`` markers are found (more than the policy allows → 400), the
marked prefix is rendered and counted with the pool's tokenizer, and the markers are stripped from what
the replica receives. After it: the replica's usage (or, for an aborted stream, what was generated) is
priced by ``cache.billing.bill`` and written to the ledger, once per request id, before the client sees
the end of its answer (the JSON body, or a stream's ``[DONE]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis.asyncio as aioredis
import xxhash

from cache.billing.explicit import ExplicitRegistry, MemoryExplicitRegistry, RedisExplicitRegistry
from cache.billing.ledger import Ledger, open_ledger
from cache.billing.markers import MarkerError, TooManyMarkers, find_markers, strip_markers
from cache.billing.pricing import (
    ExplicitOutcome,
    LineItem,
    ModelPrices,
    RequestUsage,
    Rules,
    bill,
    explicit_eligible,
    prices_from_config,
    rules_from_config,
    usage_from_response,
)
from cache.store_redis import REDIS_ERRORS
from config.policy import Policy
from gateway.errors import GatewayError
from gateway.fleet.pools import Pool
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.parse import ParsedRequest
from gateway.pipeline.tenant import Tenant
from router.prompt import render_prompt

if TYPE_CHECKING:  # gateway.pipeline.context imports the state, which imports this module
    from gateway.pipeline.context import Outcome

log = logging.getLogger("prefix_gateway")

PENDING_MAX = 100_000


@dataclass(slots=True)
class Metering:
    policy: Policy
    ledger: Ledger
    registry: ExplicitRegistry
    rules: dict[str, Rules]
    prices: dict[str, ModelPrices]
    metrics: GatewayMetrics
    _background: set[asyncio.Task[Any]] = field(default_factory=set)
    # Rows the ledger refused (Redis away, disk full): kept and retried, never dropped silently.
    _pending: deque[LineItem] = field(default_factory=lambda: deque(maxlen=PENDING_MAX))
    _flusher: asyncio.Task[None] | None = None

    def reconfigure(self, policy: Policy) -> None:
        """Prices and rules of a reloaded policy (the ledger and the registry stay: restart-only)."""
        names = [m.name for m in policy.models]
        self.policy = policy
        self.rules = {n: rules_from_config(policy.billing, n) for n in names}
        self.prices = {n: prices_from_config(policy.billing, n) for n in names}

    async def record(self, item: LineItem) -> None:
        try:
            await self.ledger.record(item)
        except Exception:
            self.metrics.ledger_errors.inc()
            if len(self._pending) == PENDING_MAX:
                log.error("ledger retry queue full; dropping the oldest row", extra={"event": "ledger_drop"})
            self._pending.append(item)
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._flush())

    async def _flush(self) -> None:
        """Retry refused rows in order until the ledger takes them (recording is idempotent)."""
        delay = 0.5
        while self._pending:
            await asyncio.sleep(delay)
            try:
                while self._pending:
                    await self.ledger.record(self._pending[0])
                    self._pending.popleft()
                log.info("ledger writes recovered", extra={"event": "ledger_recovered"})
            except Exception:
                delay = min(delay * 2, 10.0)

    async def close(self) -> None:
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if self._pending:
            with contextlib.suppress(Exception):
                while self._pending:
                    await self.ledger.record(self._pending[0])
                    self._pending.popleft()
            if self._pending:
                log.error(
                    "ledger closed with unwritten rows",
                    extra={"event": "ledger_unwritten", "rows": len(self._pending)},
                )
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.ledger.close()


async def build_metering(
    policy: Policy, metrics: GatewayMetrics, redis: aioredis.Redis | None
) -> Metering | None:
    cfg = policy.billing
    if not cfg.enabled:
        return None
    ledger = await open_ledger(cfg.ledger, redis_client=redis, key_prefix=policy.redis.key_prefix)
    registry: ExplicitRegistry
    if redis is not None:
        registry = RedisExplicitRegistry(
            redis, ttl_s=cfg.rules.explicit_ttl_s, key_prefix=policy.redis.key_prefix
        )
    else:
        registry = MemoryExplicitRegistry(ttl_s=cfg.rules.explicit_ttl_s)
    metering = Metering(policy=policy, ledger=ledger, registry=registry, rules={}, prices={}, metrics=metrics)
    metering.reconfigure(policy)
    return metering


@dataclass(slots=True)
class Marked:
    """The request's explicit cache prefix (marker to start), as the registry keys it."""

    prefix_hash: str
    prefix_tokens: int


@dataclass(slots=True)
class BillingContext:
    payload: dict[str, Any]  # what goes upstream: markers stripped
    marked: Marked | None
    item: LineItem | None = None
    settled: bool = False


def prepare(metering: Metering | None, pool: Pool, parsed: ParsedRequest, tenant: Tenant) -> BillingContext:
    """Find and strip ``cache_control`` markers; a bad marker is the client's 400."""
    if parsed.endpoint != "chat":
        return BillingContext(parsed.body, None)
    max_markers = metering.rules[pool.name].max_markers if metering is not None else 4
    try:
        found = find_markers(parsed.body, max_markers)
    except TooManyMarkers as exc:
        raise GatewayError(400, str(exc), param="messages", code="too_many_cache_markers") from None
    except MarkerError as exc:
        raise GatewayError(400, str(exc), param="messages", code="invalid_cache_marker") from None
    if found is None:
        return BillingContext(parsed.body, None)
    payload = parsed.body if pool.cfg.accepts_cache_control else strip_markers(parsed.body)
    prompt = render_prompt("chat", found.body)
    if isinstance(prompt, list):  # token ids (not for chat) — count them as they are
        tokens = len(prompt)
        digest = xxhash.xxh3_128_hexdigest(repr(prompt).encode())
    else:
        tokens = pool.router.tokenizer.encode(prompt).count
        digest = xxhash.xxh3_128_hexdigest(prompt.encode("utf-8"), seed=0)
    # The registry is per tenant already; the salt in the hash keeps digests unlinkable across tenants.
    prefix_hash = xxhash.xxh3_128_hexdigest(tenant.salt.encode() + digest.encode())
    return BillingContext(payload, Marked(prefix_hash, tokens))


async def pinned_replica(metering: Metering, ctx: BillingContext, pool: Pool, tenant: Tenant) -> str | None:
    """The replica holding the request's live explicit entry, if any (read only: no renewal)."""
    if ctx.marked is None or not explicit_eligible(ctx.marked.prefix_tokens, metering.rules[pool.name]):
        return None
    try:
        entry = await metering.registry.get(tenant.id, pool.name, ctx.marked.prefix_hash)
    except REDIS_ERRORS:  # no pin while Redis is away; routing still works
        metering.metrics.redis_errors.labels("explicit", "get").inc()
        return None
    return entry.replica_id if entry is not None else None


def _aborted_usage(outcome: Outcome) -> dict[str, Any] | None:
    """A stream cut before its usage chunk is billed for what was generated (estimated)."""
    if outcome.prompt_tokens <= 0 and outcome.generated_chunks <= 0:
        return None
    return {"prompt_tokens": outcome.prompt_tokens, "completion_tokens": max(0, outcome.generated_chunks - 1)}


async def settle(
    metering: Metering, ctx: BillingContext, pool: Pool, tenant: Tenant, outcome: Outcome
) -> LineItem | None:
    """Price the request and write its ledger row (once). None when there is nothing to bill."""
    if ctx.settled:
        return ctx.item
    ctx.settled = True
    if outcome.source == "fallback" or outcome.status not in (0, 200):
        return None
    usage_json = outcome.usage
    index_cached: int | None = outcome.matched_tokens if outcome.prompt_tokens else None
    if usage_json is None:
        usage_json = _aborted_usage(outcome)
        if usage_json is None:
            return None
    usage: RequestUsage = usage_from_response(usage_json, index_cached)
    rules = metering.rules[pool.name]
    explicit: ExplicitOutcome | None = None
    if (
        ctx.marked is not None
        and outcome.source == "upstream"
        and explicit_eligible(ctx.marked.prefix_tokens, rules)
    ):
        try:
            kind, _ = await metering.registry.lookup_or_create(
                tenant.id, pool.name, ctx.marked.prefix_hash, ctx.marked.prefix_tokens, outcome.replica
            )
            explicit = ExplicitOutcome(ctx.marked.prefix_tokens, kind)
        except REDIS_ERRORS:  # registry away: billed as implicit (never more than without markers)
            metering.metrics.redis_errors.labels("explicit", "lookup").inc()
    item = bill(
        usage,
        metering.prices[pool.name],
        rules,
        explicit,
        outcome.source,
        request_id=outcome.request_id,
        tenant=tenant.id,
        model=pool.name,
        ts_ms=int(time.time() * 1000),
    )
    await metering.record(item)
    m = metering.metrics
    label = tenant.metric_label
    for kind, n in item.tokens.as_dict().items():
        if n:
            m.billed_tokens.labels(label, kind).inc(n)
    m.billed_cost.labels(label).inc(item.total_micros)
    ctx.item = item
    return item


def settle_in_background(metering: Metering, coro: Any) -> None:
    """For a request whose client went away: finish its row without holding the cancelled handler."""
    task = asyncio.ensure_future(coro)
    metering._background.add(task)
    task.add_done_callback(metering._background.discard)
