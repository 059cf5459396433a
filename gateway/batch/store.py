"""Durable job state of batches: the interface both stores implement, and the one that opens them.

A store keeps each batch's record (its status only moves along ``objects``' transitions, checked and
written atomically, so two pods racing never both move it), its per-line results, and the lease that
says which process runs it.

- **Exactly once per ``custom_id``**: ``record`` inserts a line's result only if that ``custom_id`` has
  none (a primary key / ``HSETNX``); a line re-run after a crash, or by a stale pod after a takeover,
  changes nothing. The result files are written from these rows at the end, in input order, under ids
  derived from the batch id, so a finalization repeated after a crash rewrites the same files.
- **Leases**: ``claim`` takes a batch whose lease is free or expired, or renews one's own; the holder
  renews every third of the lease. A pod that dies stops renewing and another takes the batch over
  after at most one lease. Only results and moves are written by holders; both are idempotent or
  checked, so even a holder that lost its lease without noticing cannot duplicate or undo anything.

Implementations: ``store_sqlite.SqliteJobStore`` (embedded; processes of one host share the file) and
``store_redis.RedisJobStore`` (several pods). ``open_store`` builds the configured one.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from gateway.batch.objects import BatchRecord, LineResult
from gateway.batch.store_redis import RedisJobStore
from gateway.batch.store_sqlite import SqliteJobStore

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from config.batch import BatchConfig


class JobStore(Protocol):
    async def create(self, rec: BatchRecord) -> None: ...

    async def get(self, batch_id: str) -> BatchRecord | None: ...

    async def list(self, tenant: str, *, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        """The tenant's batches, newest first, after the batch ``after``; and whether more follow."""
        ...

    async def active(self, tenant: str) -> builtins.list[BatchRecord]:
        """The tenant's batches that have not ended."""
        ...

    async def move(self, batch_id: str, to: str, now: int, **changes: Any) -> BatchRecord | None:
        """Move the batch to status ``to`` (with ``changes``) if its current status allows it; the new
        record, or None when it does not."""
        ...

    async def record(self, batch_id: str, results: Sequence[LineResult]) -> int:
        """Insert results of lines that have none yet; how many were inserted."""
        ...

    async def counts(self, batch_id: str) -> tuple[int, int]:
        """(completed, failed) lines recorded so far."""
        ...

    async def recorded(self, batch_id: str) -> set[str]:
        """``custom_id`` of every line recorded so far."""
        ...

    def results(self, batch_id: str) -> AsyncIterator[LineResult]:
        """Every recorded result, in input line order."""
        ...

    async def drop_results(self, batch_id: str) -> None:
        """Forget the per-line results (once they are in the batch's result files)."""
        ...

    async def claim(self, batch_id: str, owner: str, ttl_s: float) -> bool:
        """Take the batch's lease (free, expired, or already ``owner``'s) for ``ttl_s``."""
        ...

    async def release(self, batch_id: str, owner: str) -> None: ...

    async def runnable(self) -> builtins.list[str]:
        """Ids of batches that have not ended and that no live lease holds, oldest first."""
        ...

    async def count_by_status(self) -> dict[str, int]:
        """Batches (of every tenant) per status; statuses without one may be left out."""
        ...

    async def running_models(self) -> set[str]:
        """Models of the batches ``in_progress`` under a live lease: a process somewhere runs them."""
        ...

    async def close(self) -> None: ...


async def open_store(
    cfg: BatchConfig, redis_client: aioredis.Redis | None = None, key_prefix: str = "pgw"
) -> JobStore:
    """The store the policy asks for. ``store: redis`` needs the gateway's Redis client."""
    if cfg.store == "redis":
        if redis_client is None:
            raise ValueError("batch.store is 'redis' but no Redis is configured (redis.url)")
        return RedisJobStore(redis_client, key_prefix=key_prefix)
    return await SqliteJobStore.open(cfg.sqlite_path)
