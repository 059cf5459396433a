"""Per-replica prefix index: which block hashes each replica was recently sent.

One LRU per replica (an ``OrderedDict`` hash -> last-sent time), bounded by that replica's KV capacity
in blocks: memory is bounded by the sum of the capacities (about 170 bytes per entry).

Entries of a replica are prefix-closed: a chain is always inserted from h1 and last block first, so
``h_{k-1}`` is never less recent than ``h_k``, and LRU eviction and TTL expiry take a chain's tail
before its head, as a replica's own prefix cache does. A replica holding ``h_k`` thus holds
``h_1..h_k``, which lets ``match`` binary-search each replica (about 8 lookups for 256 blocks) instead
of walking every block, and needs no global hash -> replicas map. Time is passed in (``now``), never
read here, so tests control TTL expiry.

With ``ghosts`` each replica also keeps a ghost list: the hashes its bound (or an unlearning) took out
of the index, with how many such evictions came after each, at most as many as the bound. A replica that
reports a hit on a ghost still held what the index forgot, and the ghost's depth says by how much the
bound was short (``router.capacity``); a hit on anything else says nothing of the bound. A ghost is a
hash and an int (no time), at most the bound's count per replica: the index's memory at most doubles.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import indexOf


@dataclass(frozen=True, slots=True)
class IndexStats:
    replicas: int
    entries: int  # (replica, hash) pairs: the memory that matters
    per_replica: dict[str, int]
    evictions: int
    expirations: int
    unlearned: int = 0  # entries dropped because a replica reported fewer cached tokens than predicted


class PrefixIndex:
    def __init__(self, ttl_s: float | None = None, *, ghosts: bool = False) -> None:
        self.ttl_s = ttl_s
        self._lru: dict[str, OrderedDict[int, float]] = {}
        self._cap: dict[str, int] = {}
        # Ghost lists (None: not kept): hash -> its eviction's sequence number, and each replica's count.
        self._ghost: dict[str, OrderedDict[int, int]] | None = {} if ghosts else None
        self._seq: dict[str, int] = {}
        self.evictions = 0
        self.expirations = 0
        self.unlearned = 0

    # -- replicas -------------------------------------------------------------------------------------
    def add_replica(self, replica_id: str, capacity_blocks: int) -> None:
        """Register a replica (or change its bound, evicting what no longer fits)."""
        if capacity_blocks < 1:
            raise ValueError("capacity_blocks must be at least 1")
        self._cap[replica_id] = capacity_blocks
        lru = self._lru.setdefault(replica_id, OrderedDict())
        if self._ghost is not None:
            self._ghost.setdefault(replica_id, OrderedDict())
            self._seq.setdefault(replica_id, 0)
        self._evict(replica_id, len(lru) - capacity_blocks)

    def drop_replica(self, replica_id: str) -> None:
        self._lru.pop(replica_id, None)
        self._cap.pop(replica_id, None)
        self._seq.pop(replica_id, None)
        if self._ghost is not None:
            self._ghost.pop(replica_id, None)

    def replica_ids(self) -> list[str]:
        return list(self._lru)

    # -- the two operations of a routing decision -----------------------------------------------------
    def match(self, hashes: Sequence[int], now: float = 0.0) -> dict[str, int]:
        """Leading blocks of ``hashes`` held by each replica (replicas holding none are absent)."""
        if self.ttl_s is not None:
            self.expire(now)
        if not hashes:
            return {}
        h1, last, n = hashes[0], hashes[-1], len(hashes)
        out: dict[str, int] = {}
        for rid, lru in self._lru.items():
            if h1 not in lru:
                continue
            if last in lru:
                out[rid] = n
                continue
            lo, hi = 1, n  # invariant: hashes[lo - 1] held, hashes[hi - 1] not held
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if hashes[mid - 1] in lru:
                    lo = mid
                else:
                    hi = mid
            out[rid] = lo
        return out

    def insert(
        self, replica_id: str, hashes: Sequence[int], now: float = 0.0, known: int | None = None
    ) -> None:
        """Record that ``hashes`` were just sent to ``replica_id`` (refreshing those already held).

        ``known``: how many leading hashes the replica holds, from ``match`` with no change in between;
        those are refreshed in place and (entries being prefix-closed) the rest are known to be absent.
        Without it every hash is removed first and re-added. All loops are C-level.
        """
        lru = self._lru.get(replica_id)
        if lru is None:
            raise KeyError(f"unknown replica {replica_id!r} (add_replica first)")
        cap = self._cap[replica_id]
        if len(hashes) > cap:
            hashes = hashes[:cap]  # the head of a chain is what a match can reach
        if known is None:
            deque(map(lru.pop, hashes, repeat(None)), maxlen=0)  # so that re-adding moves them to the end
            known = 0
        known = min(known, len(hashes))
        tail = hashes[known:]
        if tail:
            lru.update(zip(reversed(tail), repeat(now)))
            if self._ghost is not None:  # in the index again: no longer a ghost
                ghost = self._ghost[replica_id]
                deque(map(ghost.pop, tail, repeat(None)), maxlen=0)
        if known:
            head = hashes[:known]
            deque(map(lru.move_to_end, reversed(head)), maxlen=0)
            if self.ttl_s is not None:
                lru.update(zip(head, repeat(now)))  # new times; updating keeps the (fresh) order
        if len(lru) > cap:
            self._evict(replica_id, len(lru) - cap)

    def forget_from(self, replica_id: str, hashes: Sequence[int], start: int) -> None:
        """Forget ``hashes[start:]`` for one replica: the tail of a chain, so entries stay prefix-closed."""
        lru = self._lru.get(replica_id)
        if lru is not None:
            deque(map(lru.pop, hashes[start:], repeat(None)), maxlen=0)

    def unlearn_oldest(self, replica_id: str, count: int, keep: Collection[int] = ()) -> int:
        """The replica evicted blocks the index still lists: drop its ``count`` least recently sent
        entries (its own cache evicts in the same order), except those in ``keep`` (the replica has just
        computed them), which become the most recent. Returns how many were dropped."""
        lru = self._lru.get(replica_id)
        if lru is None or count <= 0:
            return 0
        dropped = 0
        for _ in range(len(lru)):
            if dropped == count:
                break
            h, t = lru.popitem(last=False)
            if h in keep:
                lru[h] = t
            else:
                dropped += 1
                self._bury(replica_id, h)
        self.unlearned += dropped
        return dropped

    def unlearn_older(self, replica_id: str, count: int, before: float, keep: Collection[int] = ()) -> int:
        """A miss proved the replica evicted a block last sent at ``before``: an LRU cache evicted what
        was sent earlier first, so drop up to ``count`` of the entries sent strictly before it (oldest
        first, not those in ``keep``), and nothing sent since. Returns how many were dropped."""
        lru = self._lru.get(replica_id)
        if lru is None or count <= 0:
            return 0
        dropped = 0
        kept: list[tuple[int, float]] = []
        while lru and dropped < count:
            h, t = next(iter(lru.items()))
            if t >= before:
                break
            lru.popitem(last=False)
            if h in keep:
                kept.append((h, t))
            else:
                dropped += 1
                self._bury(replica_id, h)
        lru.update(kept)  # the replica has just computed them: the most recent
        self.unlearned += dropped
        return dropped

    def sent_at(self, replica_id: str, block_hash: int) -> float | None:
        """When ``block_hash`` was last sent to the replica (None: the index does not list it)."""
        lru = self._lru.get(replica_id)
        return lru.get(block_hash) if lru is not None else None

    def expire(self, now: float) -> None:
        """Drop entries not sent for ``ttl_s`` seconds (oldest first, so the scan stops early)."""
        if self.ttl_s is None:
            return
        cutoff = now - self.ttl_s
        for lru in self._lru.values():
            count = 0
            for t in lru.values():
                if t >= cutoff:
                    break
                count += 1
            for _ in range(count):
                lru.popitem(last=False)
            self.expirations += count

    def headroom(self, replica_id: str, now: float) -> tuple[int, float]:
        """What a new prefix costs this replica's cache: (free entries, seconds since the entry it would
        evict next was sent). A replica with room evicts nothing; a full one evicts its oldest entry."""
        lru = self._lru.get(replica_id)
        if lru is None:
            return 0, 0.0
        free = self._cap[replica_id] - len(lru)
        if free > 0 or not lru:
            return free, float("inf")
        return 0, now - next(iter(lru.values()))

    # -- sizes ----------------------------------------------------------------------------------------
    def size(self, replica_id: str) -> int:
        lru = self._lru.get(replica_id)
        return len(lru) if lru is not None else 0

    def depth(self, replica_id: str, block_hash: int) -> int:
        """How recent ``block_hash`` is among the replica's entries: 1 for the most recently sent, 0 when
        not listed. O(depth), one C-level scan from the recent end (``router.capacity``'s depth estimator
        asks it for two blocks a decision)."""
        lru = self._lru.get(replica_id)
        if lru is None or block_hash not in lru:
            return 0
        return indexOf(reversed(lru), block_hash) + 1

    def ghost_depths(self, replica_id: str, hashes: Sequence[int], start: int) -> tuple[int, ...]:
        """For ``hashes[start:]``, as far as each is a ghost of the replica: how many blocks the index
        had evicted since it, counting it (what a bound that much larger would still hold). Empty
        without ghosts or when ``hashes[start]`` is none."""
        ghost = self._ghost.get(replica_id) if self._ghost is not None else None
        if not ghost:
            return ()
        seq = self._seq[replica_id]
        out: list[int] = []
        for h in hashes[start:]:
            at = ghost.get(h)
            if at is None:
                break
            out.append(seq - at + 1)
        return tuple(out)

    def capacity(self, replica_id: str) -> int:
        """The replica's bound in blocks (0: unknown replica)."""
        return self._cap.get(replica_id, 0)

    def holds(self, replica_id: str, block_hash: int) -> bool:
        lru = self._lru.get(replica_id)
        return lru is not None and block_hash in lru

    def stats(self) -> IndexStats:
        per = {r: len(lru) for r, lru in self._lru.items()}
        return IndexStats(
            replicas=len(per),
            entries=sum(per.values()),
            per_replica=per,
            evictions=self.evictions,
            expirations=self.expirations,
            unlearned=self.unlearned,
        )

    # -- internals ------------------------------------------------------------------------------------
    def _evict(self, replica_id: str, count: int) -> None:
        lru = self._lru[replica_id]
        if self._ghost is None:
            for _ in range(max(0, count)):
                lru.popitem(last=False)
        else:
            for _ in range(max(0, count)):
                self._bury(replica_id, lru.popitem(last=False)[0])
        self.evictions += max(0, count)

    def _bury(self, replica_id: str, block_hash: int) -> None:
        """Keep an evicted hash as the replica's newest ghost (the oldest go past the bound's count)."""
        if self._ghost is None:
            return
        ghost = self._ghost[replica_id]
        seq = self._seq[replica_id] + 1
        self._seq[replica_id] = seq
        ghost[block_hash] = seq
        ghost.move_to_end(block_hash)
        while len(ghost) > self._cap[replica_id]:
            ghost.popitem(last=False)
