"""Per-replica prefix index: which block hashes each replica was recently sent.

One LRU per replica (an ``OrderedDict`` hash -> last-sent time), bounded by that replica's KV capacity
in blocks, plus a global map hash -> set of replica ids so that matching every replica takes one pass
over the prompt's hashes. Both structures change together (insert, eviction, expiry, drop), so memory is
bounded by the sum of the capacities.

A chain is inserted last block first, so its first blocks are the most recently used and eviction eats
prompts from their tail, as a replica's own prefix cache does; a surviving entry is then still
reachable from h1. Time is passed in (``now``), never read here, so tests control TTL expiry.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat


@dataclass(frozen=True, slots=True)
class IndexStats:
    replicas: int
    entries: int  # (replica, hash) pairs, the memory that matters
    unique_hashes: int
    per_replica: dict[str, int]
    evictions: int
    expirations: int


class PrefixIndex:
    def __init__(self, ttl_s: float | None = None) -> None:
        self.ttl_s = ttl_s
        self._lru: dict[str, OrderedDict[int, float]] = {}
        self._cap: dict[str, int] = {}
        self._owners: dict[int, set[str]] = {}
        self.evictions = 0
        self.expirations = 0

    # -- replicas -------------------------------------------------------------------------------------
    def add_replica(self, replica_id: str, capacity_blocks: int) -> None:
        """Register a replica (or change its bound, evicting what no longer fits)."""
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be at least 1")
        self._cap[replica_id] = capacity_blocks
        lru = self._lru.setdefault(replica_id, OrderedDict())
        self._evict(replica_id, lru, len(lru) - capacity_blocks)

    def drop_replica(self, replica_id: str) -> None:
        lru = self._lru.pop(replica_id, None)
        self._cap.pop(replica_id, None)
        if lru:
            self._forget(replica_id, lru.keys())

    def replica_ids(self) -> list[str]:
        return list(self._lru)

    # -- the two operations of a routing decision -----------------------------------------------------
    def match(self, hashes: Sequence[int], now: float = 0.0) -> dict[str, int]:
        """Leading blocks of ``hashes`` held by each replica (replicas holding none are absent).

        Every replica's entries are prefix-closed: a chain is always inserted whole from h1 and last
        block first, so ``h_{k-1}`` is never older than ``h_k`` and LRU eviction and TTL expiry take a
        chain's tail before its head. A replica holding ``h_k`` thus holds ``h_1..h_k``, and a binary
        search per replica (about 8 lookups for 256 blocks) finds the same answer as a walk.
        """
        if self.ttl_s is not None:
            self.expire(now)
        if not hashes:
            return {}
        first = self._owners.get(hashes[0])
        if not first:
            return {}
        n = len(hashes)
        out: dict[str, int] = {}
        for rid in first:
            lru = self._lru[rid]
            lo, hi = 1, n  # lru holds hashes[lo - 1]; find the largest such lo
            if hashes[-1] in lru:
                out[rid] = n
                continue
            while hi - lo > 1:  # invariant: hashes[lo - 1] held, hashes[hi - 1] not held
                mid = (lo + hi) // 2
                if hashes[mid - 1] in lru:
                    lo = mid
                else:
                    hi = mid
            out[rid] = lo
        return out

    def insert(self, replica_id: str, hashes: Sequence[int], now: float = 0.0, known: int = 0) -> None:
        """Record that ``hashes`` were just sent to ``replica_id`` (refreshing those already held).

        ``known``: how many leading hashes the replica is known to hold (its ``match`` result, with no
        change in between); they are refreshed by C-level calls instead of a Python loop.
        """
        lru = self._lru.get(replica_id)
        if lru is None:
            raise KeyError(f"unknown replica {replica_id!r} (add_replica first)")
        if not hashes:
            return
        owners = self._owners
        cap = self._cap[replica_id]
        if len(hashes) > cap:
            hashes = hashes[:cap]  # the head of a chain is what a match can reach
        move = lru.move_to_end
        known = min(known, len(hashes))
        for h in reversed(hashes[known:]):
            if h in lru:
                move(h)
                lru[h] = now
            else:
                lru[h] = now
                got = owners.get(h)
                if got is None:
                    owners[h] = {replica_id}
                else:
                    got.add(replica_id)
        if known:
            head = hashes[:known]
            deque(map(move, reversed(head)), maxlen=0)
            if self.ttl_s is not None:
                lru.update(zip(head, repeat(now)))  # new times, same (fresh) order
        if len(lru) > cap:
            self._evict(replica_id, lru, len(lru) - cap)

    def forget_from(self, replica_id: str, hashes: Sequence[int], start: int) -> None:
        """Forget ``hashes[start:]`` for one replica: the tail of a chain, so entries stay prefix-closed."""
        lru = self._lru.get(replica_id)
        if lru is None:
            return
        gone = [h for h in hashes[start:] if lru.pop(h, None) is not None]
        self._forget(replica_id, gone)

    def expire(self, now: float) -> None:
        """Drop entries not sent for ``ttl_s`` seconds (oldest first, so the scan stops early)."""
        if self.ttl_s is None:
            return
        cutoff = now - self.ttl_s
        for replica_id, lru in self._lru.items():
            old = []
            for h, t in lru.items():
                if t >= cutoff:
                    break
                old.append(h)
            if old:
                for h in old:
                    del lru[h]
                self._forget(replica_id, old)
                self.expirations += len(old)

    # -- sizes ----------------------------------------------------------------------------------------
    def size(self, replica_id: str) -> int:
        lru = self._lru.get(replica_id)
        return len(lru) if lru is not None else 0

    def stats(self) -> IndexStats:
        per = {r: len(lru) for r, lru in self._lru.items()}
        return IndexStats(
            replicas=len(per),
            entries=sum(per.values()),
            unique_hashes=len(self._owners),
            per_replica=per,
            evictions=self.evictions,
            expirations=self.expirations,
        )

    # -- internals ------------------------------------------------------------------------------------
    def _evict(self, replica_id: str, lru: OrderedDict[int, float], count: int) -> None:
        if count <= 0:
            return
        gone = [lru.popitem(last=False)[0] for _ in range(count)]
        self._forget(replica_id, gone)
        self.evictions += count

    def _forget(self, replica_id: str, hashes: Iterable[int]) -> None:
        owners = self._owners
        for h in hashes:
            got = owners.get(h)
            if got is not None:
                got.discard(replica_id)
                if not got:
                    del owners[h]
