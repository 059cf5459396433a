"""Fixtures of the integration suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger


@pytest.fixture(params=["sqlite", "redis"])
async def ledger(request, tmp_path, redis_url) -> AsyncIterator[SqliteLedger | RedisLedger]:
    """Each billing ledger in turn: a SQLite file, then a real Redis."""
    if request.param == "sqlite":
        led = await SqliteLedger.open(str(tmp_path / "var" / "ledger.db"))
        yield led
        await led.close()
    else:
        client = aioredis.from_url(redis_url)
        yield RedisLedger(client, key_prefix="test", stream_maxlen=10_000)
        await client.aclose()
