"""Shared job store in Redis, for several gateway pods: batch records, per-line results and leases.

Key layout (``P`` = ``<key_prefix>:batch``; the per-batch keys share the hash tag ``{<batch id>}`` so
each script touches one slot of a Redis Cluster): ``P:{id}:o`` the record (JSON), ``P:{id}:r`` results
(hash ``custom_id`` → ok flag + result line), ``P:{id}:i`` the line number of each result (sorted set,
to write result files in input order without reading them all at once), ``P:{id}:n`` counts
(``ok``/``fail``), ``P:{id}:l`` the lease (owner token, ``PX``); ``P:t:<tenant>`` a tenant's batches
and ``P:active`` the batches that have not ended (sorted sets by creation sequence ``P:seq``);
``P:status`` the number of batches per status (a hash, moved in the same transaction as the record).

- ``record`` is one script: ``HSETNX`` the result, and only if it was new index and count it, so a line
  answered twice (a re-run after a takeover) is counted once.
- ``move`` is a ``WATCH``/``MULTI`` check-and-set of the record: two pods moving one batch cannot both
  succeed; a move to an end status also leaves ``P:active`` in the same transaction.
- ``claim`` sets the lease if the batch has not ended and the lease is free or already the caller's;
  ``release`` deletes it only if it is the caller's (both scripts). An expired lease is simply gone: a dead pod's batch is runnable again.

No prompt text is written besides what a batch's own results hold: ids, statuses, counts and answers.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.exceptions import WatchError

from gateway.batch.objects import TERMINAL, BatchRecord, LineResult, can_move

# KEYS: 1 results hash, 2 line index zset, 3 counts hash. ARGV: (custom_id, line, ok flag, result) * n
_RECORD = """
local n = 0
for i = 1, #ARGV, 4 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 2] .. ARGV[i + 3]) == 1 then
    redis.call('ZADD', KEYS[2], ARGV[i + 1], ARGV[i])
    redis.call('HINCRBY', KEYS[3], ARGV[i + 2] == '1' and 'ok' or 'fail', 1)
    n = n + 1
  end
end
return n
"""
# KEYS: 1 lease, 2 record. ARGV: 1 owner, 2 ttl ms, 3.. the statuses a batch ends in
_CLAIM = """
local raw = redis.call('GET', KEYS[2])
if not raw then return 0 end
local status = cjson.decode(raw)['status']
for i = 3, #ARGV do if status == ARGV[i] then return 0 end end
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""
_PAGE = 500


def _seg(s: str) -> str:
    return f"{len(s)}.{s}"


