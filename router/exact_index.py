"""Exact per-replica index of the KV blocks each vLLM replica holds, from its KV-cache events.

Keys are the engine's own block hashes (event form, see ``router.vllm_hash``). ``BlockStored`` adds,
``BlockRemoved`` removes, ``AllBlocksCleared`` empties. Between a routing decision and the event that
confirms it (the replica publishes once it has computed the blocks), the decision's blocks are held
*speculatively* for ``speculative_ttl_s``, so a burst of requests sharing a new prefix does not scatter
before the first event arrives; an event confirms them, the TTL forgets them otherwise.

A replica is *live* (its entries are trusted) from its first event batch until it is purged (a gap in
its sequence numbers that replay could not fill, or a restart); the router uses its approximate index
for replicas that are not live. Memory is bounded by ``max_blocks_per_replica``: past it (events lost
without a gap, which should not happen) the replica is purged rather than grown. Time is passed in.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(slots=True)
class _Replica:
    held: set[int] = field(default_factory=set)  # confirmed by events
    speculative: OrderedDict[int, float] = field(default_factory=OrderedDict)  # hash -> expiry
    live: bool = False
    stored: int = 0
    removed: int = 0
    purges: int = 0


@dataclass(frozen=True, slots=True)
class ExactStats:
    live: dict[str, bool]
    held: dict[str, int]
    speculative: dict[str, int]
    purges: dict[str, int]


class ExactIndex:
    def __init__(self, speculative_ttl_s: float = 5.0, max_blocks_per_replica: int = 1_000_000) -> None:
        self.speculative_ttl_s = speculative_ttl_s
        self.max_blocks = max_blocks_per_replica
        self._r: dict[str, _Replica] = {}

    def _get(self, replica_id: str) -> _Replica:
        r = self._r.get(replica_id)
        if r is None:
            r = self._r[replica_id] = _Replica()
        return r

    # -- events ---------------------------------------------------------------------------------------
    def stored(self, replica_id: str, hashes: Iterable[int]) -> None:
        r = self._get(replica_id)
        r.live = True
        spec = r.speculative
        for h in hashes:
            r.held.add(h)
            spec.pop(h, None)
            r.stored += 1
        if len(r.held) > self.max_blocks:
            self.purge(replica_id)

    def removed(self, replica_id: str, hashes: Iterable[int]) -> None:
        r = self._get(replica_id)
        r.live = True
        for h in hashes:
            r.held.discard(h)
            r.speculative.pop(h, None)
            r.removed += 1

    def cleared(self, replica_id: str) -> None:
        r = self._get(replica_id)
        r.live = True
        r.held.clear()
        r.speculative.clear()

    def mark_live(self, replica_id: str) -> None:
        """A batch arrived (perhaps with no event we keep): the replica's events flow."""
        self._get(replica_id).live = True

    def purge(self, replica_id: str) -> None:
        """Forget everything about a replica (unfillable gap, restart): not live until its next batch."""
        r = self._get(replica_id)
        r.held.clear()
        r.speculative.clear()
        r.live = False
        r.purges += 1

    def drop_replica(self, replica_id: str) -> None:
        self._r.pop(replica_id, None)

    # -- routing --------------------------------------------------------------------------------------
    def is_live(self, replica_id: str) -> bool:
        r = self._r.get(replica_id)
        return r is not None and r.live

    def match(self, replica_id: str, hashes: Sequence[int], now: float) -> int:
        """Leading blocks of ``hashes`` the replica holds (confirmed, or speculative and not expired)."""
        r = self._r.get(replica_id)
        if r is None:
            return 0
        self._expire(r, now)
        held, spec = r.held, r.speculative
        n = 0
        for h in hashes:
            if h in held or h in spec:
                n += 1
            else:
                break
        return n

    def speculate(self, replica_id: str, hashes: Sequence[int], now: float) -> None:
        """The replica was just sent these blocks: hold them until an event confirms or the TTL ends."""
        r = self._get(replica_id)
        self._expire(r, now)
        expiry = now + self.speculative_ttl_s
        spec = r.speculative
        for h in hashes:
            if h not in r.held:
                spec[h] = expiry
                spec.move_to_end(h)  # one TTL for all: insertion order is expiry order
        while len(spec) > self.max_blocks:
            spec.popitem(last=False)

    def forget_speculative(self, replica_id: str, hashes: Sequence[int]) -> None:
        """The request never reached the replica: take back its unconfirmed blocks."""
        r = self._r.get(replica_id)
        if r is not None:
            for h in hashes:
                r.speculative.pop(h, None)

    def holds(self, replica_id: str, block_hash: int) -> bool:
        r = self._r.get(replica_id)
        return r is not None and block_hash in r.held

    def stats(self) -> ExactStats:
        return ExactStats(
            live={k: r.live for k, r in self._r.items()},
            held={k: len(r.held) for k, r in self._r.items()},
            speculative={k: len(r.speculative) for k, r in self._r.items()},
            purges={k: r.purges for k, r in self._r.items()},
        )

    @staticmethod
    def _expire(r: _Replica, now: float) -> None:
        spec = r.speculative
        while spec:
            h, expiry = next(iter(spec.items()))
            if expiry > now:
                break
            del spec[h]
