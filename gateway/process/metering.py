"""The billing ledger of a process, and the rows it has not taken yet.

A ``Metering`` outlives reloads (the ledger and the explicit-cache registry are restart-only: a
reloaded policy changes prices and rules, which live in the policy-derived state). Rows the ledger
refuses (Redis away, disk full) are kept in order, bounded, and retried until it takes them; the
ledger's ``record`` is idempotent, so a retried row never counts twice. A refusal is counted
(``prefix_gateway_ledger_errors_total``) and logged as a warning at most once per
``WARN_INTERVAL_S``, with the error's type and the rows waiting; the recovery is logged too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis

from cache.billing.explicit import ExplicitRegistry, MemoryExplicitRegistry, RedisExplicitRegistry
from cache.billing.ledger import Ledger
from cache.billing.ledgers import open_ledger
from cache.billing.pricing import LineItem
from config.policy import Policy
from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("prefix_gateway")

PENDING_MAX = 100_000
WARN_INTERVAL_S = 10.0


@dataclass(slots=True, eq=False)
class Metering:
    ledger: Ledger
    registry: ExplicitRegistry
    metrics: GatewayMetrics
    _background: set[asyncio.Task[Any]] = field(default_factory=set)
    # Rows the ledger refused: kept and retried, never dropped silently.
    _pending: deque[LineItem] = field(default_factory=lambda: deque(maxlen=PENDING_MAX))
    _flusher: asyncio.Task[None] | None = None
    _warned_at: float = -1e9

    async def record(self, item: LineItem) -> bool:
        """Write the row (or keep it for a retry); False when the ledger already had it."""
        try:
            return await self.ledger.record(item)
        except Exception as exc:
            self.metrics.ledger_errors.inc()
            if len(self._pending) == PENDING_MAX:
                log.error("ledger retry queue full; dropping the oldest row", extra={"event": "ledger_drop"})
            self._pending.append(item)
            self._warn(exc)
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._flush())
            return True

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned_at >= WARN_INTERVAL_S:
            self._warned_at = now
            log.warning(
                "ledger write failed; the row is kept and retried",
                extra={
                    "event": "ledger_write_failed",
                    "error": type(exc).__name__,
                    "pending": len(self._pending),
                },
            )

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
            except Exception as exc:
                self._warn(exc)
                delay = min(delay * 2, 10.0)

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` (a request's row) as a task of its own, which a cancelled handler does not
        cancel; ``close`` waits for it."""
        task = asyncio.get_running_loop().create_task(coro)  # ``ensure_future``'s checks: 4 calls more
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

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


async def open_metering(
    policy: Policy, metrics: GatewayMetrics, redis: aioredis.Redis | None
) -> Metering | None:
    """The ledger and explicit registry the policy names (None when billing is off). ``redis`` is the
    process's client: used, never closed here."""
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
    return Metering(ledger=ledger, registry=registry, metrics=metrics)