class RedisJobStore:
    def __init__(self, client: aioredis.Redis, key_prefix: str = "pgw"):
        self.client = client
        self.p = f"{key_prefix}:batch"
        self._record = client.register_script(_RECORD)
        self._claim = client.register_script(_CLAIM)
        self._release = client.register_script(_RELEASE)

    def _k(self, batch_id: str, kind: str) -> str:
        return f"{self.p}:{{{batch_id}}}:{kind}"

    def _tenant(self, tenant: str) -> str:
        return f"{self.p}:t:{_seg(tenant)}"

    @property
    def _active(self) -> str:
        return f"{self.p}:active"

    @property
    def _status(self) -> str:
        return f"{self.p}:status"

    # -- batches ----------------------------------------------------------------------------------------

    async def create(self, rec: BatchRecord) -> None:
        seq = await self.client.incr(f"{self.p}:seq")
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.set(self._k(rec.id, "o"), orjson.dumps(rec.to_dict()))
            pipe.zadd(self._tenant(rec.tenant), {rec.id: seq})
            pipe.zadd(self._active, {rec.id: seq})
            pipe.hincrby(self._status, rec.status, 1)
            await pipe.execute()

    async def get(self, batch_id: str) -> BatchRecord | None:
        raw = await self.client.get(self._k(batch_id, "o"))
        return None if raw is None else BatchRecord.from_dict(orjson.loads(raw))

    async def _many(self, ids: Sequence[str]) -> list[BatchRecord]:
        if not ids:
            return []
        raws = await self.client.mget([self._k(i, "o") for i in ids])
        return [BatchRecord.from_dict(orjson.loads(r)) for r in raws if r is not None]

    async def list(self, tenant: str, *, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        key, top = self._tenant(tenant), "+inf"
        if after is not None:
            score = await self.client.zscore(key, after)
            if score is None:
                return [], False
            top = f"({score}"
        ids = await self.client.zrevrangebyscore(key, top, "-inf", start=0, num=limit + 1)
        recs = await self._many([i.decode() for i in ids])
        return recs[:limit], len(recs) > limit

    async def active(self, tenant: str) -> builtins.list[BatchRecord]:
        ids = [i.decode() for i in await self.client.zrange(self._active, 0, -1)]
        return [r for r in await self._many(ids) if r.tenant == tenant]

    async def move(self, batch_id: str, to: str, now: int, **changes: Any) -> BatchRecord | None:
        key = self._k(batch_id, "o")
        async with self.client.pipeline(transaction=True) as pipe:
            while True:
                try:
                    await pipe.watch(key)
                    raw = await pipe.get(key)
                    rec = None if raw is None else BatchRecord.from_dict(orjson.loads(raw))
                    if rec is None or not can_move(rec.status, to):
                        await pipe.unwatch()
                        return None
                    new = rec.moved(to, now, **changes)
                    pipe.multi()
                    pipe.set(key, orjson.dumps(new.to_dict()))
                    pipe.hincrby(self._status, rec.status, -1)
                    pipe.hincrby(self._status, to, 1)
                    if to in TERMINAL:
                        pipe.zrem(self._active, batch_id)
                        pipe.delete(self._k(batch_id, "l"))
                    await pipe.execute()
                    return new
                except WatchError:
                    continue

    # -- results ----------------------------------------------------------------------------------------

    async def record(self, batch_id: str, results: Sequence[LineResult]) -> int:
        if not results:
            return 0
        args: list[Any] = []
        for r in results:
            args += [r.custom_id, r.line, "1" if r.ok else "0", r.record]
        keys = [self._k(batch_id, "r"), self._k(batch_id, "i"), self._k(batch_id, "n")]
        return int(await self._record(keys=keys, args=args))

    async def counts(self, batch_id: str) -> tuple[int, int]:
        ok, fail = await self.client.hmget(self._k(batch_id, "n"), ["ok", "fail"])
        return int(ok or 0), int(fail or 0)

    async def recorded(self, batch_id: str) -> set[str]:
        return {k.decode() for k in await self.client.hkeys(self._k(batch_id, "r"))}

    async def results(self, batch_id: str) -> AsyncIterator[LineResult]:
        index, rkey = self._k(batch_id, "i"), self._k(batch_id, "r")
        start = 0
        while True:
            page = await self.client.zrange(index, start, start + _PAGE - 1, withscores=True)
            if not page:
                return
            values = await self.client.hmget(rkey, [cid for cid, _ in page])
            for (cid, line), value in zip(page, values, strict=True):
                if value is not None:
                    yield LineResult(cid.decode(), int(line), value[:1] == b"1", bytes(value[1:]))
            start += _PAGE

    async def drop_results(self, batch_id: str) -> None:
        await self.client.delete(self._k(batch_id, "r"), self._k(batch_id, "i"), self._k(batch_id, "n"))

    # -- leases -----------------------------------------------------------------------------------------

    async def claim(self, batch_id: str, owner: str, ttl_s: float) -> bool:
        keys = [self._k(batch_id, "l"), self._k(batch_id, "o")]
        return int(await self._claim(keys=keys, args=[owner, int(ttl_s * 1000), *sorted(TERMINAL)])) == 1

    async def release(self, batch_id: str, owner: str) -> None:
        await self._release(keys=[self._k(batch_id, "l")], args=[owner])

    async def _active_leased(self) -> builtins.list[tuple[str, bool]]:
        """The batches that have not ended, oldest first, and whether a live lease holds each."""
        ids = [i.decode() for i in await self.client.zrange(self._active, 0, -1)]
        if not ids:
            return []
        async with self.client.pipeline(transaction=False) as pipe:
            for i in ids:
                pipe.exists(self._k(i, "l"))
            held = await pipe.execute()
        return [(i, bool(h)) for i, h in zip(ids, held, strict=True)]

    async def runnable(self) -> builtins.list[str]:
        return [i for i, held in await self._active_leased() if not held]

    async def running_models(self) -> set[str]:
        running = await self._many([i for i, held in await self._active_leased() if held])
        return {r.model for r in running if r.status == "in_progress" and r.model}

    async def count_by_status(self) -> dict[str, int]:
        counts = await self.client.hgetall(self._status)
        return {k.decode(): int(v) for k, v in counts.items() if int(v)}

    async def close(self) -> None:
        """The Redis client belongs to the gateway; nothing of its own to close."""
