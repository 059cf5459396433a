"""Headroom the highest class gets without an operator sizing it: from its own measured concurrency.

``SaturationLimits.headroom`` / ``reserved`` are numbers an operator sizes: slots of each replica only
the highest class may take, so that an interactive request finds one free instead of waiting for a
flood's request to end. Sized too small, the interactive class's own concurrency fills them and its
tail waits for the next end of any class (through sockets, five tenants at 1/s held ~1 s each keep
4-5.5 streams open against 2 x 2 headroom: p99 1.34 x alone, met 1.25 x in 3 of 7 runs; 3 a replica
met it in 10 of 11, docs/benchmarks.md "Issue 28, round 4"); sized too large, the slots idle while
the class is quiet. The number the operator was asked for is the class's concurrency, which the
gateway can count.

**What is counted.** The highest class's requests of a pool from arrival (queued included: a class
held back by too little room must not measure its own throttled concurrency) to the end of their
attempt, as a step function of time. ``TopConcurrency.quantile(now, q)`` is its time-weighted
``q``-quantile over the last ``window_s`` seconds: the share ``q`` of the recent time the class held
no more than that many.

**Derived headroom** (``derived_slots``): that quantile spread over the pool's healthy replicas,
rounded up (the class is released to any replica with room: it never waits for its prefix's home),
bounded by the policy's ``max_slots`` and by ``slots - 1`` (a lower class keeps one slot a replica).
It is taken *inside* the slots, as reserved slots are: with ``fairness.headroom: auto`` the slots are
the engines' batch (``max_num_seqs``), the highest class may take all of them and the lower classes
``slots - derived``. So while no interactive request has been seen the lower classes get every slot
(more than a fixed headroom leaves them), and the reservation follows the class's load up and down
within the window. An explicit ``headroom_slots`` or ``reserved_slots`` wins (no derivation).

The quantile, window and default are measured (docs/benchmarks.md "Issue 28, round 5").
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

DERIVE_EVERY_S = 0.1  # the quantile is recomputed at most this often (it moves over seconds, not events)


@dataclass(frozen=True, slots=True)
class AutoHeadroom:
    max_slots: int  # per replica, at most (the policy's bound)
    min_slots: int = 1  # per replica, at least (also before the class is seen): never none to go to
    quantile: float = 0.9  # of the counts its recent arrivals made (itself included)
    window_s: float = 30.0  # seconds of arrivals it is taken over


class TopConcurrency:
    """The highest class's requests of one pool in flight (arrival to the attempt's end), and at each
    of its arrivals the count that arrival made (itself included), kept over a sliding window."""

    __slots__ = ("_seen", "count", "since", "window_s")

    def __init__(self, window_s: float, since: float = 0.0) -> None:
        self.window_s = window_s
        self.since = since  # when the count began (the pool's queue was made)
        self.count = 0
        self._seen: deque[tuple[float, int]] = deque()  # (arrival, count with it), oldest first

    def started(self, now: float) -> None:
        self.count += 1
        self._seen.append((now, self.count))
        self._expire(now)

    def ended(self, now: float) -> None:
        self.count = max(0, self.count - 1)

    def _expire(self, now: float) -> None:
        # the newest arrival stays however old: a class seen once keeps the room one arrival needs
        while len(self._seen) > 1 and self._seen[0][0] < now - self.window_s:
            self._seen.popleft()

    def quantile(self, now: float, q: float, prior: float = 0.0) -> float:
        """The count the share ``q`` of the class's arrivals of the last ``window_s`` seconds made, at
        most (nearest rank). In the first ``window_s`` of the count, a quantile its arrivals cannot yet
        measure (fewer than ``1 / (1 - q)`` of them) is taken with the missing ones at ``prior`` (the
        policy's bound): a cold start keeps room before the lower classes fill every slot. Past it, 0
        before any arrival."""
        self._expire(now)
        counts = [float(c) for _, c in self._seen]
        if now - self.since < self.window_s:
            enough = math.ceil(1 / (1 - q) - 1e-9) if q < 1 else 100
            counts += [prior] * max(0, enough - len(counts))
        if not counts:
            return 0.0
        counts.sort()
        return counts[max(0, min(len(counts) - 1, math.ceil(q * len(counts) - 1e-9) - 1))]


def derived_slots(high: float, count: int, healthy: int, slots: int, auto: AutoHeadroom) -> int:
    """Slots of each replica kept free for the highest class: the part of ``high`` (its recent
    quantile) it does not hold now (``count``), over the ``healthy`` replicas, rounded up; at least
    ``auto.min_slots``, at most ``auto.max_slots`` and ``slots - 1``."""
    if healthy <= 0:
        return 0
    need = math.ceil((high - count) / healthy - 1e-9) if high > count else 0
    return max(0, min(max(need, auto.min_slots), auto.max_slots, slots - 1))
