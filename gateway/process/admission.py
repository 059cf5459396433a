"""Concurrency limits with a bounded wait: per process (all inference requests) and per replica.

Past the limit a request waits in a FIFO queue, itself bounded in length (``max_queued_requests``) and
in time (``queue_timeout_s``); past either bound it gets 503 with ``Retry-After`` in OpenAI's error
format, so a burst is smoothed while an overload sheds load early instead of piling up memory and
latency. Both limits count this process only (each worker process of ``--workers N`` has its own).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections import deque
from collections.abc import Container
from typing import TYPE_CHECKING

from config.policy import LimitsConfig
from gateway.errors import GatewayError
from gateway.observability.ops_metrics import OpsMetrics, ops_metrics
from router.pool import PoolRouter
from router.types import Decision, ReplicasBusy, RouteRequest

if TYPE_CHECKING:
    from gateway.process.state import GatewayState

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
    """A FIFO of futures woken one at a time, bounded in length."""

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


class ProcessAdmission:
    """At most ``max_concurrent_requests`` inference requests at once in this process."""

    def __init__(self, limits: LimitsConfig, metrics: OpsMetrics):
        self.limits = limits
        self.metrics = metrics
        self.active = 0
        self._waiters = Waiters()

    async def acquire(self) -> None:
        limit = self.limits.max_concurrent_requests
        if not limit or (self.active < limit and not len(self._waiters)):
            self.active += 1
            return
        if len(self._waiters) >= self.limits.max_queued_requests:
            self.metrics.admission_rejected.labels("process").inc()
            raise overloaded("process")
        gauge = self.metrics.admission_queued.labels("process")
        gauge.inc()
        try:
            deadline = asyncio.get_running_loop().time() + self.limits.queue_timeout_s
            while self.active >= limit:
                left = deadline - asyncio.get_running_loop().time()
                if left <= 0 or not await self._waiters.wait(left):
                    self.metrics.admission_rejected.labels("process").inc()
                    raise overloaded("process")
                limit = self.limits.max_concurrent_requests or self.active + 1
            self.active += 1
        finally:
            gauge.dec()

    def release(self) -> None:
        self.active -= 1
        self._waiters.wake_one()


_REPLICA_WAITERS: weakref.WeakKeyDictionary[PoolRouter, Waiters] = weakref.WeakKeyDictionary()


def _waiters_of(router: PoolRouter) -> Waiters:
    w = _REPLICA_WAITERS.get(router)
    if w is None:
        w = _REPLICA_WAITERS[router] = Waiters()
    return w


async def route_with_slots(
    state: GatewayState, router: PoolRouter, request: RouteRequest, exclude: Container[str]
) -> Decision:
    """``router.route``; when every healthy replica not yet tried is at ``max_concurrent_per_replica``
    (the router's slot filter raises ``ReplicasBusy``), wait for one to free a slot (bounded), else 503.

    ``NoReplicaAvailable`` still comes out unchanged when no healthy replica is left at all."""
    limits = state.policy.limits
    metrics = ops_metrics(state.metrics.registry)
    loop = asyncio.get_running_loop()
    deadline: float | None = None
    gauge = None
    try:
        while True:
            try:
                return router.route(request, exclude=exclude)
            except ReplicasBusy:
                pass
            waiters = _waiters_of(router)
            if deadline is None:
                if len(waiters) >= limits.max_queued_requests:
                    metrics.admission_rejected.labels("replica").inc()
                    raise overloaded("replica") from None
                deadline = loop.time() + limits.queue_timeout_s
                gauge = metrics.admission_queued.labels("replica")
                gauge.inc()
            left = deadline - loop.time()
            if left <= 0 or not await waiters.wait(left):
                metrics.admission_rejected.labels("replica").inc()
                raise overloaded("replica") from None
    finally:
        if gauge is not None:
            gauge.dec()


def replica_released(router: PoolRouter) -> None:
    """Call after ``router.release(decision)``: a request waiting for a replica slot may go."""
    w = _REPLICA_WAITERS.get(router)
    if w is not None:
        w.wake_one()
