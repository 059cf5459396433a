"""Embedded job store: one SQLite file (WAL) holding batches, their per-line results and their leases.

Every statement runs on one thread that owns the connection (the stdlib module blocks; SQLite has one
writer at a time anyway); the event loop awaits it. Each line's result is its own committed row, so a
killed process loses at most the lines in flight, which the next holder re-runs: the primary key
(batch, custom_id) turns a second answer for a line into a no-op. WAL with ``synchronous=NORMAL``
survives a killed process (the same choice as the billing ledger, docs/billing.md). Gateway worker
processes of one host share the file; ``BEGIN IMMEDIATE`` serialises their moves and the lease columns
let one of them run each batch.
"""

from __future__ import annotations

import asyncio
import builtins
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import orjson

from gateway.batch.objects import ACTIVE, TERMINAL, BatchRecord, LineResult, can_move

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    tenant TEXT NOT NULL,
    status TEXT NOT NULL,
    obj BLOB NOT NULL,
    owner TEXT,
    lease_until_ms INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS batches_tenant ON batches (tenant, seq);
CREATE INDEX IF NOT EXISTS batches_status ON batches (status);
CREATE TABLE IF NOT EXISTS results (
    batch_id TEXT NOT NULL,
    custom_id TEXT NOT NULL,
    line INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (batch_id, custom_id)
);
CREATE INDEX IF NOT EXISTS results_line ON results (batch_id, line);
CREATE INDEX IF NOT EXISTS results_ok ON results (batch_id, ok);
"""
_ACTIVE_SQL = "(" + ", ".join(f"'{s}'" for s in sorted(ACTIVE)) + ")"
_PAGE = 500


class SqliteJobStore:
    """Use ``await SqliteJobStore.open(path)``; ``await close()`` when done."""

    def __init__(self, path: str, clock: Callable[[], float] = time.time):
        self.path = path
        self.clock = clock
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="batch-sqlite")
        self._conn: sqlite3.Connection | None = None

    @classmethod
    async def open(cls, path: str, clock: Callable[[], float] = time.time) -> SqliteJobStore:
        store = cls(path, clock)
        await store._run(store._connect)
        return store

    def _connect(self) -> None:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA busy_timeout=10000")
        conn.executescript(_SCHEMA)
        self._conn = conn

    async def _run(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn)

    async def _q(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return await self._run(lambda: self._db.execute(sql, args).fetchall())

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("batch store is closed")
        return self._conn

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    # -- batches ----------------------------------------------------------------------------------------

    async def create(self, rec: BatchRecord) -> None:
        await self._q(
            "INSERT INTO batches (id, tenant, status, obj) VALUES (?, ?, ?, ?)",
            (rec.id, rec.tenant, rec.status, orjson.dumps(rec.to_dict())),
        )

    async def get(self, batch_id: str) -> BatchRecord | None:
        rows = await self._q("SELECT obj FROM batches WHERE id = ?", (batch_id,))
        return BatchRecord.from_dict(orjson.loads(rows[0][0])) if rows else None

    async def list(self, tenant: str, *, after: str | None, limit: int) -> tuple[list[BatchRecord], bool]:
        sql, args = "SELECT obj FROM batches WHERE tenant = ?", [tenant]
        if after is not None:
            sql += " AND seq < (SELECT seq FROM batches WHERE id = ? AND tenant = ?)"
            args += [after, tenant]
        rows = await self._q(sql + " ORDER BY seq DESC LIMIT ?", [*args, limit + 1])
        recs = [BatchRecord.from_dict(orjson.loads(r[0])) for r in rows]
        return recs[:limit], len(recs) > limit

    async def active(self, tenant: str) -> builtins.list[BatchRecord]:
        rows = await self._q(
            f"SELECT obj FROM batches WHERE tenant = ? AND status IN {_ACTIVE_SQL} ORDER BY seq", (tenant,)
        )
        return [BatchRecord.from_dict(orjson.loads(r[0])) for r in rows]

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn`` inside ``BEGIN IMMEDIATE`` … ``COMMIT`` (rolled back if it raises); on the store's thread."""
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            out = fn(db)
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")
        return out

    async def move(self, batch_id: str, to: str, now: int, **changes: Any) -> BatchRecord | None:
        def run(db: sqlite3.Connection) -> BatchRecord | None:
            row = db.execute("SELECT obj FROM batches WHERE id = ?", (batch_id,)).fetchone()
            rec = BatchRecord.from_dict(orjson.loads(row[0])) if row else None
            if rec is None or not can_move(rec.status, to):
                return None
            new = rec.moved(to, now, **changes)
            lease = ", owner = NULL, lease_until_ms = 0" if to in TERMINAL else ""
            db.execute(
                f"UPDATE batches SET status = ?, obj = ?{lease} WHERE id = ?",
                (to, orjson.dumps(new.to_dict()), batch_id),
            )
            return new

        return await self._run(lambda: self._transaction(run))

    # -- results ----------------------------------------------------------------------------------------

    async def record(self, batch_id: str, results: Sequence[LineResult]) -> int:
        def run(db: sqlite3.Connection) -> int:
            return sum(
                db.execute(
                    "INSERT OR IGNORE INTO results (batch_id, custom_id, line, ok, record) VALUES (?, ?, ?, ?, ?)",
                    (batch_id, r.custom_id, r.line, int(r.ok), r.record),
                ).rowcount
                for r in results
            )

        return await self._run(lambda: self._transaction(run))

    async def counts(self, batch_id: str) -> tuple[int, int]:
        rows = await self._q("SELECT ok, COUNT(*) FROM results WHERE batch_id = ? GROUP BY ok", (batch_id,))
        by = dict(rows)
        return by.get(1, 0), by.get(0, 0)

    async def recorded(self, batch_id: str) -> set[str]:
        return {r[0] for r in await self._q("SELECT custom_id FROM results WHERE batch_id = ?", (batch_id,))}

    async def results(self, batch_id: str) -> AsyncIterator[LineResult]:
        last = -1
        while True:
            rows = await self._q(
                "SELECT custom_id, line, ok, record FROM results WHERE batch_id = ? AND line > ? ORDER BY line LIMIT ?",
                (batch_id, last, _PAGE),
            )
            for cid, line, ok, record in rows:
                yield LineResult(cid, line, bool(ok), bytes(record))
            if len(rows) < _PAGE:
                return
            last = rows[-1][1]

    async def drop_results(self, batch_id: str) -> None:
        await self._q("DELETE FROM results WHERE batch_id = ?", (batch_id,))

    # -- leases -----------------------------------------------------------------------------------------

    async def claim(self, batch_id: str, owner: str, ttl_s: float) -> bool:
        now = self._now_ms()

        def run() -> bool:
            cur = self._db.execute(
                f"UPDATE batches SET owner = ?, lease_until_ms = ? WHERE id = ? AND status IN {_ACTIVE_SQL} "
                "AND (owner IS NULL OR owner = ? OR lease_until_ms < ?)",
                (owner, now + int(ttl_s * 1000), batch_id, owner, now),
            )
            return cur.rowcount == 1

        return await self._run(run)

    async def release(self, batch_id: str, owner: str) -> None:
        await self._q(
            "UPDATE batches SET owner = NULL, lease_until_ms = 0 WHERE id = ? AND owner = ?",
            (batch_id, owner),
        )

    async def runnable(self) -> builtins.list[str]:
        rows = await self._q(
            f"SELECT id FROM batches WHERE status IN {_ACTIVE_SQL} AND (owner IS NULL OR lease_until_ms < ?) "
            "ORDER BY seq",
            (self._now_ms(),),
        )
        return [r[0] for r in rows]

    async def count_by_status(self) -> dict[str, int]:
        return dict(await self._q("SELECT status, COUNT(*) FROM batches GROUP BY status"))

    async def running_models(self) -> set[str]:
        rows = await self._q(
            "SELECT obj FROM batches WHERE status = 'in_progress' AND owner IS NOT NULL AND lease_until_ms >= ?",
            (self._now_ms(),),
        )
        return {m for (obj,) in rows if (m := BatchRecord.from_dict(orjson.loads(obj)).model)}

    async def close(self) -> None:
        if self._conn is None:
            return

        def run() -> None:
            assert self._conn is not None
            self._conn.close()
            self._conn = None

        await self._run(run)
        self._pool.shutdown(wait=True)
