"""The shared approximate index: what one gateway process tells the others, and what it learns.

Why a stream and not a lookup, measured with ``python -m bench.routing_offline --trace
mooncake_conversation.jsonl --kv 0.25 --policies prefix_affinity --gateways 1 2 4 --share none index
index+load`` (4,000 requests of the Mooncake conversation trace in virtual time, each offered to a
gateway drawn at random; docs/benchmarks.md): one process keeps 0.979 of the pooled bound's hit rate;
2 and 4 processes that share nothing keep 0.743 and 0.575; with each decision's blocks reaching the
others 50 ms later, 0.990 and 0.981, and the same with 0 ms, 0.5 s or 2 s of delay (0.980-0.981 at 4
processes): a conversation's next turn comes seconds after the previous answer, so a placement that
arrives within a second is as good as a synchronous lookup. A lookup on the request path (smg's
publish-on-decision, read-with-a-2-ms-deadline) would buy nothing on this trace and put a Redis round
trip, and a deadline to tune, on every decision; here a decision never waits on anything: the
``first_byte`` hook appends the placement to a bounded queue, a background task sends a batch every
``flush_interval_s``, another applies the other processes' batches to the local index
(``PoolRouter.learn``). Sharing the queued prefill too (``--share index+prefill``: 0.975 and 0.964),
or that and the requests in flight (``index+load``: 0.974 and 0.965), did not help the hit rate, the
imbalance or p99 TTFT (which grows with the processes because bursts of simultaneous arrivals are
decided in parallel; docs/benchmarks.md), so only block hashes travel; the others' in-flight load
comes from the replicas' own metrics, which count every process's requests.

A placement is shared at the replica's first byte, not at the decision: by then the replica holds
the prefix, and an attempt that failed before its prefill (which this process unlearns) is never sent.

Failures: a transport that fails marks itself down (``prefix_gateway_shared_index_up``), the batch is
dropped (counted), and every process keeps routing on its own view; the reader tries again every
``retry_s`` and, back up, joins again (the Redis transport applies the stream's newest
``join_entries`` batches). Memory: at most ``max_pending`` placements wait to be sent and
``max_pending`` batches to be applied; the local index stays bounded by each replica's KV capacity.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from config.routing import SharedIndexConfig
from router.placements import Placement, PlacementError, decode, encode

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics
    from router.pool import PoolRouter

log = logging.getLogger("prefix_gateway")

# Placements applied between two yields to the loop. Applying one costs about 60 us (88 block hashes,
# the Mooncake trace's mean; decode and index insert), so a 64 KB batch (about 90 of them) held the
# loop 5 ms and every decision planned meanwhile waited (python -m bench.multigw); 8 is about 0.5 ms.
APPLY_SLICE = 8


class TransportError(Exception):
    """A transport call failed (the caller drops the batch or tries again later)."""


class Transport(Protocol):
    name: str

    async def open(self) -> None: ...

    async def send(self, batches: Sequence[bytes]) -> None: ...

    async def join(self) -> list[bytes]:
        """Batches to apply first (at start and after an outage): what the others sent recently."""
        ...

    async def receive(self) -> list[bytes]:
        """The other processes' next batches (waits a bounded time; may return none)."""
        ...

    async def close(self) -> None: ...


