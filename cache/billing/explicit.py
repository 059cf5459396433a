"""Registry of live explicit prompt-cache entries (the prefixes clients marked with cache_control).

An entry is keyed by (tenant, model, prefix hash) and holds the replica that computed the prefix, its
token count and when it was created. ``lookup_or_create`` is atomic: the first request creates the entry
(billed as a creation), later ones hit it (billed as a read) and push its expiry ``ttl_s`` further.
``get`` reads without renewing, for the router to pin a request to the replica holding the prefix.
``ttl_s`` on a call overrides the registry's default (per-model ``explicit_ttl_s`` in the policy).

Two implementations with the same async API:
- ``MemoryExplicitRegistry``: one gateway process, injectable clock, bounded size;
- ``RedisExplicitRegistry``: shared by all pods; one Lua script does GET → PEXPIRE or SET NX PX, so two
  pods racing on a new prefix yield exactly one creation.

The prefix hash must already be tenant-salted and must not be prompt text (the router's block hash is);
tenant and model ids appear in Redis keys, prompt content never does.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol, cast

import orjson
import redis.asyncio as aioredis

LookupKind = Literal["created", "hit"]


@dataclass(frozen=True, slots=True)
class ExplicitEntry:
    replica_id: str
    prefix_tokens: int
    created_at: float


@dataclass(frozen=True, slots=True)
class RegistryStats:
    """Counters for metrics. ``expired`` in Redis is counted lazily (see ``RedisExplicitRegistry``)."""

    live: int
    created: int
    hits: int
    expired: int
    evicted: int = 0


class ExplicitRegistry(Protocol):
    async def lookup_or_create(
        self,
        tenant: str,
        model: str,
        prefix_hash: int | str,
        prefix_tokens: int,
        replica_id: str,
        now: float | None = None,
        ttl_s: float | None = None,
    ) -> tuple[LookupKind, ExplicitEntry]: ...

    async def get(
        self, tenant: str, model: str, prefix_hash: int | str, now: float | None = None
    ) -> ExplicitEntry | None: ...

    async def stats(self) -> RegistryStats: ...


# ---------------------------------------------------------------------------------------------- memory


class MemoryExplicitRegistry:
    """In-process registry. ``clock`` (seconds) is injectable so tests control time.

    Expired entries are dropped (and counted in ``expired``) lazily on each call, via a heap of expiry
    times; at ``max_entries`` the entry closest to expiry is evicted (counted in ``evicted``).
    """

    def __init__(
        self, ttl_s: float = 300.0, max_entries: int = 100_000, clock: Callable[[], float] = time.time
    ):
        if ttl_s <= 0 or max_entries < 1:
            raise ValueError("ttl_s must be > 0 and max_entries >= 1")
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self._entries: dict[tuple[str, str, str], tuple[ExplicitEntry, float]] = {}
        self._heap: list[tuple[float, tuple[str, str, str]]] = []
        self.created = 0
        self.hits = 0
        self.expired = 0
        self.evicted = 0

    def _expire(self, now: float) -> None:
        # Each live entry has exactly one heap item with its current expiry; stale items (renewed entries)
        # are skipped. Bounded: every pop removes one heap item.
        while self._heap and self._heap[0][0] <= now:
            exp, key = heapq.heappop(self._heap)
            cur = self._entries.get(key)
            if cur is not None and cur[1] == exp:
                del self._entries[key]
                self.expired += 1
        if len(self._heap) > 4 * len(self._entries) + 64:
            self._heap = [(exp, k) for k, (_, exp) in self._entries.items()]
            heapq.heapify(self._heap)

    def _evict_one(self) -> None:
        while self._heap:
            exp, key = heapq.heappop(self._heap)
            cur = self._entries.get(key)
            if cur is not None and cur[1] == exp:
                del self._entries[key]
                self.evicted += 1
                return

    async def lookup_or_create(
        self,
        tenant: str,
        model: str,
        prefix_hash: int | str,
        prefix_tokens: int,
        replica_id: str,
        now: float | None = None,
        ttl_s: float | None = None,
    ) -> tuple[LookupKind, ExplicitEntry]:
        now = self.clock() if now is None else now
        self._expire(now)
        key = (tenant, model, str(prefix_hash))
        expires = now + (self.ttl_s if ttl_s is None else ttl_s)
        found = self._entries.get(key)
        if found is not None:
            entry = found[0]
            self._entries[key] = (entry, expires)
            heapq.heappush(self._heap, (expires, key))
            self.hits += 1
            return "hit", entry
        if len(self._entries) >= self.max_entries:
            self._evict_one()
        entry = ExplicitEntry(replica_id=replica_id, prefix_tokens=int(prefix_tokens), created_at=now)
        self._entries[key] = (entry, expires)
        heapq.heappush(self._heap, (expires, key))
        self.created += 1
        return "created", entry

    async def get(
        self, tenant: str, model: str, prefix_hash: int | str, now: float | None = None
    ) -> ExplicitEntry | None:
        now = self.clock() if now is None else now
        self._expire(now)
        found = self._entries.get((tenant, model, str(prefix_hash)))
        return found[0] if found else None

    async def stats(self) -> RegistryStats:
        self._expire(self.clock())
        return RegistryStats(len(self._entries), self.created, self.hits, self.expired, self.evicted)


# ----------------------------------------------------------------------------------------------- redis

# KEYS[1] entry key, KEYS[2] stats hash, KEYS[3] live zset (member = entry key, score = expiry ms)
# ARGV[1] entry JSON (used only on creation), ARGV[2] ttl ms
# Expiry is Redis's own (PX); the zset mirrors it with Redis's clock (TIME) so that "expired" can be
# counted: members whose score has passed are removed and counted here and in the stats script.
_LOOKUP_OR_CREATE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local gone = redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
if gone > 0 then redis.call('HINCRBY', KEYS[2], 'expired', gone) end
local v = redis.call('GET', KEYS[1])
if v then
  redis.call('PEXPIRE', KEYS[1], ttl)
  redis.call('ZADD', KEYS[3], now + ttl, KEYS[1])
  redis.call('HINCRBY', KEYS[2], 'hits', 1)
  return {'hit', v}
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
redis.call('ZADD', KEYS[3], now + ttl, KEYS[1])
redis.call('HINCRBY', KEYS[2], 'created', 1)
return {'created', ARGV[1]}
"""

