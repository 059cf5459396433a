"""Tenant budgets: what a tenant has spent (or used in tokens) in a budget's period, counted from the
ledger's rows, and whether a request may start.

**What is counted.** A ledger row's ``total_micros`` (a ``spend`` budget) or every token it bills (a
``tokens`` budget), added where the row is written (``gateway.pipeline.billing``, after the ledger took
the row or kept it for a retry; a row the ledger already had is not counted again). Nothing else is
stored: the counters are a running sum of the rows, keyed by tenant, budget name, unit and period.

**Where.** With Redis (``redis.url``), in Redis, shared by every pod: one ``INCRBY`` per row and budget
on the period's key (``{<prefix>:budget}:<tenant>:<budget>:<s|t>:<period>``, tenant and budget
length-prefixed; ids and amounts only, never a key or prompt text); a UTC day or month is one key, a
rolling window 60 slot keys of ``window_s / 60`` each (the window is counted to within one slot). One
script does the increments of a row and returns each budget's new total, so a soft limit is crossed by
exactly one row fleet-wide. Without Redis, in this process: a period is read from the ledger when the
process first meets it (so a restart forgets nothing), then the process's own rows are added, and the
period is read again every ``LOCAL_REFRESH_MS`` (2 s) while it is open, in the background: the other
``--workers`` processes writing the same SQLite file are seen within that (rows written while a read
runs may be counted twice until the next, never missed; rows waiting in the ledger's retry queue count
again once written). Pods without Redis each have their own ledger and count only their own rows.

**Admission and the overshoot bound.** A request may start while every budget that applies to it
(its tenant's, for its model) has spent less than its limit; it is not charged in advance, and a
request admitted before the budget ran out finishes and is billed in full. So the spend passes the
limit by at most what the requests in flight at that moment cost:
``overshoot <= in-flight requests of the tenant x the most one request costs`` (a request's cost is at
most its prompt at the input price plus ``n x max_tokens`` at the output price; the in-flight count is
at most ``limits.max_concurrent_requests`` per process, times the processes). A reservation at
admission (estimate, then settle) would tighten that only by refusing requests the budget could still
pay for, on an estimate of output the request may never produce (``max_tokens`` is a ceiling, not a
forecast), and a reservation a crashed pod never settled would hold the budget until it expired; the
in-flight bound needs no state beyond the counters and is what the tests assert
(``tests/integration/test_budgets.py``: two processes, twelve clients, a 20,000 µ$ budget; one run
spent 21,978 µ$, an overshoot of 1,978 against a bound of 9,768).

**Redis away: fails open, bounded.** A read or increment that fails (the guard's deadline or its open
breaker: ``cache.redis_guard``) falls back to this process's own view: the last totals it read plus the
rows it counted that Redis has not taken (``unsynced``, pushed by a background flush once Redis answers,
so the shared count ends up exact; an increment Redis applied but whose answer was lost is pushed
again: counted twice, on the refusing side, never missed). While Redis is away, a process admits a
budgeted tenant only until its unsynced count reaches ``tenancy.budgets.outage_pct`` of the budget,
so the fleet spends at most ``processes x outage_pct x limit`` past the last totals it read (plus the
in-flight bound), and no tenant is refused because of the outage alone unless ``outage_pct`` is 0
(fail closed: refused until Redis answers, budgeted tenants only). Tenants without budgets never wait
on any of this.

**Reset.** A day ends at UTC midnight, a month at 00:00 UTC on the 1st; a rolling window frees its
oldest slot ``window_s`` after the slot began. ``resets_ms`` is the earliest time the budget is no
longer exhausted given what is counted now (a rolling window: the slots that must fall out).
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from cache.billing.ledger import DAY_MS
from cache.billing.pricing import LineItem
from cache.store_redis import REDIS_ERRORS
from config.policy import TenancyConfig

if TYPE_CHECKING:
    import redis.asyncio as aioredis

    from cache.billing.ledger import Ledger

log = logging.getLogger("prefix_gateway")

SLOTS = 60  # a rolling window's slot keys
PRUNE_AT = 4096  # entries of a local table before expired ones are dropped


@dataclass(frozen=True, slots=True)
class Budget:
    tenant: str
    name: str
    unit: str  # spend (micros) | tokens
    limit: int
    period: str  # day | month | rolling
    window_ms: int = 0  # rolling only
    models: tuple[str, ...] | None = None
    warn_at_pct: tuple[int, ...] = (80,)

    def applies(self, model: str) -> bool:
        """Whether this budget counts (and limits) ``model`` (the ledger's model: the pool's name)."""
        if self.models is None:
            return True
        return any(fnmatch.fnmatchcase(model, p) for p in self.models)

    def amount(self, item: LineItem) -> int:
        return item.total_micros if self.unit == "spend" else item.tokens.total()

    @property
    def slot_ms(self) -> int:
        return max(1, self.window_ms // SLOTS)


def budgets_of(tenancy: TenancyConfig) -> dict[str, tuple[Budget, ...]]:
    """Each listed tenant's budgets, by tenant id (tenants without budgets absent)."""
    out: dict[str, tuple[Budget, ...]] = {}
    for t in tenancy.tenants:
        if t.budgets:
            out[t.id] = tuple(
                Budget(
                    tenant=t.id,
                    name=b.key_name,
                    unit=b.unit,
                    limit=b.limit,
                    period=b.period,
                    window_ms=(b.window_s or 0) * 1000,
                    models=tuple(b.models) if b.models else None,
                    warn_at_pct=tuple(b.warn_at_pct),
                )
                for b in t.budgets
            )
    return out


