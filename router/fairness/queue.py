"""The gateway's queue while a pool is saturated: priority bands, fair shares inside a band.

**Bands.** One band per priority class (``router.fairness.classes``), the highest first, and the
batch band last. A release takes from the highest band that has a waiter: an interactive request
never waits behind a background one, and no online request behind a batch line.

**Fair shares inside a band: start-time fair queuing (Goyal, Vin and Cheng, SIGCOMM 1996) by
predicted work.** Each tenant is a flow with a weight; a request's start tag is the later of the
band's virtual time and its flow's previous finish tag, its finish tag that plus ``work / weight``
(``router.fairness.work``: uncached prefill + a decode estimate); the band releases the smallest start
tag and its virtual time moves to it. A tenant flooding the band queues requests whose tags run far
ahead of the band's clock, so each other tenant's next request, tagged at the clock, goes before the
flood's backlog: over any interval in which both are backlogged, each tenant receives work in
proportion to its weight, within one request's work (SFQ's bound), however many requests the flood
queued. Start tags, not finish tags: a newly active tenant is served within one release of the
others, which is what an interactive tenant's TTFT needs (WFQ's finish tags hold it back by its own
request's size). Requests, not tokens, are the unit of a release: one is released per free slot.

**Prefix affinity at release.** A release may look at the first ``lookahead`` requests of the band in
fair order and take the first one that ``prefer`` says fits the freed replica (its prefix lives
there), else the first: a released request then lands where its prefix lives more often, at the cost
of reordering within ``lookahead`` requests (each reordered request was due within that many
releases, so the fairness bound loosens by at most that much work).

**Starvation bound.** A request of a lower band that has waited its class's ``max_wait_s`` goes
before the higher band's order (the earliest such deadline first): every class moves at least one
request per ``max_wait_s``. Only across bands: inside the band being served the fair order already
bounds each flow's wait, and applied there the bound turned a sustained overload, where every waiter
is past it, into arrival order (the Mooncake trace with weights 3:1, ``python -m bench.fairness_trace``:
shares 0.53 / 0.47 by offered load, the weights ignored).

**Reserved slots.** ``pop(max_band=0)`` releases only the highest band: the release
(``router.fairness.release``) asks for that while the pool has no slot free beyond those it keeps for
the highest class (``SaturationLimits.reserved``).

**Caps and preemption.** A tenant holds at most its ``max_queued`` waiters (more: ``QueueFull``, the
gateway answers 429); the queue holds ``max_queued`` in all. A request arriving at a full queue takes
the place of the newest waiter of the lowest band below its own, which is answered at once (the only
preemption: a request that has been sent to a replica is never taken back, it may already be
streaming), else it is refused.
"""

from __future__ import annotations

import heapq
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True, eq=False)
class Waiter:
    flow: str | None  # the tenant (None: the batch band's one flow)
    band: int  # 0: the highest
    work: float
    weight: float
    arrived: float
    max_wait_s: float
    payload: Any = None  # the gateway's own (its future, the request)
    start: float = 0.0
    finish: float = 0.0
    seq: int = 0
    queued: bool = False
    held_since: float | None = None  # first passed over to wait for its home (router.fairness.release)


class QueueFull(Exception):
    """No room: ``scope`` is ``tenant`` (its own cap) or ``queue`` (the whole queue, no lower waiter)."""

    def __init__(self, scope: str):
        super().__init__(scope)
        self.scope = scope


