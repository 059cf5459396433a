"""Single-flight coalescing of identical cache misses, in one process and across gateway pods.

Usage by the gateway (after a cache miss for ``key``)::

    async with coalescer.acquire(key) as flight:
        if flight.role == "leader":
            ...call upstream; for a stream: flight.publish(chunk) for each parsed chunk...
            ...store the entry (if storable), then: await flight.finish(response)
            (leaving the block without finish() fails the flight: followers are told to go upstream)
        else:  # "follower" (same process) or "remote_follower" (another pod leads)
            try:
                async for chunk in flight.chunks():   # streaming: the leader's chunks as they arrive
                    ...
                response = await flight.result()      # the complete response
            except FlightFailed:
                ...go upstream yourself (or acquire() again once: the first to come back leads)

* In-process: one ``_Shared`` per key holds the append-only chunk list and the final answer; followers
  iterate from index 0, so a late follower still sees every chunk in order.
* Across pods (when given a Redis client and the shared store): the leader holds a lease
  ``SET {prefix}:lease:{key} token NX PX lease_ms``, renewed while it runs, released by a Lua
  compare-and-delete. A pod that finds the lease taken waits for the entry to appear in the store,
  woken by a pub/sub message on ``{prefix}:fill:{key}`` (with polling and backoff as a fallback), and
  fails with ``FlightFailed`` on timeout, when the leader reports failure, or when the lease vanishes
  without an entry. Local requests of that pod follow the pod's waiter, so a pod waits once per key.
* Redis failures fail open: the pod leads locally (``flight.degraded`` is True). A lease whose
  release failed (Redis away when the leader finished) is released again in the background until
  it expires, so other requests of that key do not wait out the lease once Redis answers again.

Chunks published by a leader should be the parsed upstream chunks before any per-request rewriting
(PII unmasking), so that each follower can apply its own.

``acquire(key, meta)`` attaches the caller's ``meta`` to a flight it creates; a local follower sees
the creator's as ``flight.meta`` and may refuse to follow (the gateway passes the entity epochs its
answer was generated under: a follower that read newer ones, because a business event came in
between, must not be handed the leader's answer). ``leading()`` lists the metas of this process's
leaders still in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.asyncio as aioredis

from cache.store import ErrorHook, ResponseStore
from cache.store_redis import REDIS_ERRORS

Role = Literal["leader", "follower", "remote_follower"]

_RENEW_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RELEASE_LUA = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_MSG_OK = b"ok"
_MSG_FAIL = b"fail"


class FlightFailed(Exception):
    """The flight this request followed ended without an answer; go upstream yourself."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason  # leader_failed | leader_error | abandoned | timeout | no_entry | redis_error


@dataclass
class CoalescerStats:
    leaders: int = 0
    followers: int = 0
    remote_followers: int = 0
    failed: int = 0
    degraded: int = 0
    lease_lost: int = 0


@dataclass(eq=False)
class _Shared:
    key: str
    chunks: list[Any] = field(default_factory=list)
    response: dict[str, Any] | None = None
    error: FlightFailed | None = None
    closed: bool = False
    participants: int = 0
    meta: Any = None  # what the request that created this flight passed to acquire()
    leading: bool = True  # False: this pod waits for another pod's leader
    task: asyncio.Task[None] | None = None  # the remote wait of this pod, if any
    _wake: asyncio.Event = field(default_factory=asyncio.Event)

    def notify(self) -> None:
        self._wake.set()
        self._wake = asyncio.Event()

    def close(self, response: dict[str, Any] | None, error: FlightFailed | None) -> bool:
        if self.closed:
            return False
        self.response, self.error, self.closed = response, error, True
        self.notify()
        return True