# -- periods ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Span:
    """One counter: its key suffix, the time it covers ``[start_ms, end_ms)``, and until when it is kept."""

    suffix: str
    start_ms: int
    end_ms: int
    expire_ms: int


def _month_start(ts_ms: int, ahead: int = 0) -> int:
    d = datetime.fromtimestamp(ts_ms / 1000, tz=UTC)
    months = d.year * 12 + d.month - 1 + ahead
    return int(datetime(months // 12, months % 12 + 1, 1, tzinfo=UTC).timestamp() * 1000)


def spans(b: Budget, now_ms: int) -> tuple[Span, ...]:
    """The counters the budget's period covers at ``now_ms``, oldest first; the last is the current one
    (where a row written now is added). Kept a day past their end (clocks of pods differ)."""
    if b.period == "day":
        start = now_ms - now_ms % DAY_MS
        end = start + DAY_MS
        day = datetime.fromtimestamp(start / 1000, tz=UTC).date().isoformat()
        return (Span(f"d{day}", start, end, end + DAY_MS),)
    if b.period == "month":
        start, end = _month_start(now_ms), _month_start(now_ms, 1)
        month = datetime.fromtimestamp(start / 1000, tz=UTC).strftime("%Y-%m")
        return (Span(f"m{month}", start, end, end + DAY_MS),)
    slot = b.slot_ms
    cur = now_ms // slot
    return tuple(
        Span(f"r{slot}.{s}", s * slot, (s + 1) * slot, (s + SLOTS + 1) * slot)
        for s in range(cur - SLOTS + 1, cur + 1)
    )


def reset_ms(b: Budget, counted: Sequence[tuple[Span, int]], now_ms: int) -> int:
    """The earliest time the budget is no longer exhausted, from the amounts counted per span now."""
    if b.period != "rolling":
        return counted[-1][0].end_ms
    left = sum(v for _, v in counted)
    for span, v in counted:
        left -= v
        if left < b.limit:
            return span.start_ms + SLOTS * b.slot_ms  # that slot falls out of the window
    return counted[-1][0].start_ms + SLOTS * b.slot_ms  # unreachable: the last slot alone holds less


@dataclass(frozen=True, slots=True)
class Spent:
    """A budget at one moment: what is counted against it, and whether a request may start."""

    budget: Budget
    spent: int
    resets_ms: int  # when it stops being exhausted (the period's end when it is not)
    degraded: bool = False  # counted from this process's own view: Redis did not answer
    outage_exhausted: bool = False  # refused by the outage allowance (tenancy.budgets.outage_pct)

    @property
    def exhausted(self) -> bool:
        return self.spent >= self.budget.limit or self.outage_exhausted

    @property
    def used(self) -> float:
        return self.spent / self.budget.limit


@dataclass(frozen=True, slots=True)
class Added:
    """What one row moved a budget from and to (soft limits are crossed between the two)."""

    budget: Budget
    before: int
    after: int

    def crossed(self) -> list[int]:
        """The soft limits (percent) and 100 this row crossed."""
        limit = self.budget.limit
        return [
            pct
            for pct in (*self.budget.warn_at_pct, 100)
            if self.before * 100 < pct * limit <= self.after * 100
        ]


def _seg(s: str) -> str:
    return f"{len(s)}.{s}"


# KEYS: each budget's window keys, oldest first, the current key last.
# ARGV: 1 budgets; then per budget: its key count, the amount to add to its current key, that key's ttl ms.
# Returns each budget's total over its window after the increment.
_ADD = """
local nb = tonumber(ARGV[1])
local k, a = 1, 2
local out = {}
for b = 1, nb do
  local n, amount, ttl = tonumber(ARGV[a]), ARGV[a + 1], ARGV[a + 2]
  a = a + 3
  local cur = KEYS[k + n - 1]
  redis.call('INCRBY', cur, amount)
  redis.call('PEXPIRE', cur, ttl)
  local sum = 0
  for i = k, k + n - 1 do
    local v = redis.call('GET', KEYS[i])
    if v then sum = sum + tonumber(v) end
  end
  out[b] = sum
  k = k + n
end
return out
"""


Clock = Callable[[], float]
LOCAL_REFRESH_MS = 2000  # without Redis: a period still open is read from the ledger again this often


@dataclass(slots=True, eq=False)
class _Counted:
    """A counter of a process without Redis: the ledger's sum at the last read, plus this process's rows."""

    expire_ms: int
    value: int = 0
    ready: bool = False  # the first read from the ledger finished
    read_at: int = 0  # when the last read began
    reading: asyncio.Task[None] | None = None
    delta: int = 0  # rows this process counted while ``reading`` runs


@dataclass(eq=False)
class BudgetCounters:
    """The counters of every budget: in Redis when ``redis`` is given, else in this process, read from
    ``ledger`` when a period is first met (see the module)."""

    redis: aioredis.Redis | None = None
    ledger: Ledger | None = None
    key_prefix: str = "pgw"
    outage_pct: int = 10
    clock: Clock = time.time
    on_error: Callable[[str, BaseException], None] | None = None
    # Redis: the totals last read per key, and the amounts counted here that Redis has not taken.
    _known: dict[str, tuple[int, int]] = field(default_factory=dict)  # key -> (value, expire_ms)
    _unsynced: dict[str, tuple[int, int]] = field(default_factory=dict)
    _flusher: asyncio.Task[None] | None = None
    # No Redis: the counters themselves, and the reads of the ledger in progress.
    _local: dict[str, _Counted] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._add = self.redis.register_script(_ADD) if self.redis is not None else None

    def key(self, b: Budget, span: Span) -> str:
        unit = "s" if b.unit == "spend" else "t"
        return f"{{{self.key_prefix}:budget}}:{_seg(b.tenant)}:{_seg(b.name)}:{unit}:{span.suffix}"

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- reading -----------------------------------------------------------------------------------
    async def spent(self, budgets: Sequence[Budget], outage_pct: int | None = None) -> list[Spent]:
        """Where each budget stands now (``outage_pct``: the policy's allowance, else the one built with)."""
        if not budgets:
            return []
        now = self.now_ms()
        windows = [spans(b, now) for b in budgets]
        if self.redis is None:
            values = [
                await asyncio.gather(*(self._local_value(b, s) for s in w))
                for b, w in zip(budgets, windows, strict=True)
            ]
            return [self._spent(b, w, v, now) for b, w, v in zip(budgets, windows, values, strict=True)]
        keys = [self.key(b, s) for b, w in zip(budgets, windows, strict=True) for s in w]
        try:
            raw = await self.redis.mget(keys)
        except REDIS_ERRORS as exc:
            self._failed("read", exc)
            pct = self.outage_pct if outage_pct is None else outage_pct
            return [self._degraded(b, w, now, pct) for b, w in zip(budgets, windows, strict=True)]
        out, i = [], 0
        for b, w in zip(budgets, windows, strict=True):
            counts: list[int] = []
            for s in w:
                v = int(raw[i]) if raw[i] is not None else 0
                i += 1
                key = self.key(b, s)
                if v:
                    if key not in self._known:
                        self._prune(self._known)
                    self._known[key] = (v, s.expire_ms)
                counts.append(v + self._pending(self._unsynced, key, now))
            out.append(self._spent(b, w, counts, now))
        return out

    def _spent(self, b: Budget, window: Sequence[Span], values: Sequence[int], now: int, **kw: bool) -> Spent:
        counted = list(zip(window, values, strict=True))
        total = sum(values)
        resets = reset_ms(b, counted, now) if total >= b.limit else window[-1].end_ms
        return Spent(b, total, resets, **kw)

    def _degraded(self, b: Budget, window: Sequence[Span], now: int, outage_pct: int) -> Spent:
        """Redis did not answer: the last totals read plus what Redis has not taken, and the allowance."""
        keys = [self.key(b, s) for s in window]
        unsynced = sum(self._pending(self._unsynced, k, now) for k in keys)
        values = [self._pending(self._known, k, now) + self._pending(self._unsynced, k, now) for k in keys]
        over = unsynced * 100 >= outage_pct * b.limit
        spent = self._spent(b, window, values, now, degraded=True, outage_exhausted=over)
        if over and spent.spent < b.limit:  # refused by the allowance: try again once Redis may answer
            return Spent(b, spent.spent, now + 1000, degraded=True, outage_exhausted=True)
        return spent

    @staticmethod
    def _pending(table: dict[str, tuple[int, int]], key: str, now: int) -> int:
        v = table.get(key)
        return v[0] if v is not None and v[1] > now else 0

    async def _local_value(self, b: Budget, span: Span) -> int:
        """The span's count without Redis: read from the ledger when first met, then this process's rows;
        read again every ``LOCAL_REFRESH_MS`` while the span may still get rows (the other processes'
        on one ledger file: ``--workers``), in the background, the current count serving meanwhile."""
        key, now = self.key(b, span), self.now_ms()
        c = self._local.get(key)
        if c is None:
            self._prune_local(now)
            c = self._local[key] = _Counted(span.expire_ms)
            self._read(b, span, c, now)
        elif (
            self.ledger is not None
            and c.reading is None
            and now - c.read_at >= LOCAL_REFRESH_MS
            and c.read_at <= span.end_ms
        ):
            self._read(b, span, c, now)
        if not c.ready and c.reading is not None:
            await asyncio.shield(c.reading)
        return c.value

    def _read(self, b: Budget, span: Span, c: _Counted, now: int) -> None:
        c.read_at, c.delta = now, 0
        c.reading = asyncio.ensure_future(self._reread(b, span, c))

    async def _reread(self, b: Budget, span: Span, c: _Counted) -> None:
        try:
            seed = await self._from_ledger(b, span)
        finally:
            c.reading = None
        # Rows counted since the read began may be in the ledger's sum too: counted twice, never missed.
        if seed is not None:
            c.value = seed + c.delta
        elif not c.ready:
            c.value = c.delta
        c.delta, c.ready = 0, True

    def _prune_local(self, now: int) -> None:
        if len(self._local) >= PRUNE_AT:
            for k in [k for k, c in self._local.items() if c.expire_ms <= now and c.reading is None]:
                del self._local[k]

    async def _from_ledger(self, b: Budget, span: Span) -> int | None:
        """What the ledger holds for the budget's tenant and models in the span (0 without a ledger;
        None when it could not answer: the count so far stands)."""
        if self.ledger is None:
            return 0
        try:
            rows = await self.ledger.query(
                tenant=b.tenant, since=span.start_ms / 1000, until=span.end_ms / 1000, group_by=("model",)
            )
        except Exception as exc:  # a ledger that cannot answer: count from zero, say so
            log.warning(
                "budget period not read from the ledger; counting this process's rows only",
                extra={"event": "budget_read_failed", "error": type(exc).__name__, "budget": b.name},
            )
            return None
        picked = [r for r in rows if r.model is not None and b.applies(r.model)]
        if b.unit == "spend":
            return sum(r.cost_micros for r in picked)
        return sum(r.tokens.total() for r in picked)

    # -- counting ----------------------------------------------------------------------------------
    async def add(self, budgets: Sequence[Budget], item: LineItem) -> list[Added]:
        """Count a ledger row against the budgets that apply to it; what each moved from and to."""
        picked = [(b, b.amount(item)) for b in budgets if b.applies(item.model)]
        picked = [(b, n) for b, n in picked if n > 0]
        if not picked:
            return []
        now = self.now_ms()
        windows = [spans(b, now) for b, _ in picked]
        if self.redis is None:
            out = []
            for (b, n), w in zip(picked, windows, strict=True):
                values = await asyncio.gather(*(self._local_value(b, s) for s in w))
                c = self._local[self.key(b, w[-1])]  # another row may have moved it meanwhile
                c.value += n
                if c.reading is not None:
                    c.delta += n
                before = sum(values[:-1]) + c.value - n
                out.append(Added(b, before, before + n))
            return out
        keys, args = [], [len(picked)]
        for (b, n), w in zip(picked, windows, strict=True):
            keys += [self.key(b, s) for s in w]
            args += [len(w), n, max(1, w[-1].expire_ms - now)]
        try:
            assert self._add is not None
            totals = await self._add(keys=keys, args=args)
        except REDIS_ERRORS as exc:
            self._failed("add", exc)
            return [self._count_locally(b, n, w, now) for (b, n), w in zip(picked, windows, strict=True)]
        out = []
        for (b, n), w, total in zip(picked, windows, totals, strict=True):
            total = int(total) + sum(self._pending(self._unsynced, self.key(b, s), now) for s in w)
            out.append(Added(b, total - n, total))
        return out

    def _count_locally(self, b: Budget, n: int, window: Sequence[Span], now: int) -> Added:
        """Redis did not take the row's amount: keep it (counted in this process's view), push it later."""
        keys = [self.key(b, s) for s in window]
        before = sum(self._pending(self._known, k, now) + self._pending(self._unsynced, k, now) for k in keys)
        cur, span = keys[-1], window[-1]
        self._prune(self._unsynced)
        self._unsynced[cur] = (self._pending(self._unsynced, cur, now) + n, span.expire_ms)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush())
        return Added(b, before, before + n)

    async def _flush(self, delay: float = 0.2) -> None:
        """Push the amounts Redis has not taken, until it takes them all."""
        while self._unsynced:
            await asyncio.sleep(delay)
            try:
                pushed = await self._push()
            except REDIS_ERRORS as exc:
                self._failed("flush", exc)
                delay = min(delay * 2, 5.0)
                continue
            if pushed:
                log.info(
                    "budget counts pushed to Redis again", extra={"event": "budget_synced", "keys": pushed}
                )

    async def _push(self) -> int:
        """One push of every amount Redis has not taken (a slot past its window is dropped: it counts for
        nothing any more); the keys pushed."""
        now = self.now_ms()
        for k in [k for k, (v, exp) in self._unsynced.items() if exp <= now or v <= 0]:
            del self._unsynced[k]
        batch = [(k, v, exp) for k, (v, exp) in self._unsynced.items()]
        if not batch or self._add is None:
            return 0
        args: list[int] = [len(batch)]
        for _, v, exp in batch:
            args += [1, v, exp - now]
        await self._add(keys=[k for k, _, _ in batch], args=args)
        for k, v, _ in batch:  # rows counted while the push ran stay for the next
            left, exp = self._unsynced.get(k, (0, 0))
            if left - v > 0:
                self._unsynced[k] = (left - v, exp)
            else:
                self._unsynced.pop(k, None)
        return len(batch)

    @property
    def unsynced(self) -> int:
        """Amounts (all budgets) counted here that Redis has not taken yet."""
        return sum(v for v, _ in self._unsynced.values())

    def _failed(self, op: str, exc: BaseException) -> None:
        if self.on_error is not None:
            self.on_error(op, exc)

    def _prune(self, table: dict[str, tuple[int, int]]) -> None:
        if len(table) < PRUNE_AT:
            return
        now = self.now_ms()
        for k in [k for k, (_, exp) in table.items() if exp <= now]:
            del table[k]

    async def close(self) -> None:
        """Stop the flush after one last push (what Redis still does not take is lost to the shared count)."""
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self._unsynced:
            try:
                await self._push()
            except REDIS_ERRORS as exc:
                self._failed("flush", exc)
            if self._unsynced:
                log.warning(
                    "budget counts not pushed to Redis at close",
                    extra={"event": "budget_unsynced", "amount": self.unsynced},
                )
        for c in self._local.values():
            if c.reading is not None:
                c.reading.cancel()


def report_rows(spent: Sequence[Spent], currency: str) -> list[dict[str, object]]:
    """Spend against budget, one dict a budget (the admin endpoint and ``prefix-gateway usage --budgets``)."""
    rows: list[dict[str, object]] = []
    for s in spent:
        b = s.budget
        row: dict[str, object] = {
            "tenant": b.tenant,
            "budget": b.name,
            "unit": "micros" if b.unit == "spend" else "tokens",
            "period": b.period if b.period != "rolling" else f"rolling {b.window_ms // 1000}s",
            "models": list(b.models) if b.models else None,
            "limit": b.limit,
            "spent": s.spent,
            "remaining": max(0, b.limit - s.spent),
            "used_pct": round(100 * s.used, 2),
            "exhausted": s.exhausted,
            # A rolling window resets nothing while it is not exhausted: it frees its oldest slots as it goes.
            "resets_at": None
            if b.period == "rolling" and not s.exhausted
            else datetime.fromtimestamp(s.resets_ms / 1000, tz=UTC).isoformat(),
            "degraded": s.degraded,
        }
        if b.unit == "spend":
            row["currency"] = currency
        rows.append(row)
    return rows
