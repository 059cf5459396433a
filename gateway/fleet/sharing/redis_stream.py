"""The shared index over Redis: one stream, ``<redis.key_prefix>:routing:placements``, for every pod.

Each flush is one pipelined round trip: ``XADD ... MAXLEN ~ stream_max_len`` per batch and an
``EXPIRE`` of ``stream_ttl_s``, so the stream's memory is bounded by its length and it disappears when
no gateway writes. The reader follows the stream with ``XREAD BLOCK`` from the last id it applied; at
start and after an outage it applies the newest ``join_entries`` entries first (``XREVRANGE``) and
follows from the newest, so a new pod, or one whose Redis restarted empty, starts from the fleet's
recent picture. Every command names one key: Redis Cluster serves it from one slot.

Two single-connection clients of their own, apart from the request path's pool: the reader's blocks
for ``read_block_ms`` at a time, and neither ever queues behind, or holds, a connection a request
needs. Their socket timeout is the policy's ``redis.socket_timeout_s`` (plus the block for the reader); a
closed connection is reopened once per command, a timeout is not retried.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from config.policy import Policy
from gateway.fleet.sharing.core import TransportError

_FIELD = b"b"
# Stream entries one read returns at most. redis-py parses a reply in Python (no hiredis here): a page
# of 16 entries of a few KB is well under a millisecond of the loop, 1,000 of them were tens of ms that
# every decision planned meanwhile waited (python -m bench.multigw).
PAGE = 16


def stream_key(prefix: str) -> str:
    return f"{prefix}:routing:placements"


def _client(url: str, socket_timeout_s: float) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=1,
        timeout=socket_timeout_s,
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        # A connection the server closed (a restart) is made again once, at once: without it the first
        # flush after every Redis restart was lost (tests/integration/test_multigw_e2e.py, the stalled
        # Redis test). A timeout is never retried: a stalled Redis costs one socket timeout, not two.
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        decode_responses=False,
    )
    return aioredis.Redis.from_pool(pool)


class RedisStream:
    name = "redis"

    def __init__(self, policy: Policy) -> None:
        r, cfg = policy.redis, policy.shared_index
        assert r.url is not None
        self.key = stream_key(r.key_prefix)
        self.cfg = cfg
        self.writer = _client(r.url, r.socket_timeout_s)
        self.reader = _client(r.url, r.socket_timeout_s + cfg.read_block_ms / 1000)
        self.last_id: bytes = b"0-0"

    async def open(self) -> None:
        return None  # connections are made on first use, and again after a failure

    async def send(self, batches: Sequence[bytes]) -> None:
        try:
            async with self.writer.pipeline(transaction=False) as pipe:
                for b in batches:
                    pipe.xadd(self.key, {_FIELD: b}, maxlen=self.cfg.stream_max_len, approximate=True)
                pipe.expire(self.key, self.cfg.stream_ttl_s)
                await pipe.execute()
        except (RedisError, OSError, TimeoutError) as exc:
            raise TransportError(str(exc)) from exc

    async def join(self) -> list[bytes]:
        try:
            newest = await self.reader.xrevrange(self.key, count=max(1, self.cfg.join_entries))
        except (RedisError, OSError, TimeoutError) as exc:
            raise TransportError(str(exc)) from exc
        self.last_id = newest[0][0] if newest else b"0-0"
        if not self.cfg.join_entries:
            return []
        return [fields[_FIELD] for _, fields in reversed(newest) if _FIELD in fields]

    async def receive(self) -> list[bytes]:
        try:
            got = await self.reader.xread({self.key: self.last_id}, count=256, block=self.cfg.read_block_ms)
        except (RedisError, OSError, TimeoutError) as exc:
            raise TransportError(str(exc)) from exc
        out: list[bytes] = []
        for _key, entries in got or ():
            for entry_id, fields in entries:
                self.last_id = entry_id
                if _FIELD in fields:
                    out.append(fields[_FIELD])
        return out

    async def close(self) -> None:
        await self.writer.aclose()
        await self.reader.aclose()