@dataclass(eq=False)
class Flight:
    key: str
    role: Role
    degraded: bool
    _shared: _Shared
    _coalescer: Coalescer
    _lease_token: bytes | None = None
    _renew_task: asyncio.Task[None] | None = None

    @property
    def meta(self) -> Any:
        """The ``meta`` of the request that created this flight in this process (a follower's leader)."""
        return self._shared.meta

    # --- leader side ----------------------------------------------------------------------------------
    def publish(self, chunk: Any) -> None:
        """Append one chunk for the followers (leader only)."""
        if self.role != "leader":
            raise RuntimeError("only the leader publishes")
        if not self._shared.closed:
            self._shared.chunks.append(chunk)
            self._shared.notify()

    async def finish(self, response: dict[str, Any]) -> None:
        """The leader's answer is complete (store the entry first, so other pods find it)."""
        if self.role != "leader":
            raise RuntimeError("only the leader finishes")
        await self._coalescer._end_leader(self, response, None)

    async def fail(self, reason: str = "leader_failed") -> None:
        if self.role != "leader":
            raise RuntimeError("only the leader fails a flight")
        await self._coalescer._end_leader(self, None, FlightFailed(reason))

    # --- follower side --------------------------------------------------------------------------------
    async def chunks(self) -> AsyncIterator[Any]:
        """The leader's published chunks from the first, as they arrive; ends when the flight ends.

        Raises ``FlightFailed`` if the flight fails or goes silent for ``follower_timeout_s``. Yields
        nothing for a remote flight or a non-streaming leader: then use ``result()`` (and replay it).
        """
        s = self._shared
        timeout = self._coalescer.follower_timeout_s
        i = 0
        while True:
            while i < len(s.chunks):
                yield s.chunks[i]
                i += 1
            if s.closed:
                if s.error is not None:
                    raise s.error
                return
            wake = s._wake
            try:
                await asyncio.wait_for(wake.wait(), timeout)
            except TimeoutError:
                raise FlightFailed("timeout") from None

    async def result(self) -> dict[str, Any]:
        """The leader's complete response, or ``FlightFailed``."""
        s = self._shared
        deadline = time.monotonic() + self._coalescer.follower_timeout_s
        while not s.closed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise FlightFailed("timeout")
            wake = s._wake
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), remaining)
        if s.error is not None:
            raise s.error
        assert s.response is not None
        return s.response


