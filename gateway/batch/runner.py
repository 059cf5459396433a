"""Runs one batch's plan: every line through an injected ``send``, within a share of each replica.

``send(line, slot) -> (status, body)`` is the gateway's own request path in production (so routing,
billing and the response cache apply to batch lines as to any request) and any async callable in
tests. ``slot`` is the line's place in the share: ``slot.replica`` is the replica the plan chose, which
the router may overrule (unhealthy, or beyond the bounded load: ``router.filters.planned``), but only
for a replica whose share has a slot free, and the slot moves with the line (``Slot.move``). What the
runner adds:

- **Lanes.** One lane per replica range of the plan, worked through in plan order, so a replica works
  through one shared prefix at a time. A line that waits for another (``PlannedLine.after``) is held
  until that one has answered; at most one such prefix-warming line per lane is in flight, sent while
  the previous group's tail still runs, so the next group starts with its prefix cached and the wait
  costs about nothing (engines cache a prefix once its prefill is done, not while it runs).
- **Share.** A replica holds at most ``allowed(waiting)`` batch lines: ``floor(share ×
  replica_slots)`` while its online queue (``load(replica)``, requests waiting) is at most
  ``backoff.waiting_start``, none from ``waiting_stop`` on, linear between. The slots are counted per
  replica in a ``SlotPool`` that every batch of the process (on that model) shares, so two batches
  together never exceed it, and a line the router places off its plan takes its slot along. A lane
  re-reads the load at every answer and every ``poll_s``; nothing in flight is ever cut off by a backoff.
- **Stealing.** A lane with nothing left takes the back half of the unsent lines of the busiest lane, if
  that one is stalled by its online queue or has two rounds of its slots left, cut at a group boundary
  when one is near: the plan's ranges are balanced by expected work, the fleet's online load is not.
  The stolen group pays one more prefill of its prefix; a lane stalled for good is emptied.
- **Online reserve.** No line runs on a replica of ``reserve`` (``batch.online_replicas``, left out of
  the plan): the router may not move a line there either.
- **Retries.** A 408, 429, 5xx or a transport error is retried after an exponential, jittered wait up to
  ``max_attempts``; the line keeps its place. Then the last answer (or ``request_failed``) is its result.
  A 429 whose code is in ``FINAL_CODES`` (the tenant's budget is spent) is the line's result at once: its
  ``Retry-After`` is the budget's reset, hours past any backoff, and each retry would be one more refusal.
- **Stop.** ``stop(reason)``: no new sends, in-flight sends cancelled (the engine aborts a request whose
  client went away), ``run`` returns the reason. Lines not recorded are the caller's to settle (re-run
  by the next holder, or answered ``batch_cancelled`` / ``batch_expired``); recording is exactly once
  per ``custom_id`` in the store, so a line cut off after its answer was recorded is never duplicated.
  A stop cuts sends only: a line whose answer is in hand (its slot already given back, so the next line
  may be in flight beside it) is recorded before ``run`` returns. Cutting it too answered a line the
  replica had generated, and the ledger billed, as ``batch_cancelled`` (a full-suite run: 18 sent for 9
  completed and 8 in flight at the cancel).
  A send cut by a stop whose lines are re-run (any but ``FINAL_STOPS``) is cancelled with
  ``pipeline.context.RESENT``: the generation it started is billed once, by the run that answers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
from array import array
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from config.batch import PoolBatchParams
from gateway.batch.objects import LineResult, answered, unanswered
from gateway.pipeline.context import RESENT
from router.batch_plan import Plan

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})
FINAL_CODES = frozenset({"budget_exceeded"})
"""Error codes of a retryable status that no retry within a run can change (``gateway.pipeline.budgets``)."""
FINAL_STOPS = frozenset({"cancelled", "expired"})
"""Stops after which the lines not recorded are answered (``batch_cancelled`` / ``batch_expired``);
after any other (a shutdown, a lost lease, an error) the next holder re-runs them."""


@dataclass(frozen=True, slots=True)
class BatchLine:
    """One request of a batch as ``send`` receives it."""

    batch_id: str
    tenant: str
    line: int  # 1-based line number in the input file
    custom_id: str
    request_id: str  # the output line's id: send it as x-request-id (one ledger row per line)
    endpoint: str  # chat | completions | embeddings
    url: str
    model: str
    body: dict[str, Any]


LoadSignal = Callable[[str], float | None]
"""Online requests waiting on a replica (its scraped queue), or None when unknown (full share)."""


def retryable(status: int | None, body: Any) -> bool:
    """Whether a send that ended with ``status`` (None: a transport failure) and ``body`` is tried again."""
    if status is None:
        return True
    if status not in RETRY_STATUS:
        return False
    error = body.get("error") if isinstance(body, dict) else None
    return not (isinstance(error, dict) and error.get("code") in FINAL_CODES)


class SlotPool:
    """Batch requests in flight per replica, shared by every batch one process runs on one model."""

    def __init__(self) -> None:
        self._used: dict[str | None, int] = {}

    def used(self, replica: str | None) -> int:
        return self._used.get(replica, 0)

    def in_use(self) -> dict[str | None, int]:
        """Slots held per replica (every replica that ever held one, for metrics)."""
        return dict(self._used)

    def take(self, replica: str | None, allowed: int) -> bool:
        n = self._used.get(replica, 0)
        if n >= allowed:
            return False
        self._used[replica] = n + 1
        return True

    def give(self, replica: str | None) -> None:
        self._used[replica] -= 1

    def move(self, frm: str | None, to: str) -> None:
        """A held slot changes replica (the router placed its line off the plan, where there was room)."""
        self._used[frm] -= 1
        self._used[to] = self._used.get(to, 0) + 1


class Slot:
    """One line's slot: the replica it is counted on (``router.types.Placement``). ``room(r)``: whether
    replica ``r``'s share has a slot free now."""

    __slots__ = ("_pool", "_room", "replica")

    def __init__(self, pool: SlotPool, replica: str | None, room: Callable[[str], bool]):
        self._pool, self._room, self.replica = pool, room, replica

    def has_room(self, replica_id: str) -> bool:
        return replica_id == self.replica or self._room(replica_id)

    def move(self, replica_id: str) -> None:
        """The router placed the line on ``replica_id`` (which had room): count it there."""
        if replica_id != self.replica:
            self._pool.move(self.replica, replica_id)
            self.replica = replica_id