_STATS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
if gone > 0 then redis.call('HINCRBY', KEYS[1], 'expired', gone) end
local s = redis.call('HMGET', KEYS[1], 'created', 'hits', 'expired')
return {redis.call('ZCARD', KEYS[2]), s[1] or 0, s[2] or 0, s[3] or 0}
"""


def _seg(s: str) -> str:
    """Length-prefixed key segment: tenant/model ids may contain ':' without ambiguity."""
    return f"{len(s)}.{s}"


class RedisExplicitRegistry:
    """Registry shared by all gateway pods (native Redis TTL).

    Counters: ``created`` and ``hits`` are exact (incremented in the same script as the change).
    ``live`` is the size of a zset mirroring each entry's expiry. ``expired`` counts zset members whose
    expiry passed, removed at the next ``lookup_or_create`` or ``stats`` call: exact in total, late by
    at most until that next call. An entry evicted by Redis memory pressure (``maxmemory``) before its
    TTL is still counted as expired when its time comes.
    """

    def __init__(self, client: aioredis.Redis, ttl_s: float = 300.0, key_prefix: str = "pgw"):
        if ttl_s <= 0:
            raise ValueError("ttl_s must be > 0")
        self.client = client
        self.ttl_ms = max(1, round(ttl_s * 1000))
        # One hash tag: every key the script touches is in one Redis Cluster slot.
        self.prefix = f"{{{key_prefix}:xc}}"
        self._lookup = client.register_script(_LOOKUP_OR_CREATE)
        self._stats = client.register_script(_STATS)

    def _key(self, tenant: str, model: str, prefix_hash: int | str) -> str:
        return f"{self.prefix}:e:{_seg(tenant)}:{_seg(model)}:{prefix_hash}"

    @property
    def _stats_key(self) -> str:
        return f"{self.prefix}:stats"

    @property
    def _live_key(self) -> str:
        return f"{self.prefix}:live"

    async def lookup_or_create(
        self,
        tenant: str,
        model: str,
        prefix_hash: int | str,
        prefix_tokens: int,
        replica_id: str,
        now: float | None = None,
        ttl_s: float | None = None,
    ) -> tuple[LookupKind, ExplicitEntry]:
        created_at = time.time() if now is None else now
        value = orjson.dumps(
            {"replica_id": replica_id, "prefix_tokens": int(prefix_tokens), "created_at": created_at}
        )
        kind, raw = await self._lookup(
            keys=[self._key(tenant, model, prefix_hash), self._stats_key, self._live_key],
            args=[value, self.ttl_ms if ttl_s is None else max(1, round(ttl_s * 1000))],
        )
        kind = kind.decode() if isinstance(kind, bytes) else kind
        return cast(LookupKind, kind), _decode_entry(raw)

    async def get(
        self, tenant: str, model: str, prefix_hash: int | str, now: float | None = None
    ) -> ExplicitEntry | None:
        raw = await self.client.get(self._key(tenant, model, prefix_hash))
        return _decode_entry(raw) if raw is not None else None

    async def stats(self) -> RegistryStats:
        live, created, hits, expired = await self._stats(keys=[self._stats_key, self._live_key])
        return RegistryStats(int(live), int(created), int(hits), int(expired))


def _decode_entry(raw: bytes | str) -> ExplicitEntry:
    d = orjson.loads(raw)
    return ExplicitEntry(
        replica_id=str(d["replica_id"]),
        prefix_tokens=int(d["prefix_tokens"]),
        created_at=float(d["created_at"]),
    )