class FairQueue:
    def __init__(self, bands: int, max_queued: int) -> None:
        if bands < 1 or max_queued < 1:
            raise ValueError("a fair queue needs at least one band and one place")
        self.max_queued = max_queued
        self._heaps: list[list[tuple[float, int, Waiter]]] = [[] for _ in range(bands)]
        self._fifo: list[deque[Waiter]] = [deque() for _ in range(bands)]
        self._vtime = [0.0] * bands
        self._finish: list[dict[str | None, float]] = [{} for _ in range(bands)]
        self._flows: Counter[str | None] = Counter()
        self._keys: Counter[tuple[str | None, int]] = Counter()
        self._len = 0
        self._seq = 0

    def __len__(self) -> int:
        return self._len

    def queued(self, flow: str | None) -> int:
        return self._flows[flow]

    def depth(self) -> dict[tuple[str | None, int], int]:
        """Waiters by (flow, band), for the queue-depth gauge."""
        return {k: n for k, n in self._keys.items() if n}

    def vtime(self, band: int) -> float:
        return self._vtime[band]

    # -- in ---------------------------------------------------------------------------------------------
    def push(self, w: Waiter, flow_cap: int) -> Waiter | None:
        """Queue ``w``; returns the waiter it displaced (preempted), if any. Raises ``QueueFull``."""
        if flow_cap < 1 or self._flows[w.flow] >= flow_cap:
            raise QueueFull("tenant")
        evicted = None
        if self._len >= self.max_queued:
            evicted = self._newest_below(w.band)
            if evicted is None:
                raise QueueFull("queue")
            self.remove(evicted)
        b = w.band
        w.start = max(self._vtime[b], self._finish[b].get(w.flow, 0.0))
        w.finish = w.start + w.work / w.weight
        self._finish[b][w.flow] = w.finish
        self._seq += 1
        w.seq = self._seq
        self._enter(w)
        return evicted

    def requeue(self, w: Waiter) -> None:
        """Put back a waiter ``pop`` gave out that could not be placed, with its tags (no new share)."""
        if not w.queued:
            self._enter(w, front=True)

    def _enter(self, w: Waiter, front: bool = False) -> None:
        w.queued = True
        heapq.heappush(self._heaps[w.band], (w.start, w.seq, w))
        if front:
            self._fifo[w.band].appendleft(w)
        else:
            self._fifo[w.band].append(w)
        self._flows[w.flow] += 1
        self._keys[(w.flow, w.band)] += 1
        self._len += 1

    # -- out --------------------------------------------------------------------------------------------
    def remove(self, w: Waiter) -> None:
        """Take ``w`` out (it gave up, was preempted, or was released); its unused share is returned."""
        if not w.queued:
            return
        w.queued = False
        self._flows[w.flow] -= 1
        self._keys[(w.flow, w.band)] -= 1
        self._len -= 1
        if self._finish[w.band].get(w.flow) == w.finish:
            self._finish[w.band][w.flow] = w.start  # its flow's next request starts where it would have

    def pop(
        self,
        now: float,
        prefer: Callable[[Waiter], bool] | None = None,
        lookahead: int = 1,
        max_band: int | None = None,
    ) -> Waiter | None:
        """The next waiter to release (removed from the queue), of a band up to ``max_band`` (None:
        any), or None when there is none."""
        if not self._len:
            return None
        top = len(self._heaps) - 1 if max_band is None else min(max_band, len(self._heaps) - 1)
        band = next((b for b in range(top + 1) if self._live_top(self._heaps[b])), None)
        if band is None:
            return None
        chosen = self._overdue(now, band, top)  # a lower band's overdue waiter, before the band's order
        if chosen is None:
            chosen = self._in_order(band, prefer, max(1, lookahead))
            self._vtime[band] = max(self._vtime[band], chosen.start)
        self._finish_pop(chosen)
        return chosen

    def ahead(self, w: Waiter) -> int:
        """Waiters the band order releases before ``w`` (aging aside)."""
        n = 0
        for b in range(w.band):
            n += sum(1 for _, _, x in self._heaps[b] if x.queued)
        key = (w.start, w.seq)
        n += sum(1 for s, q, x in self._heaps[w.band] if x.queued and (s, q) < key)
        return n

    def _finish_pop(self, w: Waiter) -> None:
        w.queued = False
        self._flows[w.flow] -= 1
        self._keys[(w.flow, w.band)] -= 1
        self._len -= 1

    @staticmethod
    def _live_top(heap: list[tuple[float, int, Waiter]]) -> bool:
        while heap and not heap[0][2].queued:
            heapq.heappop(heap)
        return bool(heap)

    def _in_order(self, band: int, prefer: Callable[[Waiter], bool] | None, lookahead: int) -> Waiter:
        heap = self._heaps[band]
        first: list[tuple[float, int, Waiter]] = []
        while heap and len(first) < (lookahead if prefer is not None else 1):
            entry = heapq.heappop(heap)
            if entry[2].queued:
                first.append(entry)
        pick = first[0]
        if prefer is not None:
            pick = next((e for e in first if prefer(e[2])), first[0])
        for e in first:
            if e is not pick:
                heapq.heappush(heap, e)
        return pick[2]

    def _heads(self) -> list[Waiter]:
        heads = []
        for fifo in self._fifo:
            while fifo and not fifo[0].queued:
                fifo.popleft()
            if fifo:
                heads.append(fifo[0])
        return heads

    def _overdue(self, now: float, band: int, top: int) -> Waiter | None:
        """The most overdue head of a band below ``band`` (the highest with a waiter) up to ``top``:
        inside ``band`` itself its fair order already bounds every flow's wait."""
        due = [w for w in self._heads() if band < w.band <= top and now - w.arrived >= w.max_wait_s]
        return min(due, key=lambda w: (w.arrived + w.max_wait_s, w.band, w.seq)) if due else None

    def _newest_below(self, band: int) -> Waiter | None:
        for b in range(len(self._fifo) - 1, band, -1):
            for w in reversed(self._fifo[b]):
                if w.queued:
                    return w
        return None
