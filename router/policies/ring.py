"""A hash ring of virtual nodes, and the bounded-load walk over it (CHWBL).

Ring points are ``xxh3_64("<replica id>#<i>")``: every gateway process builds the same ring from the same
replica ids, so a cold key lands on the same replica everywhere without shared state. Weights scale the
number of points. CHWBL (Mirrokni et al.; as in Vimeo's and KubeAI's balancers) walks the ring from the
key and takes the first replica whose ``load + 1 <= ceil(c * (total + 1) / n)``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence

from xxhash import xxh3_64_intdigest

from router.load import bound_of
from router.replica import ReplicaState


class HashRing:
    """Rings for the candidate sets seen recently (a set changes when a replica is excluded or unhealthy)."""

    _CACHE = 16  # candidate sets kept; a pool rarely has more health states at once

    def __init__(self, virtual_nodes: int) -> None:
        self.virtual_nodes = virtual_nodes
        self._rings: dict[tuple[tuple[str, float], ...], tuple[list[int], list[str], int]] = {}

    def _ring(self, replicas: Sequence[ReplicaState]) -> tuple[list[int], list[str], int]:
        ids = tuple((r.id, r.weight) for r in replicas)
        ring = self._rings.get(ids)
        if ring is None:
            points = []
            for rid, weight in sorted(set(ids)):
                for i in range(max(1, round(self.virtual_nodes * weight))):
                    points.append((xxh3_64_intdigest(f"{rid}#{i}".encode()), rid))
            points.sort()
            ring = ([p for p, _ in points], [rid for _, rid in points], len({rid for rid, _ in ids}))
            if len(self._rings) >= self._CACHE:
                self._rings.pop(next(iter(self._rings)))
            self._rings[ids] = ring
        return ring

    def walk(self, key: int, replicas: Sequence[ReplicaState]) -> Iterator[str]:
        """Distinct replica ids in ring order from ``key`` (each once; at most len(replicas))."""
        points, owners, distinct = self._ring(replicas)
        n = len(points)
        start = bisect_left(points, key)
        seen: set[str] = set()
        for j in range(n):
            rid = owners[(start + j) % n]
            if rid not in seen:
                seen.add(rid)
                yield rid
                if len(seen) == distinct:
                    return

    def owner(self, key: int, replicas: Sequence[ReplicaState]) -> str:
        """Plain consistent hashing: the replica of the first point at or after ``key``."""
        points, owners, _ = self._ring(replicas)
        return owners[bisect_left(points, key) % len(points)]


def chwbl_pick(
    ring: HashRing,
    key: int,
    candidates: Sequence[ReplicaState],
    load_factor: float,
    allowed: Sequence[ReplicaState] | None = None,
) -> ReplicaState | None:
    """First replica from ``key`` along the ring whose load stays within the bound, or None.

    The bound counts every candidate; ``allowed`` (default: all) narrows which may be taken.
    """
    by_id = {r.id: r for r in (candidates if allowed is None else allowed)}
    bound = bound_of(candidates, load_factor)
    for rid in ring.walk(key, candidates):
        r = by_id.get(rid)
        if r is not None and r.load() + 1 <= bound:
            return r
    return None
