"""Response stores behind one async interface, and the in-memory store (the embedded default).

Keys are the ``v1:<tenant tag>:<hmac>`` strings of ``cache.keys.cache_key``; the tenant tag inside
lets a store drop one tenant's entries (``purge_tenant``). Stores never raise on backend failures:
a failed read is a miss, a failed write is "not stored", and ``stats.errors`` (plus the optional
``on_error`` callback) lets the caller count them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cache.entry import Entry

ErrorHook = Callable[[str, BaseException], None]


@dataclass
class StoreStats:
    hits: int = 0
    misses: int = 0
    sets: int = 0
    rejected_too_big: int = 0
    evictions: int = 0
    errors: int = 0


@runtime_checkable
class ResponseStore(Protocol):
    @property
    def stats(self) -> StoreStats: ...

    async def get(self, key: str) -> Entry | None: ...

    async def set(self, key: str, entry: Entry, ttl_s: float) -> bool: ...

    async def delete(self, key: str) -> None: ...

    async def purge_tenant(self, tag: str) -> int: ...

    async def close(self) -> None: ...


def encode_entry(entry: Entry, ttl_s: float, max_entry_bytes: int, stats: StoreStats) -> bytes | None:
    """The bytes to store, or None (counted as rejected) for an entry no store keeps: one that does not
    serialise (e.g. an integer beyond 64 bits), is over ``max_entry_bytes``, or has no time to live."""
    try:
        raw = entry.to_bytes()
    except TypeError:
        raw = None
    if raw is None or len(raw) > max_entry_bytes or ttl_s <= 0:
        stats.rejected_too_big += 1
        return None
    return raw


def key_tenant_tag(key: str) -> str:
    """The tenant tag inside a ``v1:<tag>:<hmac>`` key ("" for keys of another shape)."""
    parts = key.split(":", 2)
    return parts[1] if len(parts) == 3 else ""


class MemoryStore:
    """LRU with per-entry TTL and a bound on the total serialized size of the entries.

    Entries are kept serialized, so the byte bound is what the process really holds and a hit hands out
    a fresh object the caller may modify.
    """

    def __init__(
        self,
        max_bytes: int = 256 * 1024 * 1024,
        max_entry_bytes: int = 1024 * 1024,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.max_bytes = max_bytes
        self.max_entry_bytes = max_entry_bytes
        self.clock = clock
        self.stats = StoreStats()
        self._items: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # key -> (value, expires_at)
        self.bytes = 0

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """Whether an entry is held for ``key`` (expired or not: ``get`` decides that)."""
        return key in self._items

    def _drop(self, key: str) -> None:
        raw, _ = self._items.pop(key)
        self.bytes -= len(raw) + len(key)

    async def get(self, key: str) -> Entry | None:
        item = self._items.get(key)
        if item is None:
            self.stats.misses += 1
            return None
        raw, expires = item
        if expires <= self.clock():
            self._drop(key)
            self.stats.misses += 1
            return None
        self._items.move_to_end(key)
        self.stats.hits += 1
        return Entry.from_bytes(raw)

    async def set(self, key: str, entry: Entry, ttl_s: float) -> bool:
        raw = encode_entry(entry, ttl_s, self.max_entry_bytes, self.stats)
        if raw is None:
            return False
        size = len(raw) + len(key)
        if size > self.max_bytes:
            self.stats.rejected_too_big += 1
            return False
        if key in self._items:
            self._drop(key)
        self._items[key] = (raw, self.clock() + ttl_s)
        self.bytes += size
        self.stats.sets += 1
        while self.bytes > self.max_bytes:
            oldest = next(iter(self._items))
            self._drop(oldest)
            self.stats.evictions += 1
        return True

    async def delete(self, key: str) -> None:
        if key in self._items:
            self._drop(key)

    async def purge_tenant(self, tag: str) -> int:
        doomed = [k for k in self._items if key_tenant_tag(k) == tag]
        for k in doomed:
            self._drop(k)
        return len(doomed)

    async def close(self) -> None:
        self._items.clear()
        self.bytes = 0
