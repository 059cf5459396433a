"""Concurrency limits with a bounded wait: per process (all inference requests) and per replica.

Past the limit a request waits in a FIFO queue, itself bounded in length (``max_queued_requests``) and
in time (``queue_timeout_s``); past either bound it gets 503 with ``Retry-After`` in OpenAI's error
format, so a burst is smoothed while an overload sheds load early instead of piling up memory and
latency. Both limits count this process only (each worker process of ``--workers N`` has its own).

The per-replica cap itself is the router's slot filter (``router.filters.slots``); here is only the
queue of requests waiting for one of a pool's replicas to free a slot. The limits are passed in at
each call, so a reload's new limits apply at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator

from config.policy import LimitsConfig
from gateway.errors import GatewayError
from gateway.observability.metrics import GatewayMetrics

RETRY_AFTER_S = "1"


def overloaded(scope: str) -> GatewayError:
    what = "the gateway is" if scope == "process" else "every replica of this model is"
    return GatewayError(
        503,
        f"{what} at its concurrency limit; retry shortly",
        code="overloaded",
        headers={"Retry-After": RETRY_AFTER_S},
    )


class Waiters:
    """A FIFO of futures woken one at a time."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[asyncio.Future[None]] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    async def wait(self, timeout_s: float) -> bool:
        """Wait to be woken; False on timeout."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        try:
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            return False
        except BaseException:
            if fut.done() and not fut.cancelled():
                self.wake_one()  # woken but cancelled before running: pass the wake on
            raise
        finally:
            if not fut.done():
                fut.cancel()
            with contextlib.suppress(ValueError):
                self._queue.remove(fut)

    def wake_one(self) -> bool:
        while self._queue:
            fut = self._queue.popleft()
            if not fut.done():
                fut.set_result(None)
                return True
        return False


class Queued:
    """One request's place in a queue: ``wait`` until woken, within the queue's deadline, else 503."""

    __slots__ = ("_deadline", "_scope", "_waiters", "metrics")

    def __init__(self, waiters: Waiters, deadline: float, scope: str, metrics: GatewayMetrics):
        self._waiters, self._deadline, self._scope, self.metrics = waiters, deadline, scope, metrics

    async def wait(self) -> None:
        left = self._deadline - asyncio.get_running_loop().time()
        if left <= 0 or not await self._waiters.wait(left):
            self.metrics.child(self.metrics.admission_rejected, self._scope).inc()
            raise overloaded(self._scope)


class Admission:
    """The process's concurrency: at most ``max_concurrent_requests`` inference requests at once, and
    the queues of requests waiting for a replica slot, per pool."""

    def __init__(self, metrics: GatewayMetrics):
        self.metrics = metrics
        self.active = 0
        self._process = Waiters()
        self._replicas: dict[str, Waiters] = {}

    @contextlib.asynccontextmanager
    async def _queue(self, waiters: Waiters, scope: str, limits: LimitsConfig) -> AsyncIterator[Queued]:
        m = self.metrics
        if len(waiters) >= limits.max_queued_requests:
            m.child(m.admission_rejected, scope).inc()
            raise overloaded(scope)
        gauge = m.child(m.admission_queued, scope)
        gauge.inc()
        try:
            deadline = asyncio.get_running_loop().time() + limits.queue_timeout_s
            yield Queued(waiters, deadline, scope, m)
        finally:
            gauge.dec()

    # -- the process limit ----------------------------------------------------------------------------
    async def acquire(self, limits: LimitsConfig) -> None:
        limit = limits.max_concurrent_requests
        if not limit or (self.active < limit and not self._process._queue):  # ``len``: 2 calls more
            self.active += 1
            return
        async with self._queue(self._process, "process", limits) as queued:
            while self.active >= limit:
                await queued.wait()
            self.active += 1

    def release(self) -> None:
        self.active -= 1
        if self._process._queue:  # nobody waits (the usual case): no call
            self._process.wake_one()

    # -- waiting for a replica slot -------------------------------------------------------------------
    def replica_queue(
        self, pool: str, limits: LimitsConfig
    ) -> contextlib.AbstractAsyncContextManager[Queued]:
        """A place in the queue of ``pool``'s requests waiting for a replica to free a slot."""
        return self._queue(self._replicas.setdefault(pool, Waiters()), "replica", limits)

    def replica_released(self, pool: str) -> None:
        """A replica of ``pool`` finished a request: a request waiting for a slot may go."""
        w = self._replicas.get(pool)
        if w is not None and w._queue:
            w.wake_one()