@dataclass(eq=False)
class SharedIndex:
    cfg: SharedIndexConfig
    transport: Transport
    routers: Callable[[str], PoolRouter | None]  # pool name -> its current router
    metrics: GatewayMetrics
    origin: bytes = field(default_factory=lambda: os.urandom(8))
    pending: deque[Placement] = field(default_factory=deque)
    up: bool = False
    _closing: bool = False
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)

    # -- the request path: one append -------------------------------------------------------------------
    def offer(self, pool: str, replica_id: str, hashes: Sequence[int]) -> None:
        """A replica started answering a prompt with ``hashes``: queue the placement for the next batch."""
        if not hashes:
            return
        if len(self.pending) >= self.cfg.max_pending:
            self._count("dropped", 1)
            return
        self.pending.append(Placement(pool, replica_id, tuple(hashes[: self.cfg.max_blocks])))

    # -- background ---------------------------------------------------------------------------------------
    async def start(self) -> None:
        await self.transport.open()
        self._tasks = [asyncio.ensure_future(self._flush_loop()), asyncio.ensure_future(self._read_loop())]

    async def close(self) -> None:
        """Stop both loops, send what is pending (bounded by the transport's own timeouts), close."""
        tasks, self._tasks = self._tasks, []
        for t in tasks:
            t.cancel()
        self._closing = True  # redis-py may turn a cancelled read into a timeout: the loops check this
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.flush(), timeout=2.0)
        await self.transport.close()

    async def flush(self) -> int:
        """Send the pending placements in batches of at most ``max_batch_bytes``; returns how many."""
        if not self.pending:
            return 0
        placements = list(self.pending)
        self.pending.clear()
        batches = list(encode(self.origin, placements, self.cfg.max_batch_bytes))
        try:
            await self.transport.send(batches)
        except TransportError as exc:
            self._count("dropped", len(placements))
            self._failed("send", exc)
            return 0
        self._count("sent", len(placements))
        return len(placements)

    def placements(self, batch: bytes) -> list[Placement]:
        """Another process's placements in ``batch`` (none of this process's own, none of a bad batch)."""
        try:
            origin, placements = decode(batch)
        except PlacementError:
            self.metrics.child(self.metrics.shared_errors, self.transport.name, "decode").inc()
            return []
        if origin == self.origin:
            return []
        self._count("received", len(placements))
        return placements

    def learn(self, placements: Sequence[Placement]) -> int:
        """Apply placements to the local index; returns how many named a pool and replica of ours."""
        applied = 0
        for p in placements:
            router = self.routers(p.pool)
            if router is not None and router.learn(p.replica, p.hashes):
                applied += 1
        self._count("applied", applied)
        self._count("unknown", len(placements) - applied)
        return applied

    async def apply(self, batch: bytes) -> int:
        """Apply a batch in slices of ``APPLY_SLICE`` placements, yielding to the loop in between, so
        that a decision waits behind one slice at most, not a whole batch."""
        placements = self.placements(batch)
        applied = 0
        for at in range(0, len(placements), APPLY_SLICE):
            if at:
                await asyncio.sleep(0)
            applied += self.learn(placements[at : at + APPLY_SLICE])
        return applied

    async def _flush_loop(self) -> None:
        while not self._closing:
            await asyncio.sleep(self.cfg.flush_interval_s)
            await self.flush()

    async def _read_loop(self) -> None:
        joined = False
        while not self._closing:
            try:
                if not joined:
                    for batch in await self.transport.join():
                        await self.apply(batch)
                    joined = True
                    self._set_up(True)
                for batch in await self.transport.receive():
                    await self.apply(batch)
            except TransportError as exc:
                if self._closing:
                    return
                joined = False
                self._failed("receive", exc)
                await asyncio.sleep(self.cfg.retry_s)

    # -- bookkeeping --------------------------------------------------------------------------------------
    def _count(self, outcome: str, n: int) -> None:
        if n:
            self.metrics.child(self.metrics.shared_placements, outcome).inc(n)

    def _failed(self, op: str, exc: BaseException) -> None:
        self.metrics.child(self.metrics.shared_errors, self.transport.name, op).inc()
        if self.up:
            log.warning(
                "shared index: transport down, routing on this process's own view",
                extra={"event": "shared_index_down", "transport": self.transport.name, "error": str(exc)},
            )
        self._set_up(False)

    def _set_up(self, up: bool) -> None:
        if up and not self.up:
            log.info(
                "shared index: transport up",
                extra={"event": "shared_index_up", "transport": self.transport.name},
            )
        self.up = up
        self.metrics.child(self.metrics.shared_up, self.transport.name).set(1 if up else 0)
