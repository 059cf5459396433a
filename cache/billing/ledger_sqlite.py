"""Embedded billing ledger: SQLite in WAL mode, one writer thread with group commit.

Why one thread: the stdlib ``sqlite3`` module blocks, and SQLite allows one writer at a time anyway. All
statements run on a dedicated thread that owns the connection; the event loop only enqueues work and
awaits a future.

Group commit: the rows of many requests share one transaction and so one commit (one fsync under
``full``). A group opens with the first row the writer takes; it takes every row already queued and
then waits up to ``group_commit_ms`` (measured from the first row) for more, and closes at
``group_commit_rows`` rows or at that deadline, whichever first (or early, when a query or ``close``
is queued behind it). Each ``record`` resolves only after *its* group's COMMIT returned, so the
answer's end still waits for a durable row; a group whose transaction fails is retried row by row,
each in its own transaction, and a row that fails again fails its waiter: no waiter is told a row is
written that was not committed. ``group_commit_ms=0`` (the policy's default) is the opportunistic
form: commit what is queued, wait for nothing; the rows that arrive during one commit form the next group, so groups grow
with the load by themselves. ``python -m bench.ledger_commit`` (docs/benchmarks.md) measured a window
on top: more rows per commit when rows arrive spread out, but less throughput and more wait per row in
every case it ran (concurrency 1 and 32, ``full`` and ``normal``), hence off by default.

The row path (``python -m bench.ledger_commit --row-cost``: the writer thread's CPU a row, 32 writers,
queued groups of 32): 13.1-13.7 us a row before this round's trims, 11.2-11.9 after, most of it
SQLite's own insert (about 9 us: the table and its three B-tree indexes, with the GIL released). What
was Python (``--row-parts``): the row's values, 2.1-2.2 us -> 0.6-0.7 (the kinds by one ``attrgetter``,
the day string made once a day), and one ``execute`` (a cursor) a row, now one ``executemany`` a group
(3-7 % of the insert); a group whose count shows a row already recorded is rolled back and run row by
row, so each waiter still learns whether its row was new.

The hand-off stays one ``SimpleQueue.put`` a row (issue 30, round 7, docs/benchmarks.md). In the gateway
a row pays for its commit (25-47 us CPU alone, ~10 at 32 rows a group: ``bench.ledger_commit
--insert-forms``) at 1.4-2.5 rows a commit; its "25.8 %" of GIL samples was a loop preempted while it
woke this thread (6.8 % on a quiet machine, the writer 8.6 % of the CPU). Measured and not adopted: one
put a loop iteration (groups stayed ~2.3 rows; writer CPU 0.038-0.043 ms a request against
0.038-0.039), waking by an ``eventfd`` with the GIL released (the put's share 14.6 % -> 1.3 %, but the
writer 0.061-0.071 ms against 0.044-0.045 and no more req/s), a multi-row INSERT (no gain below 32 rows
a group) and a 1 ms window (the loop's CPU up 13-24 %, req/s down).

Durability (``synchronous``):
- ``full`` (this class's default; the policy's is ``normal``): in WAL mode SQLite fsyncs the WAL at every commit. Once ``record`` has returned,
  the row survives a process kill *and* a power loss / kernel panic.
- ``normal``: the WAL is fsynced only at checkpoints. A committed row survives a process kill (it is
  in the OS page cache, which outlives the process) but the last transactions may be lost on power
  loss. Cheaper; fine when the host is not the last line of defence.
Either way a crash loses at most the requests whose ``record`` had not returned yet (in flight), never
a completed one, because ``record`` resolves only after COMMIT returned.

Idempotency: PRIMARY KEY (tenant, request_id) with INSERT OR IGNORE, where ``request_id`` is the
gateway's own id of the generation (a retried write of one row never counts twice; a client reusing its
``x-request-id`` cannot merge generations: that id is only the ``client_request_id`` column). A ledger
file written before that column existed gains it when opened (``ALTER TABLE ... ADD COLUMN``; its
rows read as NULL), and the ``usage_estimated`` column the same way (its rows read as 0: the replica's
usage, as every row was before the gateway billed the requests a client left), and ``replica_id``
(NULL: a reconciliation counts such rows apart, as unattributed).
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from operator import attrgetter
from pathlib import Path
from typing import Any

from cache.billing.ledger import (
    DAY_MS,
    FLEET_SOURCES,
    GROUP_KEYS,
    GroupKey,
    Query,
    ReplicaTotals,
    Sums,
    TimeArg,
    UsageRow,
    day_of,
    rows_from_sums,
    sorted_totals,
)
from cache.billing.pricing import KINDS, LineItem
from config.billing import GROUP_COMMIT_MS, GROUP_COMMIT_ROWS

_KIND_COLS = [f"t_{k}" for k in KINDS] + [f"m_{k}" for k in KINDS]

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS line_items (
    tenant TEXT NOT NULL,
    request_id TEXT NOT NULL,
    model TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    day TEXT NOT NULL,
    source TEXT NOT NULL,
    cached_source TEXT NOT NULL,
    currency TEXT NOT NULL,
    price_version TEXT NOT NULL,
    reported_cached_tokens INTEGER NOT NULL,
    {", ".join(f"{c} INTEGER NOT NULL" for c in _KIND_COLS)},
    total_micros INTEGER NOT NULL,
    cost_without_cache_micros INTEGER NOT NULL,
    client_request_id TEXT,
    usage_estimated INTEGER NOT NULL DEFAULT 0,
    replica_id TEXT,
    PRIMARY KEY (tenant, request_id)
);
CREATE INDEX IF NOT EXISTS line_items_ts ON line_items (ts_ms);
CREATE INDEX IF NOT EXISTS line_items_tenant_ts ON line_items (tenant, ts_ms);
"""

