"""The ledger a policy names: SQLite (embedded) or Redis (shared by pods)."""

from __future__ import annotations

import redis.asyncio as aioredis

from cache.billing.ledger import Ledger
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from config.billing import LedgerConfig


async def open_ledger(
    cfg: LedgerConfig,
    redis_client: aioredis.Redis | None = None,
    key_prefix: str = "pgw",
    *,
    create: bool = True,
) -> Ledger:
    """The ledger the policy asks for. ``kind: redis`` needs the gateway's Redis client. ``create``:
    False for a reader (a report), which must find the SQLite file rather than make an empty one."""
    if cfg.kind == "redis":
        if redis_client is None:
            raise ValueError("billing.ledger.kind is 'redis' but no Redis is configured (redis.url)")
        return RedisLedger(
            redis_client,
            key_prefix=key_prefix,
            stream_maxlen=cfg.stream_maxlen,
            counters_ttl_days=cfg.counters_ttl_days,
            idempotency_ttl_s=cfg.idempotency_ttl_s,
        )
    return await SqliteLedger.open(
        cfg.path,
        synchronous=cfg.synchronous,
        group_commit_rows=cfg.group_commit_rows,
        create=create,
        group_commit_ms=cfg.group_commit_ms,
    )
