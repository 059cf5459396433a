"""Shared billing ledger in Redis: per-day counters plus a stream of line items.

``record`` runs one Lua script, so a line item is counted all-or-nothing and at most once:
``SET NX`` of an idempotency marker (tenant, the gateway's id of the generation; the client's own
``x-request-id`` is only a field of the line item) → ``HINCRBY`` the counters of
(tenant, model, UTC day of the item) → index that counter hash → ``XADD`` the line item to a stream
trimmed with ``MAXLEN ~``. A duplicate (retry, or two pods racing) finds the marker and changes nothing.

``query`` answers from the counters when the period is whole UTC days (or open-ended): cost
independent of traffic. A ``since``/``until`` that falls inside a day is answered for that edge day
from the stream, filtering line items by their own timestamp; if the stream has been trimmed past the
period, ``LedgerRangeUnavailable`` is raised rather than a silently short answer. The stream keeps
the last ``stream_maxlen`` items, so finer-than-a-day reports are for recent periods. Stream ids follow
the items' timestamps (kept increasing), so a partial-day scan reads only the asked period plus one
hour for late items; an item recorded more than an hour after a newer one is still in the counters
(whole-day queries) but missed by a partial-day query. The gateway records as requests finish, so
this only concerns bulk back-filling, which should go to whole days.

Idempotency markers live ``idempotency_ttl_s`` (default 7 days): a retry later than that would count
again (the SQLite ledger remembers forever). Counters expire ``counters_ttl_days`` after their last
write. All keys share one hash tag, so the script is valid on Redis Cluster (one slot).

A row whose tokens the gateway estimated (``usage_estimated``) also counts in ``<source>|e``; counters
written before that field have none (0 estimated), and a stream item without the field reads as False.
Each stream item names the replica that ran it (``replica_id``; an older item reads as None):
``replica_totals`` reads the stream, not the counters, for usage reconciliation.

Key layout (``P`` = ``{<key_prefix>:bill}``): ``P:id:<tenant>:<request id>``, ``P:c:<day>:<tenant>:<model>``
(tenant and model length-prefixed), ``P:idx`` (zset of ``[day, tenant, model]``, score = day number),
``P:items`` (stream). No prompt text is ever written, only ids, counts and money.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis

from cache.billing.ledger import (
    DAY_MS,
    GroupKey,
    LedgerRangeUnavailable,
    Query,
    ReplicaTotals,
    Sums,
    TimeArg,
    UsageRow,
    add_replica_row,
    day_number,
    day_of,
    group_key,
    in_range,
    rows_from_sums,
    sorted_totals,
)
from cache.billing.pricing import KINDS, LineItem

# KEYS: 1 marker, 2 counters hash, 3 index zset, 4 stream
# ARGV: 1 marker ttl ms, 2 counters ttl s, 3 index member, 4 day number, 5 oldest day kept,
#       6 stream maxlen, 7 item json, 8 item ts ms (decimal string), 9.. field/increment pairs
# Redis does not roll a script back on error, so the only command that could fail (XADD with an explicit
# id) gets an id computed beforehand to be valid, and the marker is set before any counter moves.
# Stream ids follow the items' own timestamps (ts-0), kept increasing: an item older than the stream's
# last id gets that id's millisecond with the next sequence number.
_RECORD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local id = ARGV[8] .. '-0'
if redis.call('EXISTS', KEYS[4]) == 1 then
  local info = redis.call('XINFO', 'STREAM', KEYS[4])
  local last
  for i = 1, #info, 2 do if info[i] == 'last-generated-id' then last = info[i + 1] end end
  local dash = string.find(last, '-', 1, true)
  local lms = string.sub(last, 1, dash - 1)
  if tonumber(ARGV[8]) <= tonumber(lms) then
    id = lms .. '-' .. tostring(tonumber(string.sub(last, dash + 1)) + 1)
  end
end
redis.call('SET', KEYS[1], '1', 'PX', ARGV[1])
for i = 9, #ARGV, 2 do redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[5])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', ARGV[6], id, 'item', ARGV[7])
return 1
"""

# A stream id is never earlier than its item's timestamp, and later only when the item was recorded
# after a newer one: scan this far past the asked period for such late items.
_STREAM_SLACK_AFTER_MS = 60 * 60 * 1000
_STREAM_PAGE = 1000