_COLS = [
    "tenant",
    "request_id",
    "model",
    "ts_ms",
    "day",
    "source",
    "cached_source",
    "currency",
    "price_version",
    "reported_cached_tokens",
    *_KIND_COLS,
    "total_micros",
    "cost_without_cache_micros",
    "client_request_id",
    "usage_estimated",
    "replica_id",
]
# Columns added after the first schema: (name, declaration), added to older files when opened.
_ADDED_COLUMNS = (
    ("client_request_id", "TEXT"),
    ("usage_estimated", "INTEGER NOT NULL DEFAULT 0"),
    ("replica_id", "TEXT"),
)
_INSERT = f"INSERT OR IGNORE INTO line_items ({', '.join(_COLS)}) VALUES ({', '.join('?' * len(_COLS))})"


def _settle(items: list[tuple[asyncio.Future[Any], Any, Any]]) -> None:
    """On the loop: set each future's result or exception (unless its waiter gave up)."""
    for fut, result, exc in items:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)


_KIND_VALUES = attrgetter(*KINDS)
# UTC day number -> "YYYY-MM-DD". Shared by the writer threads of a process's ledgers: a dict's get and
# set are atomic under the GIL, and an entry lost to a concurrent clear is only made again.
_days: dict[int, str] = {}


def _day(ts_ms: int) -> str:
    """``day_of(ts_ms)``, made once a day: ``datetime``, ``date`` and ``isoformat`` were about 0.8 us a
    row, a third of the row's values (``python -m bench.ledger_commit --row-parts``)."""
    n = ts_ms // DAY_MS
    day = _days.get(n)
    if day is None:
        if len(_days) > 64:
            _days.clear()
        day = _days[n] = day_of(ts_ms)
    return day


def _row_values(it: LineItem) -> tuple[Any, ...]:
    """The row's values in ``_COLS`` order; the kinds by one ``attrgetter`` each (14 ``getattr`` calls in
    two generators before)."""
    return (
        it.tenant,
        it.request_id,
        it.model,
        it.ts_ms,
        _day(it.ts_ms),
        it.source,
        it.cached_source,
        it.currency,
        it.price_version,
        it.reported_cached_tokens,
        *_KIND_VALUES(it.tokens),
        *_KIND_VALUES(it.micros),
        it.total_micros,
        it.cost_without_cache_micros,
        it.client_request_id,
        int(it.usage_estimated),
        it.replica_id,
    )


_STOP = object()


def _columns(conn: sqlite3.Connection) -> set[str]:
    return {row[1] for row in conn.execute("PRAGMA table_info(line_items)")}