Send = Callable[[BatchLine, Slot], Awaitable[tuple[int, Any]]]


@dataclass(slots=True)
class RunStats:
    """What a run did, for metrics: sends (retries included), lines by outcome, tokens of 2xx answers."""

    sent: int = 0
    retried: int = 0
    stolen: int = 0  # lines moved to an idle replica from one that had many left or was stalled
    completed: int = 0
    failed: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0

    def add_usage(self, body: Any) -> None:
        usage = body.get("usage") if isinstance(body, Mapping) else None
        if not isinstance(usage, Mapping):
            return
        self.prompt_tokens += _int(usage.get("prompt_tokens"))
        self.completion_tokens += _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        if isinstance(details, Mapping):
            self.cached_tokens += _int(details.get("cached_tokens"))
        details = usage.get("completion_tokens_details")
        if isinstance(details, Mapping):
            self.reasoning_tokens += _int(details.get("reasoning_tokens"))


def _int(v: Any) -> int:
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0


@dataclass(slots=True)
class _Lane:
    """A replica's lines, each by its plan position (an int: a 50,000-line batch's lanes are lists of
    ints, nothing for the collector to walk; ``router.batch_plan.Range``)."""

    replica: str | None
    ready: list[int] = field(default_factory=list)  # heap of plan positions
    waiting: dict[int, list[int]] = field(default_factory=dict)  # positions, by the key waited for
    warming: int | None = None  # key of the line others wait for that is out (sent or awaiting a retry)
    busy: int = 0  # its lines in flight or awaiting a retry

    def backlog(self) -> list[int]:
        """Its lines not yet sent, by plan position."""
        return sorted([*self.ready, *(x for xs in self.waiting.values() for x in xs)])