def _seg(s: str) -> str:
    return f"{len(s)}.{s}"


def _counter_fields(item: LineItem) -> list[Any]:
    """Hash fields ``<source>|<kind>|t`` (tokens), ``|m`` (micros), ``<source>|n|c|w``, ``<source>|e``
    (estimated rows); zeros omitted."""
    src = item.source
    out: list[Any] = [
        f"{src}|n",
        1,
        f"{src}|c",
        item.total_micros,
        f"{src}|w",
        item.cost_without_cache_micros,
    ]
    if item.usage_estimated:
        out += [f"{src}|e", 1]
    for k in KINDS:
        t, m = getattr(item.tokens, k), getattr(item.micros, k)
        if t:
            out += [f"{src}|{k}|t", t]
        if m:
            out += [f"{src}|{k}|m", m]
    return out


def _sums_by_source(fields: dict[bytes, bytes]) -> dict[str, Sums]:
    out: dict[str, Sums] = {}
    for raw_f, raw_v in fields.items():
        parts = raw_f.decode().split("|")
        s = out.setdefault(parts[0], Sums())
        v = int(raw_v)
        if len(parts) == 3:
            (s.tokens if parts[2] == "t" else s.micros)[parts[1]] += v
        elif parts[1] == "n":
            s.requests += v
        elif parts[1] == "c":
            s.cost_micros += v
        elif parts[1] == "w":
            s.cost_without_cache_micros += v
        elif parts[1] == "e":
            s.estimated += v
    return out


