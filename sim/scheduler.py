"""Admission of requests to the simulated engine: at most ``max_num_seqs`` run, the rest wait FIFO.

No I/O; only asyncio futures. Unlike ``asyncio.Semaphore`` the order is strictly first come, first
served, and the counts needed for the ``running``/``waiting`` gauges are kept here.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class FifoLimiter:
    """A FIFO counting semaphore with observable ``running`` and ``waiting`` counts."""

    __slots__ = ("_waiters", "limit", "max_running_seen", "max_waiting_seen", "running")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be >= 1")
        self.limit = limit
        self.running = 0
        self.max_running_seen = 0
        self.max_waiting_seen = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def try_acquire(self) -> bool:
        """Take a slot without waiting if one is free and nobody is queued."""
        if self.running < self.limit and not self._waiters:
            self.running += 1
            if self.running > self.max_running_seen:
                self.max_running_seen = self.running
            return True
        return False

    async def acquire(self) -> None:
        """Wait for a slot; on cancellation the place in the queue (or a handed-over slot) is freed."""
        if self.try_acquire():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        if len(self._waiters) > self.max_waiting_seen:
            self.max_waiting_seen = len(self._waiters)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # the slot was handed to us just as we were cancelled
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Hand the slot to the oldest live waiter, or free it."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_result(None)  # the slot passes over: ``running`` is unchanged
                return
        self.running -= 1

    def reset_peaks(self) -> None:
        self.max_running_seen = self.running
        self.max_waiting_seen = len(self._waiters)