class SqliteLedger:
    """Use ``await SqliteLedger.open(path)``; ``await close()`` when done."""

    def __init__(
        self,
        path: str,
        synchronous: str = "full",
        group_commit_rows: int = GROUP_COMMIT_ROWS,
        create: bool = True,
        group_commit_ms: float = GROUP_COMMIT_MS,
    ):
        if synchronous not in ("full", "normal"):
            raise ValueError("synchronous must be 'full' or 'normal'")
        if group_commit_rows < 1 or group_commit_ms < 0:
            raise ValueError("group_commit_rows must be >= 1 and group_commit_ms >= 0")
        self.path = path
        self.create = create  # False: a missing file is an error (a report must not invent a ledger)
        self.synchronous = synchronous
        self.group_commit_rows = group_commit_rows
        self.group_commit_ms = group_commit_ms
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="billing-ledger-sqlite", daemon=True)
        self._closed = False
        self.commits = 0  # transactions committed (groups), for tests and metrics

    @classmethod
    async def open(
        cls,
        path: str,
        synchronous: str = "full",
        group_commit_rows: int = GROUP_COMMIT_ROWS,
        *,
        create: bool = True,
        group_commit_ms: float = GROUP_COMMIT_MS,
    ) -> SqliteLedger:
        ledger = cls(path, synchronous, group_commit_rows, create, group_commit_ms)
        ledger._thread.start()
        await asyncio.to_thread(ledger._ready.wait, 30.0)
        if ledger._open_error is not None:
            raise ledger._open_error
        if not ledger._ready.is_set():
            raise TimeoutError(f"SQLite ledger at {path} did not open within 30 s")
        return ledger

    # ----------------------------------------------------------------------------- writer thread

    def _connect(self) -> sqlite3.Connection:
        if self.path != ":memory:":
            if not self.create and not Path(self.path).is_file():
                raise FileNotFoundError(f"no SQLite ledger at {self.path}")
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous.upper()}")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.executescript(_SCHEMA)
        for name, decl in _ADDED_COLUMNS:
            if name not in _columns(conn):
                try:
                    conn.execute(f"ALTER TABLE line_items ADD COLUMN {name} {decl}")
                except sqlite3.OperationalError:
                    if name not in _columns(conn):  # not another worker adding it at the same time
                        raise
        return conn

    def _run(self) -> None:
        try:
            conn = self._connect()
        except BaseException as exc:
            self._open_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            pending: Any = None
            while True:
                job = pending if pending is not None else self._jobs.get()
                pending = None
                if job is _STOP:
                    return
                if job[0] == "call":
                    self._do_call(conn, job)
                    continue
                batch, pending = self._group(job)
                self._do_records(conn, batch)
        finally:
            conn.close()

    def _group(self, first: tuple[Any, ...]) -> tuple[list[tuple[Any, ...]], Any]:
        """The group ``first`` opens: rows until ``group_commit_rows`` or ``group_commit_ms`` after
        ``first``, whichever first; a query or stop job closes it early and is returned to run next."""
        batch = [first]
        deadline = time.monotonic() + self.group_commit_ms / 1000.0
        while len(batch) < self.group_commit_rows:
            try:
                nxt = self._jobs.get_nowait()
            except queue.Empty:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                try:
                    nxt = self._jobs.get(timeout=left)
                except queue.Empty:
                    break
            if nxt is _STOP or nxt[0] != "record":
                return batch, nxt
            batch.append(nxt)
        return batch, None

    @staticmethod
    def _resolve(outcomes: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Any, Any]]) -> None:
        """Hand results back to their loops: one wake-up per loop and batch, not one per row (each
        ``call_soon_threadsafe`` writes the loop's self-pipe and takes the GIL from the loop; at a few
        thousand rows a second that was a tenth of the gateway's CPU in a py-spy profile)."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, Any]]] = {}
        for loop, fut, result, exc in outcomes:
            by_loop.setdefault(loop, []).append((fut, result, exc))
        for loop, items in by_loop.items():
            with contextlib.suppress(RuntimeError):  # loop closed: nobody is waiting any more
                loop.call_soon_threadsafe(_settle, items)

    def _do_call(self, conn: sqlite3.Connection, job: tuple[Any, ...]) -> None:
        _, fn, loop, fut = job
        try:
            self._resolve([(loop, fut, fn(conn), None)])
        except Exception as exc:
            self._resolve([(loop, fut, None, exc)])

    def _insert_many(self, conn: sqlite3.Connection, items: Sequence[LineItem]) -> list[bool]:
        """Insert ``items`` in one transaction; whether each was new. One ``executemany`` for the group
        (a cursor and a Python call a row fewer than an ``execute`` each); when its count says a row
        was already there (a retried write), the group is rolled back and run row by row to learn
        which: rare, and still one transaction."""
        rows = [_row_values(it) for it in items]
        conn.execute("BEGIN IMMEDIATE")
        try:
            if conn.executemany(_INSERT, rows).rowcount == len(rows):
                inserted = [True] * len(rows)
            else:
                conn.execute("ROLLBACK")
                conn.execute("BEGIN IMMEDIATE")
                inserted = [conn.execute(_INSERT, row).rowcount == 1 for row in rows]
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # a failed COMMIT may have rolled back already
                conn.execute("ROLLBACK")
            raise
        self.commits += 1
        return inserted

    def _do_records(self, conn: sqlite3.Connection, batch: list[tuple[Any, ...]]) -> None:
        try:
            results = self._insert_many(conn, [j[1] for j in batch])
        except Exception as exc:
            if len(batch) == 1:
                _, _, loop, fut = batch[0]
                self._resolve([(loop, fut, None, exc)])
                return
            # One bad item must not fail its neighbours: retry each in its own transaction.
            outcomes: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[Any], Any, Any]] = []
            for _, item, loop, fut in batch:
                try:
                    outcomes.append((loop, fut, self._insert_many(conn, [item])[0], None))
                except Exception as exc1:
                    outcomes.append((loop, fut, None, exc1))
            self._resolve(outcomes)
            return
        self._resolve([(loop, fut, ok, None) for (_, _, loop, fut), ok in zip(batch, results, strict=True)])

    # ------------------------------------------------------------------------------- async API

    def _submit(self, job_kind: str, payload: Any) -> asyncio.Future[Any]:
        if self._closed:
            raise RuntimeError("ledger is closed")
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((job_kind, payload, loop, fut))
        return fut

    async def record(self, item: LineItem) -> bool:
        """Insert the line item; False if (tenant, request_id) was already recorded."""
        return await self._submit("record", item)

    async def call(self, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        """Run ``fn(connection)`` on the ledger thread (reports, maintenance)."""
        return await self._submit("call", fn)

    async def query(
        self,
        tenant: str | None = None,
        model: str | None = None,
        since: TimeArg = None,
        until: TimeArg = None,
        group_by: Sequence[str] = ("tenant", "model"),
    ) -> list[UsageRow]:
        q = Query.of(tenant, model, since, until, group_by)
        where, args = [], []
        for column, op, value in (
            ("tenant", "=", q.tenant),
            ("model", "=", q.model),
            ("ts_ms", ">=", q.since_ms),
            ("ts_ms", "<", q.until_ms),
        ):
            if value is not None:
                where.append(f"{column} {op} ?")
                args.append(value)
        cols = [g for g in GROUP_KEYS if g in q.group_by]
        sums = ", ".join(
            [
                "COUNT(*)",
                *(f"SUM({c})" for c in _KIND_COLS),
                "SUM(total_micros)",
                "SUM(cost_without_cache_micros)",
                "SUM(usage_estimated)",
            ]
        )
        sql = f"SELECT {', '.join([*cols, sums])} FROM line_items"
        if where:
            sql += " WHERE " + " AND ".join(where)
        if cols:
            sql += " GROUP BY " + ", ".join(cols)

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        acc: dict[GroupKey, Sums] = {}
        n = len(KINDS)
        for r in await self.call(run):
            keyvals = dict(zip(cols, r[: len(cols)], strict=True))
            vals = r[len(cols) :]
            if vals[0] == 0:  # an ungrouped query over no rows yields one row of NULLs
                continue
            key: GroupKey = (
                keyvals.get("tenant"),
                keyvals.get("model"),
                keyvals.get("day"),
                keyvals.get("source"),
            )
            s = Sums(requests=int(vals[0]))
            s.tokens = {k: int(vals[1 + i] or 0) for i, k in enumerate(KINDS)}
            s.micros = {k: int(vals[1 + n + i] or 0) for i, k in enumerate(KINDS)}
            s.cost_micros = int(vals[1 + 2 * n] or 0)
            s.cost_without_cache_micros = int(vals[2 + 2 * n] or 0)
            s.estimated = int(vals[3 + 2 * n] or 0)
            acc[key] = s
        return rows_from_sums(acc)

    async def replica_totals(self, since_ms: int | None, until_ms: int | None) -> list[ReplicaTotals]:
        """Fleet rows written in ``[since_ms, until_ms)`` (epoch ms) by (model, replica), read through the time index."""
        where = [f"source IN ({', '.join('?' * len(FLEET_SOURCES))})"]
        args: list[object] = list(FLEET_SOURCES)
        for op, value in ((">=", since_ms), ("<", until_ms)):
            if value is not None:
                where.append(f"ts_ms {op} ?")
                args.append(value)
        sql = (
            "SELECT model, replica_id, request_id, usage_estimated,"
            " t_uncached + t_implicit_hit + t_explicit_create + t_explicit_hit, t_output"
            f" FROM line_items WHERE {' AND '.join(where)} ORDER BY ts_ms"
        )

        def run(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return conn.execute(sql, args).fetchall()

        acc: dict[tuple[str, str | None], ReplicaTotals] = {}
        for model, replica, rid, estimated, prompt, output in await self.call(run):
            totals = acc.get((model, replica))
            if totals is None:
                totals = acc[(model, replica)] = ReplicaTotals(model, replica)
            totals.add(rid, int(prompt), int(output), bool(estimated))
        return sorted_totals(acc)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._jobs.put(_STOP)
        await asyncio.to_thread(self._thread.join, 30.0)