class RedisLedger:
    def __init__(
        self,
        client: aioredis.Redis,
        key_prefix: str = "pgw",
        stream_maxlen: int = 1_000_000,
        counters_ttl_days: int = 400,
        idempotency_ttl_s: int = 7 * 86_400,
    ):
        self.client = client
        self.p = f"{{{key_prefix}:bill}}"
        self.stream_maxlen = stream_maxlen
        self.counters_ttl_days = counters_ttl_days
        self.idempotency_ttl_s = idempotency_ttl_s
        self._record = client.register_script(_RECORD)

    @property
    def stream_key(self) -> str:
        return f"{self.p}:items"

    @property
    def index_key(self) -> str:
        return f"{self.p}:idx"

    def counters_key(self, day: str, tenant: str, model: str) -> str:
        return f"{self.p}:c:{day}:{_seg(tenant)}:{_seg(model)}"

    async def record(self, item: LineItem) -> bool:
        day = day_of(item.ts_ms)
        dnum = day_number(day)
        member = orjson.dumps([day, item.tenant, item.model])
        res = await self._record(
            keys=[
                f"{self.p}:id:{_seg(item.tenant)}:{item.request_id}",
                self.counters_key(day, item.tenant, item.model),
                self.index_key,
                self.stream_key,
            ],
            args=[
                self.idempotency_ttl_s * 1000,
                self.counters_ttl_days * 86_400,
                member,
                dnum,
                dnum - self.counters_ttl_days,
                self.stream_maxlen,
                orjson.dumps(item.to_dict()),
                str(max(0, int(item.ts_ms))),
                *_counter_fields(item),
            ],
        )
        return int(res) == 1

    async def query(
        self,
        tenant: str | None = None,
        model: str | None = None,
        since: TimeArg = None,
        until: TimeArg = None,
        group_by: Sequence[str] = ("tenant", "model"),
    ) -> list[UsageRow]:
        q = Query.of(tenant, model, since, until, group_by)
        since_ms, until_ms = q.since_ms, q.until_ms
        acc: dict[GroupKey, Sums] = {}
        if since_ms is not None and until_ms is not None and until_ms <= since_ms:
            return []
        # Whole days [first_full, end_full) come from counters; the partial edges from the stream.
        first_full = None if since_ms is None else -(-since_ms // DAY_MS)
        end_full = None if until_ms is None else until_ms // DAY_MS
        partial: list[tuple[int, int]] = []
        if first_full is not None and end_full is not None and first_full > end_full:
            partial.append((since_ms, until_ms))  # type: ignore[arg-type]  # inside one day
            first_full = end_full = None
            counters = False
        else:
            counters = True
            if since_ms is not None and since_ms % DAY_MS:
                partial.append((since_ms, first_full * DAY_MS))  # type: ignore[operator]
            if until_ms is not None and until_ms % DAY_MS:
                partial.append((end_full * DAY_MS, until_ms))  # type: ignore[operator]
        if counters:
            await self._from_counters(acc, q, first_full, end_full)
        for lo, hi in partial:
            await self._from_stream(acc, q, lo, hi)
        return rows_from_sums(acc)

    async def _from_counters(
        self, acc: dict[GroupKey, Sums], q: Query, first_day: int | None, end_day: int | None
    ) -> None:
        lo = "-inf" if first_day is None else first_day
        hi = "+inf" if end_day is None else f"({end_day}"
        if first_day is not None and end_day is not None and end_day <= first_day:
            return
        members = await self.client.zrangebyscore(self.index_key, lo, hi)
        wanted = []
        for m in members:
            day, t, mdl = orjson.loads(m)
            if q.selects(t, mdl):
                wanted.append((day, t, mdl))
        if not wanted:
            return
        async with self.client.pipeline(transaction=False) as pipe:
            for day, t, mdl in wanted:
                pipe.hgetall(self.counters_key(day, t, mdl))
            hashes = await pipe.execute()
        for (day, t, mdl), h in zip(wanted, hashes, strict=True):
            for src, s in _sums_by_source(h).items():
                acc.setdefault(group_key(q.group_by, t, mdl, day, src), Sums()).add(s)

    async def _from_stream(self, acc: dict[GroupKey, Sums], q: Query, lo_ms: int, hi_ms: int) -> None:
        async for item in self._items(lo_ms, hi_ms):
            q.add(acc, item, lo_ms, hi_ms)

    async def replica_totals(self, since_ms: int | None, until_ms: int | None) -> list[ReplicaTotals]:
        """Fleet rows written in ``[since_ms, until_ms)`` (epoch ms) by (model, replica), from the stream (the counters
        have no replica): a reconciliation window is minutes, not days. A stream item written before
        rows carried their replica counts as unattributed."""
        lo, hi = since_ms, until_ms
        acc: dict[tuple[str, str | None], ReplicaTotals] = {}
        async for item in self._items(0 if lo is None else lo, hi):
            if in_range(item.ts_ms, lo, hi):
                add_replica_row(acc, item)
        return sorted_totals(acc)

    async def _items(self, lo_ms: int, hi_ms: int | None) -> AsyncIterator[LineItem]:
        """Stream items from ``lo_ms`` to ``hi_ms`` plus the slack for late items (None: to the end);
        the caller filters by item time."""
        start_ms = max(0, lo_ms)
        await self._check_retained(start_ms)
        start = f"{start_ms}-0"
        end = "+" if hi_ms is None else f"{hi_ms + _STREAM_SLACK_AFTER_MS}-18446744073709551615"
        # Bounded: at most stream_maxlen entries exist, read in pages.
        for _ in range(self.stream_maxlen // _STREAM_PAGE + 2):
            entries = await self.client.xrange(self.stream_key, start, end, count=_STREAM_PAGE)
            for _eid, fields in entries:
                yield LineItem.from_dict(orjson.loads(fields[b"item"]))
            if len(entries) < _STREAM_PAGE:
                return
            start = "(" + entries[-1][0].decode()
        raise LedgerRangeUnavailable("stream scan did not finish (stream grew faster than it was read)")

    async def _check_retained(self, start_ms: int) -> None:
        """Raise if trimming may have removed items at or after ``start_ms``.

        ``MAXLEN ~`` trims only a stream longer than ``stream_maxlen``; a shorter stream lost nothing.
        """
        if await self.client.xlen(self.stream_key) < self.stream_maxlen:
            return
        first = await self.client.xrange(self.stream_key, "-", "+", count=1)
        if first and int(first[0][0].decode().split("-")[0]) > start_ms:
            raise LedgerRangeUnavailable(
                "the Redis ledger stream no longer holds line items that old; query whole UTC days "
                "(answered from counters) or raise billing.ledger.stream_maxlen"
            )

    async def close(self) -> None:
        """The Redis client belongs to the gateway; nothing to release here."""
