"""Semantic entries: the store interface, its epoch check, and the in-memory store (embedded default).

Entries are ``cache.entry.Entry`` objects in a ``cache.store.MemoryStore`` (the exact cache's LRU with
TTL and byte bound). Beside them the semantic store keeps

* a tag index, tag → {entry key: intent}, so an event removes exactly its entries (``remove``);
* epoch counters per (tag, intent), bumped by events (``epochs``).

An entry records, in ``meta``, its tags and the epochs read *before* its answer was generated. ``get``
serves it only while those epochs are still current: an entry filled after an event by a request that
started before it is refused (counted in ``stats.stale``) instead of being served stale. Stale serves
are therefore impossible by construction, and ``bench.semantic``'s event replay checks it with an
oracle of its own.

The same tags and epochs guard the *exact* response-cache entries of requests the policy's rules tie
to an entity (a ``v1:`` key; ``cache.keys.cache_key``): the gateway stores such an entry with ``put``
too, so it is indexed under the entity's tags (an event removes it with the semantic entries, counted
apart in ``Removed``) and stamped with its basis; ``EntityCheckedStore`` wraps the exact cache's store
so that a read refuses a stamped entry whose epochs moved, in every pod. An exact entry the rules do
not tie to anything is stored and served as before, without any epoch read. The memory store keeps
exact entries in the exact cache's own ``MemoryStore`` (``exact``), not in its own.

Bounds: ``max_entries_per_tag`` index members per tag (beyond: not stored, ``tag_full``), dangling
index members (entries the LRU evicted) swept when they outnumber live entries, and ``max_epochs``
counters (beyond: everything is dropped and a generation counter makes every earlier basis stale).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from cache.entry import Entry
from cache.keys import KEY_VERSION
from cache.semantic.invalidation import Removal
from cache.semantic.tags import TagRef
from cache.store import MemoryStore, ResponseStore, StoreStats

Epochs = tuple[int, ...]


@dataclass
class SemanticStats:
    hits: int = 0
    misses: int = 0
    stale: int = 0  # entries refused because an event happened after their answer's basis
    sets: int = 0
    not_stored: int = 0
    removed: int = 0
    errors: int = 0


@dataclass(slots=True)
class Removed:
    """Entries one event removed, per layer."""

    semantic: int = 0
    exact: int = 0

    def count(self, key: str) -> None:
        if is_exact_key(key):
            self.exact += 1
        else:
            self.semantic += 1


def is_exact_key(key: str) -> bool:
    """An exact response-cache key (``v1:...``), as opposed to a semantic one (``sv1:...``)."""
    return key.startswith(f"{KEY_VERSION}:")


@runtime_checkable
class SemanticStore(Protocol):
    stats: SemanticStats

    async def get(self, key: str) -> Entry | None: ...

    async def epochs(self, refs: Sequence[TagRef]) -> Epochs | None: ...

    async def put(
        self, key: str, entry: Entry, ttl_s: float, refs: Sequence[TagRef], basis: Epochs
    ) -> str: ...

    async def remove(self, removals: Sequence[Removal]) -> Removed | None: ...

    async def close(self) -> None: ...


def stamp(entry: Entry, refs: Sequence[TagRef], basis: Epochs) -> Entry:
    """The entry with its tags and basis epochs recorded (what ``get`` checks)."""
    entry.meta["refs"] = [[r.tag, r.field] for r in refs]
    entry.meta["epochs"] = list(basis)
    return entry


def entry_refs(entry: Entry) -> list[TagRef] | None:
    raw = entry.meta.get("refs")
    if not isinstance(raw, list):
        return None
    try:
        return [TagRef(str(t), str(f)) for t, f in raw]
    except (TypeError, ValueError):
        return None


def is_current(entry: Entry, now: Epochs | None) -> bool:
    return now is not None and list(now) == entry.meta.get("epochs")


async def get_current(
    entries: ResponseStore,
    epochs: Callable[[Sequence[TagRef]], Awaitable[Epochs | None]],
    stats: SemanticStats,
    key: str,
) -> Entry | None:
    """The entry for ``key`` if its epochs are still the current ones; a stale entry is deleted and
    counted, an entry whose epochs cannot be read (backend error) is a miss and kept."""
    entry = await entries.get(key)
    if entry is not None:
        entry = await _if_current(entries, epochs, stats, key, entry)
    if entry is None:
        stats.misses += 1
    else:
        stats.hits += 1
    return entry


async def _if_current(
    entries: ResponseStore,
    epochs: Callable[[Sequence[TagRef]], Awaitable[Epochs | None]],
    stats: SemanticStats,
    key: str,
    entry: Entry,
) -> Entry | None:
    refs = entry_refs(entry)
    now = await epochs(refs) if refs is not None else None
    if refs is not None and is_current(entry, now):
        return entry
    if refs is None or now is not None:
        stats.stale += 1
        await entries.delete(key)
    return None


class EntityCheckedStore:
    """The exact cache's store, seen through the semantic store's epochs: ``get`` refuses an entry
    stamped with entity epochs that moved since (an event invalidated it); everything else is the
    wrapped store's. Unstamped entries cost nothing more than before."""

    def __init__(self, inner: ResponseStore, semantic: SemanticStore) -> None:
        self.inner = inner
        self.semantic = semantic

    @property
    def stats(self) -> StoreStats:
        return self.inner.stats

    async def get(self, key: str) -> Entry | None:
        entry = await self.inner.get(key)
        if entry is None or "refs" not in entry.meta:
            return entry
        return await _if_current(self.inner, self.semantic.epochs, self.semantic.stats, key, entry)

    async def set(self, key: str, entry: Entry, ttl_s: float) -> bool:
        return await self.inner.set(key, entry, ttl_s)

    async def delete(self, key: str) -> None:
        await self.inner.delete(key)

    async def purge_tenant(self, tag: str) -> int:
        return await self.inner.purge_tenant(tag)

    async def close(self) -> None:
        await self.inner.close()