class Runner:
    def __init__(
        self,
        plan: Plan,
        *,
        read: Callable[[int], Awaitable[BatchLine]],
        send: Send,
        load: LoadSignal,
        params: PoolBatchParams,
        slots: SlotPool,
        record: Callable[[LineResult], Awaitable[Any]],
        max_attempts: int = 3,
        backoff_s: float = 1.0,
        backoff_max_s: float = 30.0,
        poll_s: float = 1.0,
        stats: RunStats | None = None,
        rng: Callable[[], float] = random.random,
        reserve: frozenset[str] = frozenset(),
    ):
        self.read, self.send, self.load, self.record = read, send, load, record
        self.reserve = reserve  # replicas kept for online traffic: no line runs there
        self.params, self.slots = params, slots
        self.max_attempts, self.backoff_s, self.backoff_max_s = max_attempts, backoff_s, backoff_max_s
        self.poll_s, self.rng = poll_s, rng
        self.stats = stats if stats is not None else RunStats()
        self._lanes: list[_Lane] = []
        # Per plan position (run across the ranges, in trie order, so stolen lines keep their order):
        # the line's key and its cached tokens.
        self._key, self._cached = array("q"), array("q")
        for replica, lines in plan.ranges.items():
            lane = _Lane(replica)
            start = len(self._key)
            self._key.extend(lines.keys)
            self._cached.extend(lines.cached_tokens)
            for pos, after in enumerate(lines.after, start):
                if after < 0:
                    lane.ready.append(pos)
                else:
                    lane.waiting.setdefault(after, []).append(pos)
            self._lanes.append(lane)  # ready is in position order: a heap already
        self._left = len(plan)
        self._attempts: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._sending: set[asyncio.Task[None]] = set()  # before their answer: what a stop may cut
        self._timers: dict[int, asyncio.TimerHandle] = {}  # retries waiting, by line key
        self._wake = asyncio.Event()
        self._stop: str | None = None
        self._error: BaseException | None = None

    def stop(self, reason: str) -> None:
        """Stop sending (the first reason wins); ``run`` cancels what is in flight and returns it."""
        if self._stop is None:
            self._stop = reason
        self._wake.set()

    async def run(self) -> str:
        """Send every line; ``"done"`` once each has its result, else the reason it was stopped."""
        try:
            while self._stop is None and self._left:
                self._wake.clear()
                for lane in self._lanes:
                    self._fill(lane)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.poll_s)
        finally:
            for timer in self._timers.values():
                timer.cancel()
            resend = None if self._stop in FINAL_STOPS else RESENT
            for task in list(self._sending):  # an answer in hand is recorded, never cut
                task.cancel(resend)
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._error is not None:
            raise self._error
        return self._stop or "done"

    def _allowed(self, lane: _Lane) -> int:
        return self.params.allowed(None if lane.replica is None else self.load(lane.replica))

    def _room(self, replica: str) -> bool:
        if replica in self.reserve:
            return False
        return self.slots.used(replica) < self.params.allowed(self.load(replica))

    def _fill(self, lane: _Lane) -> None:
        allowed = self._allowed(lane)
        if allowed and not (lane.ready or lane.waiting or lane.busy):
            self._steal(lane)
        while lane.ready:
            pos = lane.ready[0]
            key = self._key[pos]
            warms = key in lane.waiting
            if warms and lane.warming not in (None, key):
                return  # one prefix warms at a time: the next group's lead waits for this one
            if not self.slots.take(lane.replica, allowed):
                return
            heapq.heappop(lane.ready)
            if warms:
                lane.warming = key
            lane.busy += 1
            self._start(lane, pos, Slot(self.slots, lane.replica, self._room))

    def _steal(self, thief: _Lane) -> None:
        """An idle lane takes the back half of the unsent lines of the lane with the most of them, if that
        lane is stalled (its replica's online queue allows it nothing) or has at least two rounds of its
        slots left; the cut moves within the middle quarter to the line that shares least with the one
        before it (a group boundary when one is near). The thief prefills the stolen group's prefix."""
        best: list[int] = []
        victim = None
        for lane in self._lanes:
            if lane is thief:
                continue
            items = lane.backlog()
            if len(items) > len(best) and (len(items) >= 2 * self.params.slots or not self._allowed(lane)):
                best, victim = items, lane
        if victim is None:
            return
        half, spread = len(best) // 2, len(best) // 8
        cut = min(
            range(half - spread, half + spread + 1), key=lambda i: (self._cached[best[i]], abs(i - half))
        )
        moved = best[cut:]
        taken = {self._key[pos] for pos in moved}
        dep_of = {self._key[pos]: k for k, xs in victim.waiting.items() for pos in xs}
        victim.ready = [pos for pos in victim.ready if self._key[pos] not in taken]
        heapq.heapify(victim.ready)
        victim.waiting = {
            k: kept
            for k, xs in victim.waiting.items()
            if (kept := [pos for pos in xs if self._key[pos] not in taken])
        }
        # On the thief the first stolen line warms the prefix; lines that waited for a line left behind
        # wait for it instead, the others keep their wait.
        first = moved[0]
        thief.ready.append(first)
        for pos in moved[1:]:
            dep = dep_of.get(self._key[pos])
            thief.waiting.setdefault(dep if dep in taken else self._key[first], []).append(pos)
        heapq.heapify(thief.ready)
        self.stats.stolen += len(taken)

    def _start(self, lane: _Lane, pos: int, slot: Slot) -> None:
        task = asyncio.get_running_loop().create_task(self._one(lane, pos, slot))
        self._tasks.add(task)
        self._sending.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(self._sending.discard)

    async def _one(self, lane: _Lane, pos: int, slot: Slot) -> None:
        key = self._key[pos]
        attempt = self._attempts.get(key, 0) + 1
        self._attempts[key] = attempt
        status: int | None = None
        body: Any = None
        error = ""
        try:
            line = await self.read(key)
            self.stats.sent += 1
            try:
                status, body = await self.send(line, slot)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # transport failure: retried, then the line's error
                error = f"{type(exc).__name__}: {exc}"[:500]
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # reading the input failed: the run cannot go on
            self._fail(exc)
            return
        finally:
            self.slots.give(slot.replica)
            self._wake.set()
        self._sending.discard(asyncio.current_task())
        if retryable(status, body) and attempt < self.max_attempts and self._stop is None:
            self.stats.retried += 1
            delay = min(self.backoff_max_s, self.backoff_s * 2 ** (attempt - 1)) * (0.5 + self.rng() / 2)
            self._timers[key] = asyncio.get_running_loop().call_later(delay, self._requeue, lane, pos)
            return
        if status is None:
            result = unanswered(line.batch_id, line.custom_id, line.line, "request_failed", error)
        else:
            result = answered(line.batch_id, line.custom_id, line.line, status, body)
        try:
            await self.record(result)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if self._stop is None:  # after a stop the line stays unrecorded: the caller settles it
                self._fail(exc)
            return
        if result.ok:
            self.stats.completed += 1
            self.stats.add_usage(body)
        else:
            self.stats.failed += 1
        self._left -= 1
        lane.busy -= 1
        if lane.warming == key:
            lane.warming = None
        for waiter in self._lanes:  # its waiters, wherever a steal has put them
            for item in waiter.waiting.pop(key, ()):
                heapq.heappush(waiter.ready, item)
        self._wake.set()

    def _requeue(self, lane: _Lane, pos: int) -> None:
        del self._timers[self._key[pos]]
        lane.busy -= 1  # ready again, no longer out
        heapq.heappush(lane.ready, pos)
        self._wake.set()

    def _fail(self, exc: BaseException) -> None:
        if self._error is None:
            self._error = exc
        self.stop("error")
