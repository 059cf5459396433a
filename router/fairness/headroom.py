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
attempt, as a step function of time, and its arrivals, over the last ``window_s`` seconds.

**The class's concurrency, two models** (``AutoHeadroom.model``; ``TopConcurrency.needed``):

- ``poisson`` (the default): predicted, not observed. Over the window, its arrival rate ``lambda``
  (arrivals / seconds) and its time in the system ``W`` (the step function's area / arrivals) give
  its mean concurrency by Little's law, ``L = lambda x W`` (= the area / seconds); the class needs the
  upper ``q``-quantile of a Poisson count of mean ``L`` (``poisson_quantile``): the number of its
  requests open at once when they arrive independently (an M/G/infinity system holds a Poisson
  count whatever the service times' distribution), so an arrival finds room with probability ``q``
  and a burst of the class's own size is covered before the window has seen one. ``lambda`` and
  ``W`` move over the window's seconds, not with one burst.
- ``observed`` (round 5's): the count each arrival made (itself included), its ``q``-quantile over
  the window (nearest rank). It lags: a burst larger than the window's past ones is not covered
  until it has been seen (through sockets p99 2.31 x alone at q 0.9, met 1.25 x in 2 of 5 runs).

Cold start, both: while the first window is not over and fewer arrivals than the model needs were
seen (``WARM_ARRIVALS`` for ``poisson``; ``1 / (1 - q)`` for ``observed``), the policy's bound
(``prior``): room is kept before the lower classes fill every slot.

**Derived headroom** (``derived_slots``): that count spread over the pool's healthy replicas,
rounded up (the class is released to any replica with room: it never waits for its prefix's home),
bounded by the policy's ``max_slots`` and by ``slots - 1`` (a lower class keeps one slot a replica).
It is taken *inside* the slots, as reserved slots are: with ``fairness.headroom: auto`` the slots are
the engines' batch (``max_num_seqs``), the highest class may take all of them and the lower classes
``slots - derived``. So while no interactive request has been seen the lower classes get every slot
(more than a fixed headroom leaves them), and the reservation follows the class's load up and down
within the window. An explicit ``headroom_slots`` or ``reserved_slots`` wins (no derivation).

Measured (docs/benchmarks.md "Issue 28, round 5" and "round 6"): q 0.95 is the largest quantile that
kept 0.95 x today's output in model time (``python -m bench.fairness --auto ...``, seed 0: p99 1.03 x
alone, 0.975 x; q 0.99 0.901 x; held-out seed 1: 1.38 x); through sockets it met 1.25 x alone in 1
of 3 runs against 2 of 3 for a fixed 3 a replica, and at q 0.99 matched that one's p99 at 0.919 x
FIFO's answers: ``fairness.auto_headroom`` stays off by default. The model also sizes a fixed
headroom (docs/operations.md).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

DERIVE_EVERY_S = 0.1  # the quantile is recomputed at most this often (it moves over seconds, not events)
WARM_ARRIVALS = 10  # poisson: arrivals of the first window before its rate is trusted over the bound
MODELS = ("poisson", "observed")


@dataclass(frozen=True, slots=True)
class AutoHeadroom:
    max_slots: int  # per replica, at most (the policy's bound)
    min_slots: int = 1  # per replica, at least (also before the class is seen): never none to go to
    quantile: float = 0.95  # poisson: of its predicted count; observed: of the counts its arrivals made
    window_s: float = 30.0  # seconds of arrivals it is taken over
    model: str = "poisson"  # or "observed" (MODELS)


def poisson_quantile(mean: float, q: float, most: int = 100_000) -> int:
    """The least ``k`` with P(N <= k) >= ``q`` for N Poisson of ``mean`` (at most ``most``; ``most`` for
    ``q`` >= 1). Summed term by term in logs (no underflow at a large mean)."""
    if mean <= 0:
        return 0
    if q >= 1:
        return most
    log_mean, cdf, k = math.log(mean), 0.0, 0
    while k < most:
        cdf += math.exp(k * log_mean - mean - math.lgamma(k + 1))
        if cdf >= q - 1e-12:
            return k
        k += 1
    return most


@dataclass(frozen=True, slots=True)
class ClassLoad:
    """The class's load over the window (``TopConcurrency.load``): Little's law's terms."""

    rate_per_s: float  # lambda: arrivals a second
    service_s: float  # W: mean seconds from arrival to its attempt's end (area / arrivals)
    seconds: float  # the span measured (the window, or less at a cold start)
    arrivals: int

    @property
    def concurrency(self) -> float:  # L = lambda x W
        return self.rate_per_s * self.service_s


class TopConcurrency:
    """The highest class's requests of one pool in flight (arrival to the attempt's end), and at each
    of its arrivals the count that arrival made (itself included), kept over a sliding window; the
    count's area over time (its integral), for the mean concurrency."""

    __slots__ = ("_seen", "_steps", "count", "since", "window_s")

    def __init__(self, window_s: float, since: float = 0.0) -> None:
        self.window_s = window_s
        self.since = since  # when the count began (the pool's queue was made)
        self.count = 0
        self._seen: deque[tuple[float, int]] = deque()  # (arrival, count with it), oldest first
        # (time, area from ``since`` to it, count from it on), oldest first: the step function
        self._steps: deque[tuple[float, float, int]] = deque([(since, 0.0, 0)])

    def _step(self, now: float) -> None:
        t, area, count = self._steps[-1]
        now = max(now, t)
        self._steps.append((now, area + count * (now - t), self.count))

    def started(self, now: float) -> None:
        self.count += 1
        self._seen.append((now, self.count))
        self._step(now)
        self._expire(now)

    def ended(self, now: float) -> None:
        self.count = max(0, self.count - 1)
        self._step(now)
        self._expire(now)

    def _expire(self, now: float) -> None:
        # the newest arrival stays however old: a class seen once keeps the room one arrival needs
        while len(self._seen) > 1 and self._seen[0][0] < now - self.window_s:
            self._seen.popleft()
        # the step in force at the window's start stays (the area is read from it)
        while len(self._steps) > 1 and self._steps[1][0] <= now - self.window_s:
            self._steps.popleft()

    def _area_since(self, start: float, now: float) -> float:
        """The count's integral over [start, now]; ``start`` at or after the first step kept (the one in
        force at the window's start: ``_expire``)."""
        t, area, count = self._steps[-1]
        t0, a0, c0 = self._steps[0]
        return max(0.0, area + count * (max(now, t) - t) - (a0 + c0 * max(0.0, start - t0)))

    def load(self, now: float) -> ClassLoad:
        """Its arrival rate and time in the system over the last ``window_s`` (or since it began)."""
        self._expire(now)
        start = max(self.since, now - self.window_s)
        seconds = now - start
        arrivals = sum(1 for at, _ in self._seen if at >= start)
        if seconds <= 0 or arrivals == 0:
            return ClassLoad(0.0, 0.0, max(0.0, seconds), 0)
        area = self._area_since(start, now)
        return ClassLoad(arrivals / seconds, area / arrivals, seconds, arrivals)

    def needed(self, now: float, auto: AutoHeadroom, prior: float = 0.0) -> float:
        """The count the class needs room for under ``auto.model`` (see the module); ``prior``: the
        policy's bound over the pool, at a cold start (and, past what it holds now, all the room a
        derivation can keep: the count is summed no further)."""
        if auto.model == "observed":
            return self.quantile(now, auto.quantile, prior)
        got = self.load(now)
        if now - self.since < self.window_s and got.arrivals < WARM_ARRIVALS:
            return prior
        most = self.count + math.ceil(prior) if prior > 0 else 100_000
        return float(poisson_quantile(got.concurrency, auto.quantile, most))

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
