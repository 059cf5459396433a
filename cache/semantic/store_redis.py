"""The Redis semantic store (shared by every gateway pod), Cluster-safe.

Layout (``{prefix}`` is the policy's ``redis.key_prefix``):

* ``{prefix}:rc:{sv1:<tenant tag>:<hmac>}``: the entry, written by ``cache.store_redis.RedisStore``
  exactly like an exact-cache entry (so ``purge_tenant`` drops a tenant's semantic entries too);
* ``{prefix}:sc:t:{<tag>}``: the tag index, a hash entry key → intent;
* ``{prefix}:sc:e:{<tag>}``: the tag's epochs, a hash intent → counter.

Exact response-cache entries the policy's rules tie to an entity (``v1:`` keys) are put here as well:
they land in the same ``{prefix}:rc:`` keyspace the exact cache's ``RedisStore`` reads, and their keys
join the tag index beside the semantic ones, so one event removes both (counted apart by key shape).

The two keys of one tag share a hash tag, so an event updates both in one Lua script on one Cluster
slot; an entry's own key is alone in its slot, and everything that spans tags or entries is a pipeline
of single-slot commands (which a Cluster client splits per node). Tag ids are HMACs: no slot value
(an order number) appears in a key. Index keys live as long as their longest entry, epoch keys
``epoch_ttl_s`` (longer than any entry can live, so a counter never resets under a live entry).

Failures: a failed read is a miss (never a hit whose epochs could not be checked); a failed write is
"not stored"; a failed removal returns None and the epoch check still refuses what it should have removed
if the epoch bump went through (it runs first, in the same script).
"""

from __future__ import annotations

from collections.abc import Sequence

import redis.asyncio as aioredis

from cache.entry import Entry
from cache.semantic.invalidation import Removal
from cache.semantic.store import Epochs, Removed, SemanticStats, get_current, stamp
from cache.semantic.tags import TagRef
from cache.store import ErrorHook
from cache.store_redis import REDIS_ERRORS, RedisStore, entry_key

# KEYS[1] index, KEYS[2] epochs. ARGV: entry key, intent, max members, ttl ms, the epoch the answer was
# generated under. 1 added, 0 full, -1 stale (the epoch moved since: an event came during generation).
_ADD = """
if tonumber(redis.call('HGET', KEYS[2], ARGV[2]) or '0') ~= tonumber(ARGV[5]) then return -1 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return 0
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[4]) then redis.call('PEXPIRE', KEYS[1], ARGV[4]) end
return 1
"""

# KEYS[1] index, KEYS[2] epochs. ARGV: epoch ttl ms, number of bumped fields, the fields, then the
# intents whose members go (none: every member). Returns the removed entry keys.
_REMOVE = """
local nb = tonumber(ARGV[2])
for i = 3, 2 + nb do redis.call('HINCRBY', KEYS[2], ARGV[i], 1) end
redis.call('PEXPIRE', KEYS[2], ARGV[1])
local wanted = {}
local all = true
for i = 3 + nb, #ARGV do wanted[ARGV[i]] = true; all = false end
local flat = redis.call('HGETALL', KEYS[1])
local out = {}
for i = 1, #flat, 2 do
  if all or wanted[flat[i + 1]] then
    redis.call('HDEL', KEYS[1], flat[i])
    out[#out + 1] = flat[i]
  end
end
return out
"""


class RedisSemanticStore:
    def __init__(
        self,
        client: aioredis.Redis,
        *,
        key_prefix: str = "pgw",
        max_entry_bytes: int = 1024 * 1024,
        max_entries_per_tag: int = 100_000,
        epoch_ttl_s: float = 3 * 86400,
        on_error: ErrorHook | None = None,
    ) -> None:
        self.redis = client
        self.prefix = key_prefix
        self.entries = RedisStore(
            client=client, key_prefix=key_prefix, max_entry_bytes=max_entry_bytes, on_error=on_error
        )
        self.max_entries_per_tag = max_entries_per_tag
        self.epoch_ttl_ms = max(1, int(epoch_ttl_s * 1000))
        self.on_error = on_error
        self.stats = SemanticStats()
        self._add = client.register_script(_ADD)
        self._remove = client.register_script(_REMOVE)

    def _index_key(self, tag: str) -> str:
        return f"{self.prefix}:sc:t:{{{tag}}}"

    def _epoch_key(self, tag: str) -> str:
        return f"{self.prefix}:sc:e:{{{tag}}}"

    def _failed(self, op: str, exc: BaseException) -> None:
        self.stats.errors += 1
        if self.on_error is not None:
            self.on_error(op, exc)

    async def epochs(self, refs: Sequence[TagRef]) -> Epochs | None:
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for r in refs:
                    pipe.hget(self._epoch_key(r.tag), r.field)
                raw = await pipe.execute()
        except REDIS_ERRORS as exc:
            self._failed("epochs", exc)
            return None
        return (0, *(int(v) if v is not None else 0 for v in raw))

    async def get(self, key: str) -> Entry | None:
        return await get_current(self.entries, self.epochs, self.stats, key)

    async def put(self, key: str, entry: Entry, ttl_s: float, refs: Sequence[TagRef], basis: Epochs) -> str:
        ttl_ms = max(1, int(ttl_s * 1000))
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for r, epoch in zip(refs, basis[1:], strict=True):
                    await self._add(
                        keys=[self._index_key(r.tag), self._epoch_key(r.tag)],
                        args=[key, r.field, self.max_entries_per_tag, ttl_ms, epoch],
                        client=pipe,
                    )
                added = await pipe.execute()
        except REDIS_ERRORS as exc:
            self._failed("index", exc)
            self.stats.not_stored += 1
            return "error"
        if not all(a == 1 for a in added):
            await self._unindex(key, [r for r, a in zip(refs, added, strict=True) if a == 1])
            self.stats.not_stored += 1
            return "stale_basis" if -1 in added else "tag_full"
        if not await self.entries.set(key, stamp(entry, refs, basis), ttl_s):
            self.stats.not_stored += 1
            return "too_large_or_error"
        now = await self.epochs(refs)
        if now != tuple(basis):  # an event came between the basis and the write: take it back
            await self.entries.delete(key)
            self.stats.not_stored += 1
            return "stale_basis"
        self.stats.sets += 1
        return "stored"

    async def _unindex(self, key: str, refs: Sequence[TagRef]) -> None:
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for r in refs:
                    pipe.hdel(self._index_key(r.tag), key)
                await pipe.execute()
        except REDIS_ERRORS as exc:
            self._failed("unindex", exc)

    async def remove(self, removals: Sequence[Removal]) -> Removed | None:
        """The entries ``removals`` reach, removed (semantic and exact apart); None when Redis failed."""
        try:
            doomed: list[bytes] = []
            for rm in removals:
                wanted = sorted(rm.intents) if rm.intents is not None else []
                doomed += await self._remove(
                    keys=[self._index_key(rm.tag), self._epoch_key(rm.tag)],
                    args=[self.epoch_ttl_ms, len(rm.bump), *rm.bump, *wanted],
                )
            keys = [k.decode() for k in dict.fromkeys(doomed)]
            async with self.redis.pipeline(transaction=False) as pipe:
                for k in keys:
                    pipe.unlink(entry_key(self.prefix, k))
                gone = await pipe.execute()
        except REDIS_ERRORS as exc:
            self._failed("remove", exc)
            return None
        removed = Removed()
        for k, n in zip(keys, gone, strict=True):
            if n:
                removed.count(k)
        self.stats.removed += removed.semantic + removed.exact
        return removed

    async def close(self) -> None:
        await self.entries.close()