class Coalescer:
    """Leader election per cache key; see the module docstring for the protocol.

    ``redis`` and ``store`` together enable cross-pod coalescing; without them it is in-process only.
    """

    def __init__(
        self,
        *,
        redis: aioredis.Redis | None = None,
        store: ResponseStore | None = None,
        key_prefix: str = "pgw",
        lease_ms: int = 30_000,
        follower_timeout_s: float = 120.0,
        poll_max_s: float = 1.0,
        on_error: ErrorHook | None = None,
    ):
        if (redis is None) != (store is None):
            raise ValueError("cross-pod coalescing needs both redis and the shared store")
        self.redis = redis
        self.store = store
        self.prefix = key_prefix
        self.lease_ms = lease_ms
        self.follower_timeout_s = follower_timeout_s
        self.poll_max_s = poll_max_s
        self.on_error = on_error
        self.stats = CoalescerStats()
        self._flights: dict[str, _Shared] = {}
        self._background: set[asyncio.Task[Any]] = set()
        if redis is not None:
            self._renew = redis.register_script(_RENEW_LUA)
            self._release = redis.register_script(_RELEASE_LUA)

    def lease_key(self, key: str) -> str:
        return f"{self.prefix}:lease:{{{key}}}"

    def channel(self, key: str) -> str:
        return f"{self.prefix}:fill:{{{key}}}"

    def in_flight(self) -> int:
        return len(self._flights)

    def leading(self) -> list[Any]:
        """The ``meta`` of every leader of this process still in flight."""
        return [s.meta for s in self._flights.values() if s.leading and not s.closed]

    def _failed(self, op: str, exc: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(op, exc)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return task

    @contextlib.asynccontextmanager
    async def acquire(self, key: str, meta: Any = None) -> AsyncIterator[Flight]:
        flight = await self._enter(key, meta)
        shared = flight._shared
        reason = "abandoned"
        try:
            yield flight
        except BaseException:
            reason = "leader_error"
            raise
        finally:
            shared.participants -= 1
            if flight.role == "leader" and not shared.closed:
                await self._end_leader(flight, None, FlightFailed(reason))
            elif shared.participants <= 0 and shared.task is not None and not shared.task.done():
                shared.task.cancel()  # nobody waits for this pod's remote wait any more
                shared.close(None, FlightFailed("abandoned"))
                self._forget(shared)

    async def _enter(self, key: str, meta: Any = None) -> Flight:
        shared = self._flights.get(key)
        if shared is not None and not shared.closed:
            shared.participants += 1
            self.stats.followers += 1
            return Flight(key, "follower", False, shared, self)
        shared = _Shared(key, meta=meta)
        shared.participants = 1
        self._flights[key] = shared
        if self.redis is None:
            self.stats.leaders += 1
            return Flight(key, "leader", False, shared, self)
        token = secrets.token_hex(16).encode()
        try:
            got = await self.redis.set(self.lease_key(key), token, nx=True, px=self.lease_ms)
        except REDIS_ERRORS as exc:
            self._failed("lease", exc)
            self.stats.degraded += 1
            self.stats.leaders += 1
            return Flight(key, "leader", True, shared, self)
        if got:
            self.stats.leaders += 1
            flight = Flight(key, "leader", False, shared, self, _lease_token=token)
            flight._renew_task = self._spawn(self._renew_loop(flight))
            return flight
        self.stats.remote_followers += 1
        shared.leading = False
        shared.task = self._spawn(self._wait_remote(shared))
        return Flight(key, "remote_follower", False, shared, self)

    def _forget(self, shared: _Shared) -> None:
        if self._flights.get(shared.key) is shared:
            del self._flights[shared.key]

    async def _end_leader(
        self, flight: Flight, response: dict[str, Any] | None, error: FlightFailed | None
    ) -> None:
        shared = flight._shared
        if not shared.close(response, error):
            return
        if error is not None:
            self.stats.failed += 1
        self._forget(shared)
        if flight._renew_task is not None:
            flight._renew_task.cancel()
        if flight._lease_token is not None and self.redis is not None:
            # Run the release as its own task: it must happen even if this request is being cancelled.
            task = self._spawn(self._release_and_notify(flight.key, flight._lease_token, error is None))
            await asyncio.shield(task)

    async def _release_and_notify(self, key: str, token: bytes, ok: bool) -> None:
        assert self.redis is not None
        try:
            await self._release(keys=[self.lease_key(key)], args=[token])
            await self.redis.publish(self.channel(key), _MSG_OK if ok else _MSG_FAIL)
        except REDIS_ERRORS as exc:
            self._failed("release", exc)
            self._spawn(self._release_later(key, token))

    async def _release_later(self, key: str, token: bytes) -> None:
        """Retry a failed release until it goes through or the lease would have expired anyway."""
        assert self.redis is not None
        deadline = time.monotonic() + self.lease_ms / 1000
        delay = 0.1
        while time.monotonic() + delay < deadline:
            await asyncio.sleep(delay)
            try:
                await self._release(keys=[self.lease_key(key)], args=[token])
                await self.redis.publish(self.channel(key), _MSG_FAIL)  # no entry was stored: go upstream
                return
            except REDIS_ERRORS:
                delay = min(delay * 2, 2.0)

    async def _renew_loop(self, flight: Flight) -> None:
        assert self.redis is not None and flight._lease_token is not None
        period = self.lease_ms / 3000.0
        while not flight._shared.closed:
            await asyncio.sleep(period)
            try:
                held = await self._renew(
                    keys=[self.lease_key(flight.key)], args=[flight._lease_token, self.lease_ms]
                )
            except REDIS_ERRORS as exc:
                self._failed("renew", exc)
                continue
            if not held:
                self.stats.lease_lost += 1
                return

    async def _wait_remote(self, shared: _Shared) -> None:
        """Wait for another pod's leader to store the entry; close ``shared`` with it or a failure."""
        assert self.redis is not None and self.store is not None
        key = shared.key
        deadline = time.monotonic() + self.follower_timeout_s
        pubsub = self.redis.pubsub()
        error: FlightFailed | None = None
        response: dict[str, Any] | None = None
        try:
            await pubsub.subscribe(self.channel(key))
            delay = 0.02
            while True:
                lease_held = await self.redis.exists(self.lease_key(key))
                entry = await self.store.get(key)  # after the lease check: a released lease means stored
                if entry is not None:
                    response = entry.response
                    break
                if not lease_held:
                    error = FlightFailed("no_entry")
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    error = FlightFailed("timeout")
                    break
                msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=min(delay, remaining))
                if msg is not None and msg.get("data") == _MSG_FAIL:
                    error = FlightFailed("leader_failed")
                    break
                delay = min(delay * 2, self.poll_max_s)
        except REDIS_ERRORS as exc:
            self._failed("follow", exc)
            error = FlightFailed("redis_error")
        finally:
            with contextlib.suppress(*REDIS_ERRORS):
                await pubsub.aclose()
        if error is not None:
            self.stats.failed += 1
        shared.close(response, error)
        self._forget(shared)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        for task in list(self._background):
            with contextlib.suppress(asyncio.CancelledError, *REDIS_ERRORS):
                await task
