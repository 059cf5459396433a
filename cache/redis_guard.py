"""Every Redis call of a process within a deadline, and one breaker that fails them all open at once.

Redis stopped for 10 s (SIGSTOP: a partition, not a crash; connections stay open and nothing answers)
used to cost every cacheable request about 5 s (one socket timeout, with its retry, for each of the
store lookup, the fill bucket, the coalescing lease, the store write and the release) and every other
request 1 s (the tenant limiter), 8 cacheable requests completing in those 10 s. Here:

- **A deadline in milliseconds** (``redis.op_timeout_ms``) for each command and script, pool wait
  included. What it detects is a Redis that answers *nothing*: when a call's deadline passes while
  Redis answered other calls within the last deadline (this process is busy: a burst of a thousand
  requests queues for the pool, an event-loop iteration takes a second), the call gets one more
  deadline, up to ``MAX_EXTENSIONS``; only a call during which Redis answered nothing for a whole
  deadline fails. A plain wall-clock deadline turned a cold-cache stampede into cache misses
  (``python -m bench.stampede``: two gateways on one Redis made 2 generations and 0 second-wave hits
  instead of 1 and 1,000), because under that load the deadline measured the gateway's own CPU.
- **One breaker for the process's client** (``redis.breaker_failures`` failed calls in a row open it):
  while open, every call fails at once with ``RedisUnavailable`` and its caller takes its fail-open (or
  fail-closed) path; a background PING every ``redis.probe_interval_ms`` closes it at the first answer.
  A call that Redis answers with an error (``NOSCRIPT``, ``WRONGTYPE``) is an answer: it closes the
  run of failures.

It is one mechanism, in the client (``GuardedRedis.execute_command``, the one method every command and
script goes through), so the response store, the coalescer, the buckets, the explicit registry and the
ledger share it without code of their own. Pub/sub subscriptions (cross-pod coalescing) are guarded the
same way; a pipeline (only the usage report uses one, off the request path) fails at once while the
breaker is open and is otherwise bounded by the socket timeout.

Pure state (``RedisBreaker``) apart from the client, which owns its probe task: ``aclose()`` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

T = TypeVar("T")
BreakerState = Literal["closed", "open"]
StateHook = Callable[[BreakerState], None]


class RedisUnavailable(RedisConnectionError):
    """The breaker is open: the call was not sent (Redis missed its recent deadlines)."""


# What a call may raise that says Redis is not answering (as opposed to an answer that is an error).
_UNREACHABLE: tuple[type[BaseException], ...] = (RedisConnectionError, RedisTimeoutError, OSError)
_UNANSWERED: tuple[type[BaseException], ...] = (TimeoutError, *_UNREACHABLE)  # a probe that got no answer


@dataclass(slots=True)
class RedisBreaker:
    """Consecutive failures open it; only a probe closes it (the caller runs the probes)."""

    failures_to_open: int = 3
    state: BreakerState = "closed"
    failures: int = 0
    opened_at: float = 0.0

    def success(self) -> None:
        self.failures = 0

    def failure(self, now: float) -> bool:
        """One more failed call; True when this one opened the breaker."""
        if self.state == "open":
            return False
        self.failures += 1
        if self.failures >= self.failures_to_open:
            self.state, self.opened_at = "open", now
            return True
        return False

    def close(self) -> bool:
        """A probe answered; True when the breaker was open."""
        was_open = self.state == "open"
        self.state, self.failures = "closed", 0
        return was_open


MAX_EXTENSIONS = 30  # a call waits at most this many deadlines, however busy Redis is with others


class _Watch:
    """The deadline of one call: at each expiry, more time if Redis answered anything in the last
    deadline (the call is queued behind this process's own work), else the call times out.

    The verdict waits one event-loop iteration after the timer (``call_soon``): a reply that arrived in
    the iteration the timer fired in resumes its caller first, so a burst of calls whose deadlines
    pass together still sees Redis's answers. A client that has never had an answer (a cold pool
    opening its connections under a burst) is given the same benefit of the doubt, up to
    ``MAX_EXTENSIONS``."""

    __slots__ = ("cm", "expiry", "give_up", "guard", "handle", "loop")

    def __init__(self, guard: RedisGuard, cm: asyncio.Timeout, loop: asyncio.AbstractEventLoop) -> None:
        self.guard, self.cm, self.loop = guard, cm, loop
        now = loop.time()
        self.expiry = now + guard.deadline_s
        self.give_up = now + MAX_EXTENSIONS * guard.deadline_s
        self.handle: asyncio.Handle = loop.call_at(self.expiry, self.fire)

    def fire(self) -> None:
        self.handle = self.loop.call_soon(self.decide)

    def decide(self) -> None:
        guard, now = self.guard, self.loop.time()
        answering = guard.last_answer >= self.expiry - guard.deadline_s or guard.last_answer == float("-inf")
        if answering and now < self.give_up:
            self.expiry = now + guard.deadline_s  # one more deadline from now, however late the loop was
            self.handle = self.loop.call_at(self.expiry, self.fire)
        else:
            self.cm.reschedule(now)  # expire now: asyncio.timeout raises TimeoutError

    def cancel(self) -> None:
        self.handle.cancel()


class RedisGuard:
    """The deadline and the breaker of one client; the probe loop runs while the breaker is open."""

    def __init__(
        self,
        *,
        op_timeout_ms: int = 100,
        breaker_failures: int = 3,
        probe_interval_ms: int = 500,
        on_state: StateHook | None = None,
    ) -> None:
        self.deadline_s = op_timeout_ms / 1000
        self.probe_interval_s = probe_interval_ms / 1000
        self.breaker = RedisBreaker(breaker_failures)
        self.on_state = on_state
        self.last_answer = float("-inf")  # loop time of Redis's latest answer to any call
        self._probe: asyncio.Task[None] | None = None
        self._ping: Callable[[], Awaitable[Any]] | None = None

    @property
    def open(self) -> bool:
        return self.breaker.state == "open"

    @property
    def max_wait_s(self) -> float:
        """The longest a call waits (pool queue included) while Redis answers other calls."""
        return MAX_EXTENSIONS * self.deadline_s

    def refuse_if_open(self) -> None:
        if self.open:
            raise RedisUnavailable("Redis is not answering (breaker open): call not sent")

    def probe_with(self, ping: Callable[[], Awaitable[Any]]) -> None:
        """What the probe loop sends (the client's own PING, outside the guard)."""
        self._ping = ping

    async def call(self, make: Callable[[], Awaitable[T]]) -> T:
        """Run ``make()`` within the deadline, feeding the breaker; refuse at once while it is open."""
        self.refuse_if_open()
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(None) as cm:
                watch = _Watch(self, cm, loop)
                try:
                    result = await make()
                finally:
                    watch.cancel()
        except TimeoutError:
            self._failed()
            raise RedisTimeoutError(f"Redis answered nothing for {self.deadline_s * 1000:.0f} ms") from None
        except _UNREACHABLE:
            self._failed()
            raise
        except Exception:
            self._answered(loop)  # Redis answered (with an error): it is there
            raise
        self._answered(loop)
        return result

    def _answered(self, loop: asyncio.AbstractEventLoop) -> None:
        self.last_answer = loop.time()
        self.breaker.success()

    def _failed(self) -> None:
        if self.breaker.failure(time.monotonic()):
            self._notify("open")
            if self._ping is not None and (self._probe is None or self._probe.done()):
                self._probe = asyncio.ensure_future(self._probe_until_closed(self._ping))

    async def _probe_until_closed(self, ping: Callable[[], Awaitable[Any]]) -> None:
        while self.open:
            await asyncio.sleep(self.probe_interval_s)
            try:
                async with asyncio.timeout(self.deadline_s):
                    await ping()
            except _UNANSWERED:
                continue
            except Exception:  # an error answer is an answer
                pass
            self.last_answer = asyncio.get_running_loop().time()
            if self.breaker.close():
                self._notify("closed")

    def _notify(self, state: BreakerState) -> None:
        if self.on_state is not None:
            self.on_state(state)

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
            self._probe = None


class GuardedRedis(aioredis.Redis):
    """``redis.asyncio.Redis`` whose every command and script runs through ``self.guard``."""

    guard: RedisGuard

    @classmethod
    def owning(cls, pool: aioredis.ConnectionPool, guard: RedisGuard) -> GuardedRedis:
        """A client that owns ``pool`` (``aclose()`` closes its connections) and probes with PING."""
        client = cls.from_pool(pool)
        client.guard = guard
        guard.probe_with(lambda: aioredis.Redis.execute_command(client, "PING"))
        return client

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        return await self.guard.call(lambda: super(GuardedRedis, self).execute_command(*args, **options))

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Any:
        pipe = super().pipeline(transaction, shard_hint)
        execute = pipe.execute  # off the request path: refused while open, else the socket timeout

        async def refused_while_open(raise_on_error: bool = True) -> Any:
            self.guard.refuse_if_open()
            return await execute(raise_on_error)

        pipe.execute = refused_while_open
        return pipe

    def pubsub(self, **kwargs: Any) -> Any:
        pubsub = super().pubsub(**kwargs)
        send = pubsub.execute_command  # (un)subscribe: guarded like a command

        async def guarded(*args: Any) -> Any:
            return await self.guard.call(lambda: send(*args))

        pubsub.execute_command = guarded
        return pubsub

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await self.guard.close()
        await super().aclose(close_connection_pool)