class MemorySemanticStore:
    def __init__(
        self,
        max_bytes: int = 64 * 1024 * 1024,
        max_entry_bytes: int = 1024 * 1024,
        max_entries_per_tag: int = 100_000,
        max_epochs: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
        exact: MemoryStore | None = None,
    ) -> None:
        self.entries = MemoryStore(max_bytes=max_bytes, max_entry_bytes=max_entry_bytes, clock=clock)
        self.exact = exact if exact is not None else self.entries  # where ``v1:`` entries live
        self.max_entries_per_tag = max_entries_per_tag
        self.max_epochs = max_epochs
        self.stats = SemanticStats()
        self._index: dict[str, dict[str, str]] = {}
        self._members = 0
        self._epochs: dict[tuple[str, str], int] = {}
        self._generation = 0

    def __len__(self) -> int:
        return len(self.entries)

    def index_size(self) -> int:
        return self._members

    def _holder(self, key: str) -> MemoryStore:
        return self.exact if is_exact_key(key) else self.entries

    def _now(self, refs: Sequence[TagRef]) -> Epochs:
        return (self._generation, *(self._epochs.get((r.tag, r.field), 0) for r in refs))

    async def epochs(self, refs: Sequence[TagRef]) -> Epochs:
        return self._now(refs)

    async def get(self, key: str) -> Entry | None:
        return await get_current(self.entries, self.epochs, self.stats, key)

    async def put(self, key: str, entry: Entry, ttl_s: float, refs: Sequence[TagRef], basis: Epochs) -> str:
        if self._now(refs) != tuple(basis):
            self.stats.not_stored += 1
            return "stale_basis"  # an event happened while the answer was generated
        for r in refs:
            members = self._index.get(r.tag, {})
            if len(members) >= self.max_entries_per_tag and key not in members:
                self.stats.not_stored += 1
                return "tag_full"
        if not await self._holder(key).set(key, stamp(entry, refs, basis), ttl_s):
            self.stats.not_stored += 1
            return "too_large"
        for r in refs:
            members = self._index.setdefault(r.tag, {})
            if key not in members:
                self._members += 1
            members[key] = r.field
        self.stats.sets += 1
        self._sweep()
        return "stored"

    def _sweep(self) -> None:
        """Drop index members whose entry the LRU or its TTL removed (amortised: only when they pile up)."""
        held = len(self.entries) + (len(self.exact) if self.exact is not self.entries else 0)
        if self._members <= 2 * held + 1024:
            return
        for tag in list(self._index):
            members = {k: f for k, f in self._index[tag].items() if k in self._holder(k)}
            self._members -= len(self._index[tag]) - len(members)
            if members:
                self._index[tag] = members
            else:
                del self._index[tag]

    async def _forget(self, key: str) -> bool:
        holder = self._holder(key)
        existed = key in holder
        await holder.delete(key)
        return existed

    async def remove(self, removals: Sequence[Removal]) -> Removed:
        removed = Removed()
        for rm in removals:
            for field in rm.bump:
                slot = (rm.tag, field)
                if slot not in self._epochs and len(self._epochs) >= self.max_epochs:
                    await self._reset()
                self._epochs[slot] = self._epochs.get(slot, 0) + 1
            members = self._index.get(rm.tag, {})
            doomed = [k for k, f in members.items() if rm.intents is None or f in rm.intents]
            for k in doomed:
                del members[k]
                self._members -= 1
                if await self._forget(k):
                    removed.count(k)
            if not members:
                self._index.pop(rm.tag, None)
        self.stats.removed += removed.semantic + removed.exact
        return removed

    async def _reset(self) -> None:
        """Too many epoch counters: drop everything; the new generation makes every old basis stale
        (the exact entries it stamped too: they stay in the exact store, refused at read)."""
        await self.entries.close()
        self._index.clear()
        self._members = 0
        self._epochs.clear()
        self._generation += 1

    async def close(self) -> None:
        await self.entries.close()
        self._index.clear()
        self._members = 0
