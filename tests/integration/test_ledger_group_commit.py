"""Group commit of the SQLite ledger: many writers share a commit, each waiter is released only after
its own group's COMMIT, a failed group fails (or retries) every waiter, a lone row is committed within
the group's time bound, and close() flushes the open group.

Failures are real SQLite errors: a TEMP trigger on the writer's connection aborts the insert (every
row, or one), the way a constraint or a full disk aborts a transaction.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem, ModelPrices, RequestUsage, Rules, bill

PRICES = ModelPrices(3_000_000, 15_000_000)


def _item(i: int) -> LineItem:
    return bill(
        RequestUsage(1000, 10, 300, "replica"),
        PRICES,
        Rules(),
        None,
        "upstream",
        request_id=f"r{i}",
        tenant="t",
        model="m",
        ts_ms=1_790_000_000_000 + i,
    )


def _durable_ids(path: Path) -> set[str]:
    """What another connection (a reader after a crash) sees committed."""
    con = sqlite3.connect(path)
    try:
        return {r[0] for r in con.execute("SELECT request_id FROM line_items")}
    finally:
        con.close()


async def _until(cond, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_concurrent_writers_share_commits(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led = await SqliteLedger.open(str(path), group_commit_ms=5.0)
    n = 96
    assert all(await asyncio.gather(*(led.record(_item(i)) for i in range(n))))
    assert led.commits < n / 4, f"{led.commits} commits for {n} concurrent rows"
    await led.close()
    assert _durable_ids(path) == {f"r{i}" for i in range(n)}


async def test_waiter_released_only_after_its_group_commits(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    # A long window, so only the row bound closes the group.
    led = await SqliteLedger.open(str(path), group_commit_rows=8, group_commit_ms=60_000)
    first = [asyncio.ensure_future(led.record(_item(i))) for i in range(7)]
    await _until(lambda: led._jobs.qsize() == 0)  # the writer holds all 7 in its open group
    for _ in range(20):
        await asyncio.sleep(0.005)
    assert not any(f.done() for f in first), "a waiter was released before its group committed"
    assert _durable_ids(path) == set() and led.commits == 0
    last = led.record(_item(7))  # the 8th row closes the group
    assert all(await asyncio.wait_for(asyncio.gather(*first, last), 10))
    assert led.commits == 1
    assert _durable_ids(path) == {f"r{i}" for i in range(8)}
    await led.close()


async def test_lone_row_committed_within_the_time_bound(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    window_ms = 150.0
    led = await SqliteLedger.open(str(path), group_commit_ms=window_ms)
    t0 = time.monotonic()
    assert await asyncio.wait_for(led.record(_item(0)), window_ms / 1000 + 5.0)
    waited = time.monotonic() - t0
    # The group waits for company up to its window, then commits: not before (it waited), not forever.
    assert waited >= window_ms / 1000 * 0.9
    assert led.commits == 1 and _durable_ids(path) == {"r0"}
    await led.close()


async def test_failed_group_fails_every_waiter(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led = await SqliteLedger.open(str(path), group_commit_ms=20.0)
    await led.call(
        lambda c: c.execute(
            "CREATE TEMP TRIGGER refuse BEFORE INSERT ON line_items BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    )
    outcomes = await asyncio.gather(*(led.record(_item(i)) for i in range(16)), return_exceptions=True)
    assert all(isinstance(o, sqlite3.DatabaseError) for o in outcomes), outcomes
    assert led.commits == 0 and _durable_ids(path) == set()
    # The ledger recovers: the next group commits.
    await led.call(lambda c: c.execute("DROP TRIGGER temp.refuse"))
    assert all(await asyncio.gather(*(led.record(_item(i)) for i in range(16))))
    assert _durable_ids(path) == {f"r{i}" for i in range(16)}
    await led.close()


async def test_one_bad_row_fails_alone_and_its_group_is_retried(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led = await SqliteLedger.open(str(path), group_commit_ms=20.0)
    await led.call(
        lambda c: c.execute(
            "CREATE TEMP TRIGGER refuse BEFORE INSERT ON line_items WHEN NEW.request_id = 'r3' "
            "BEGIN SELECT RAISE(ABORT, 'refused'); END"
        )
    )
    outcomes = await asyncio.gather(*(led.record(_item(i)) for i in range(12)), return_exceptions=True)
    assert isinstance(outcomes[3], sqlite3.DatabaseError)
    assert [o for i, o in enumerate(outcomes) if i != 3] == [True] * 11
    # Every acknowledged row is committed; the refused one is not.
    assert _durable_ids(path) == {f"r{i}" for i in range(12) if i != 3}
    await led.close()


async def test_a_group_with_rows_already_recorded_says_which_and_commits_once(tmp_path: Path) -> None:
    """The group's one ``executemany`` counts fewer rows than it was given when some were recorded
    before (a retried write): each waiter still learns whether *its* row was new, every new row is
    committed, and the group is still one transaction."""
    path = tmp_path / "l.db"
    led = await SqliteLedger.open(str(path))
    assert [await led.record(_item(i)) for i in (1, 4)] == [True, True]
    await led.close()
    # A long window, so the 8 rows below are one group whatever the scheduling (the row bound closes it).
    led = await SqliteLedger.open(str(path), group_commit_rows=8, group_commit_ms=60_000)
    outcomes = await asyncio.wait_for(asyncio.gather(*(led.record(_item(i)) for i in range(8))), 10)
    assert outcomes == [i not in (1, 4) for i in range(8)]
    assert led.commits == 1
    assert _durable_ids(path) == {f"r{i}" for i in range(8)}
    await led.close()


async def test_close_flushes_the_open_group(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    led = await SqliteLedger.open(str(path), group_commit_rows=1000, group_commit_ms=60_000)
    waiters = [asyncio.ensure_future(led.record(_item(i))) for i in range(5)]
    await _until(lambda: led._jobs.qsize() == 0)
    assert not any(w.done() for w in waiters)
    await asyncio.wait_for(led.close(), 10)  # long before the window would close the group
    assert all(await asyncio.wait_for(asyncio.gather(*waiters), 10))
    assert _durable_ids(path) == {f"r{i}" for i in range(5)}


async def test_query_behind_an_open_group_sees_its_rows(tmp_path: Path) -> None:
    led = await SqliteLedger.open(str(tmp_path / "l.db"), group_commit_rows=1000, group_commit_ms=60_000)
    waiters = [asyncio.ensure_future(led.record(_item(i))) for i in range(4)]
    await _until(lambda: led._jobs.qsize() == 0)
    count = await asyncio.wait_for(
        led.call(lambda c: c.execute("SELECT COUNT(*) FROM line_items").fetchone()[0]), 10
    )
    assert count == 4  # the query closed the group (committed) before it ran
    assert all(await asyncio.gather(*waiters))
    await led.close()


@pytest.mark.parametrize("bad", [{"group_commit_rows": 0}, {"group_commit_ms": -1.0}])
def test_invalid_group_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        SqliteLedger(":memory:", **bad)
