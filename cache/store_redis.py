"""The Redis response store (shared by every gateway pod), and the Redis client settings of cache/.

Layout: ``{prefix}:rc:{v1:<tenant tag>:<hmac>}``. The whole cache key is the Redis Cluster hash tag, so
entries spread over slots and the coalescing lease of a key (``{prefix}:lease:{...}``) lands in the
same slot as its entry. Values are ``Entry.to_bytes()`` (orjson); TTL is Redis' own.

Every call fails open: an unreachable or slow Redis is a miss (get), "not stored" (set) or a no-op,
counted in ``stats.errors`` and reported to ``on_error``. redis-py reconnects by itself on the next
call once the server is back. How long "slow" may be is the client's (``cache.redis_guard``).
"""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from cache.entry import Entry, EntryError
from cache.redis_guard import GuardedRedis, RedisGuard
from cache.store import ErrorHook, StoreStats, encode_entry

#: What a Redis call may raise when the server is away or slow.
REDIS_ERRORS: tuple[type[BaseException], ...] = (RedisError, OSError, asyncio.TimeoutError)

_MAX_SCAN_ROUNDS = 100_000


def connect(
    url: str, socket_timeout_s: float = 0.5, max_connections: int = 64, guard: RedisGuard | None = None
) -> aioredis.Redis:
    """A client that fails fast (one immediate retry, for a connection dropped by a server restart),
    every call within ``guard``'s deadline and breaker (``cache.redis_guard``; default settings when
    not given).

    The pool is bounded and blocking: a burst of a thousand requests queues for ``max_connections``
    connections instead of opening a thousand sockets and timing out on their handshakes, which would
    turn a stampede into cache misses; the wait counts in each call's deadline.
    """
    guard = guard or RedisGuard()
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        # The guard decides how long a call may wait (its deadlines, extended while Redis answers
        # others); the pool's own wait is only a backstop past that: at 2 s it was shorter than the
        # guard's 3 s (30 deadlines of 100 ms) and failed a queued burst on a busy machine as
        # "No connection available" (tests/integration/test_redis_guard.py, the busy-process test).
        timeout=max(2.0, 4 * socket_timeout_s, guard.max_wait_s + socket_timeout_s),
        socket_timeout=socket_timeout_s,
        socket_connect_timeout=socket_timeout_s,
        retry=Retry(NoBackoff(), 1),
        decode_responses=False,
    )
    # The client owns the pool: aclose() closes its connections (and stops the guard's probe).
    return GuardedRedis.owning(pool, guard)


def entry_key(prefix: str, key: str) -> str:
    return f"{prefix}:rc:{{{key}}}"


class RedisStore:
    def __init__(
        self,
        url: str | None = None,
        *,
        client: aioredis.Redis | None = None,
        key_prefix: str = "pgw",
        max_entry_bytes: int = 1024 * 1024,
        socket_timeout_s: float = 0.5,
        on_error: ErrorHook | None = None,
    ):
        if client is None:
            if url is None:
                raise ValueError("RedisStore needs a url or a client")
            client = connect(url, socket_timeout_s)
            self._owns_client = True
        else:
            self._owns_client = False
        self.redis = client
        self.prefix = key_prefix
        self.max_entry_bytes = max_entry_bytes
        self.on_error = on_error
        self.stats = StoreStats()

    def _failed(self, op: str, exc: BaseException) -> None:
        self.stats.errors += 1
        if self.on_error is not None:
            self.on_error(op, exc)

    async def get(self, key: str) -> Entry | None:
        try:
            raw = await self.redis.get(entry_key(self.prefix, key))
        except REDIS_ERRORS as exc:
            self._failed("get", exc)
            self.stats.misses += 1
            return None
        if raw is None:
            self.stats.misses += 1
            return None
        try:
            entry = Entry.from_bytes(raw)
        except EntryError as exc:
            self._failed("decode", exc)
            self.stats.misses += 1
            return None
        self.stats.hits += 1
        return entry

    async def set(self, key: str, entry: Entry, ttl_s: float) -> bool:
        raw = encode_entry(entry, ttl_s, self.max_entry_bytes, self.stats)
        if raw is None:
            return False
        try:
            await self.redis.set(entry_key(self.prefix, key), raw, px=max(1, int(ttl_s * 1000)))
        except REDIS_ERRORS as exc:
            self._failed("set", exc)
            return False
        self.stats.sets += 1
        return True

    async def delete(self, key: str) -> None:
        try:
            await self.redis.delete(entry_key(self.prefix, key))
        except REDIS_ERRORS as exc:
            self._failed("delete", exc)

    async def purge_tenant(self, tag: str) -> int:
        """Delete every entry of one tenant tag (SCAN, so it never blocks Redis); -1 on failure."""
        pattern = f"{self.prefix}:rc:{{*:{tag}:*"
        removed, cursor, rounds = 0, 0, 0
        try:
            while rounds < _MAX_SCAN_ROUNDS:
                rounds += 1
                cursor, keys = await self.redis.scan(cursor=cursor, match=pattern, count=500)
                if keys:
                    removed += await self.redis.unlink(*keys)
                if cursor == 0:
                    break
        except REDIS_ERRORS as exc:
            self._failed("purge", exc)
            return -1
        return removed

    async def close(self) -> None:
        if self._owns_client:
            await self.redis.aclose()
