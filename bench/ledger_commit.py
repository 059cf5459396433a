"""What a durable billing row costs: the real SQLite ledger writer, per-row commit against group commit.

    python -m bench.ledger_commit [--rows-c1 400] [--rows-c32 4000] [--think-ms 5] [--write]
    python -m bench.ledger_commit --row-cost [--rows 20000] [--rounds 3] [--checkout DIR]
    python -m bench.ledger_commit --row-parts [--rows 20000] [--rounds 3] [--checkout DIR]
    python -m bench.ledger_commit --insert-forms [--rows 4000] [--rounds 3]

Each variant opens a fresh ledger file (a temporary directory on this machine's disk) and has
``concurrency`` writers call ``SqliteLedger.record`` -- the call the gateway's ``completed`` hook
awaits before an answer ends -- until the rows are written. At concurrency 32 it runs twice: back to
back (a writer submits its next row as soon as the last is committed, so every writer is in every
group) and with a think time between a writer's rows (exponential, mean ``--think-ms``: the upstream
time of the next request), where rows arrive spread out and a window can gather rows that would
otherwise each open a group. Per row it times the wait (enqueue to
resolved future, i.e. to after its group's COMMIT); per variant it reports rows/s, commits, rows per
commit and the p50/p99 wait. Variants, for ``synchronous`` full and normal at concurrency 1 and 32:

- ``per row``: ``group_commit_rows=1``: one transaction (one fsync under ``full``) per row;
- ``queued``: ``group_commit_ms=0``: the rows already queued when the writer is free share a commit;
- ``window N ms``: the group also waits up to N ms from its first row for more (or until
  ``group_commit_rows``).

``--row-cost`` measures the writer's own work instead: the CPU of the ledger thread per row
(``/proc/self/task/TID/schedstat``: the scheduler's nanoseconds for that one thread, so neither the
event loop's work nor a wait for a core is in it), with 32 writers back to back under the policy's
defaults (``normal``, queued groups), for this tree's ``SqliteLedger`` and, with ``--checkout DIR``,
the ``SqliteLedger`` of another checkout (its ``cache/billing/ledger_sqlite.py`` loaded beside this
one) in alternating rounds of one run: the least of the rounds each. ``--row-parts`` times the
parts of that work on this thread (``time.thread_time``): building the rows' values (this tree's
``_row_values`` and, with ``--checkout``, the other's), and inserting them in groups of 32 into a
fresh file, one ``execute`` a row against one ``executemany`` a group, each with its BEGIN/COMMIT.

``--insert-forms`` times, on this thread (``time.thread_time``, and the wall clock), one group's
transaction by group size (1, 4, 16, 32 rows) in three forms: BEGIN, one ``executemany``, COMMIT (the
ledger's); BEGIN, one multi-row ``INSERT ... VALUES (...), (...)``, COMMIT (one ``sqlite3_step``, so
one release of the GIL, for the group); and that statement alone in autocommit: what a group costs
a row at the sizes the gateway forms (issue 30, round 7).

All variants run side by side in one run, so their ratios are comparable on a shared, noisy machine;
absolute numbers are this machine's at that moment. Nothing here asserts a threshold.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import platform
import random
import sqlite3
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.report import percentile, table, write_section
from cache.billing import ledger_sqlite
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem, ModelPrices, RequestUsage, Rules, bill
from config.billing import GROUP_COMMIT_MS, GROUP_COMMIT_ROWS

PRICES = ModelPrices(3_000_000, 15_000_000)
# (label, group_commit_rows, group_commit_ms)
VARIANTS = (
    ("per row", 1, 0.0),
    ("queued (0 ms)", GROUP_COMMIT_ROWS, 0.0),
    ("window 1 ms", GROUP_COMMIT_ROWS, 1.0),
    ("window 5 ms", GROUP_COMMIT_ROWS, 5.0),
)


def _item(i: int) -> LineItem:
    return bill(
        RequestUsage(3000, 200, 1024, "replica"),
        PRICES,
        Rules(),
        None,
        "upstream",
        request_id=f"req-{i}",
        tenant=f"tenant-{i % 7}",
        model="llama",
        ts_ms=1_793_000_000_000 + i * 10,
    )


@dataclass(frozen=True, slots=True)
class Result:
    sync: str
    concurrency: int
    think_ms: float
    label: str
    rows: int
    seconds: float
    commits: int
    waits_ms: list[float]

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds


async def run_one(
    d: Path,
    sync: str,
    concurrency: int,
    think_ms: float,
    rows: int,
    label: str,
    group_rows: int,
    group_ms: float,
) -> Result:
    path = d / f"{sync}-{concurrency}-{think_ms}-{group_rows}-{group_ms}.db"
    led = await SqliteLedger.open(
        str(path), synchronous=sync, group_commit_rows=group_rows, group_commit_ms=group_ms
    )
    items = [_item(i) for i in range(rows)]
    waits: list[float] = []
    counter = iter(range(rows))
    rng = random.Random(concurrency)

    async def writer() -> None:
        for i in counter:
            if think_ms:
                await asyncio.sleep(rng.expovariate(1000.0 / think_ms))
            t0 = time.perf_counter()
            await led.record(items[i])
            waits.append((time.perf_counter() - t0) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(concurrency)))
    seconds = time.perf_counter() - t0
    commits = led.commits
    await led.close()
    return Result(sync, concurrency, think_ms, label, rows, seconds, commits, waits)


async def main(rows_c1: int, rows_c32: int, think_ms: float) -> list[Result]:
    out = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        for concurrency, think, rows in ((1, 0.0, rows_c1), (32, 0.0, rows_c32), (32, think_ms, rows_c32)):
            for sync in ("full", "normal"):
                for label, group_rows, group_ms in VARIANTS:
                    r = await run_one(Path(d), sync, concurrency, think, rows, label, group_rows, group_ms)
                    out.append(r)
                    print(
                        f"c={concurrency:2d} think {think:g} {sync:6s} {label:14s} {r.rows_per_s:8.0f} rows/s "
                        f"{r.rows / r.commits:6.1f} rows/commit p50 {percentile(r.waits_ms, 50):6.2f} ms "
                        f"p99 {percentile(r.waits_ms, 99):6.2f} ms",
                        flush=True,
                    )
    return out


def thread_cpu_s(native_id: int) -> float:
    """CPU seconds of one thread of this process (the scheduler's ns; psutil's ticks are 10 ms)."""
    with open(f"/proc/self/task/{native_id}/schedstat") as f:
        return int(f.read().split()[0]) / 1e9


def ledger_class(checkout: str | None) -> type[SqliteLedger]:
    if checkout is None:
        return SqliteLedger
    path = Path(checkout, "cache", "billing", "ledger_sqlite.py")
    spec = importlib.util.spec_from_file_location("baseline_ledger_sqlite", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SqliteLedger


async def row_cost(cls: type[SqliteLedger], d: Path, tag: str, rows: int) -> tuple[float, float, float]:
    """(writer CPU us a row, rows a commit, rows/s) of ``rows`` rows from 32 writers back to back."""
    led = await cls.open(str(d / f"{tag}.db"), synchronous="normal")
    items = [_item(i) for i in range(rows)]
    counter = iter(range(rows))

    async def writer() -> None:
        for i in counter:
            await led.record(items[i])

    await led.record(_item(rows + 1))  # the statement prepared, the file created
    tid, commits0 = led._thread.native_id, led.commits
    assert tid is not None
    c0, t0 = thread_cpu_s(tid), time.perf_counter()
    await asyncio.gather(*(writer() for _ in range(32)))
    cpu, wall = thread_cpu_s(tid) - c0, time.perf_counter() - t0
    commits = led.commits - commits0
    await led.close()
    return cpu / rows * 1e6, rows / max(1, commits), rows / wall


async def row_cost_main(rows: int, rounds: int, checkout: str | None) -> str:
    targets = [("this tree", SqliteLedger)]
    if checkout:
        targets.append((f"checkout {checkout}", ledger_class(checkout)))
    best: dict[str, tuple[float, float, float]] = {}
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        for k in range(rounds):
            for name, cls in targets:
                r = await row_cost(cls, Path(d), f"{k}-{len(best)}-{name[:4]}", rows)
                print(
                    f"{name}: writer {r[0]:.1f} us/row, {r[1]:.1f} rows/commit, {r[2]:,.0f} rows/s",
                    flush=True,
                )
                b = best.get(name, (float("inf"), 0.0, 0.0))
                best[name] = (min(b[0], r[0]), r[1], max(b[2], r[2]))
    head = ["ledger", "writer CPU us / row (least)", "rows / commit", "rows/s (best)"]
    return table(head, [[n, f"{c:.1f}", f"{g:.1f}", f"{s:,.0f}"] for n, (c, g, s) in best.items()])


def row_parts_main(rows: int, rounds: int, checkout: str | None) -> str:
    modules = [("this tree", ledger_sqlite)]
    if checkout:
        path = Path(checkout, "cache", "billing", "ledger_sqlite.py")
        spec = importlib.util.spec_from_file_location("baseline_ledger_sqlite_parts", path)
        assert spec is not None and spec.loader is not None
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
        modules.append((f"checkout {checkout}", other))
    items = [_item(i) for i in range(rows)]
    values = [ledger_sqlite._row_values(it) for it in items]
    for _, m in modules[1:]:
        assert [m._row_values(it) for it in items] == values, "the two trees build different rows"
    out: dict[str, list[float]] = {}

    def insert(d: str, tag: str, many: bool) -> float:
        conn = sqlite3.connect(os.path.join(d, f"{tag}.db"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(ledger_sqlite._SCHEMA)
        t0 = time.thread_time()
        for g in range(0, rows, 32):
            conn.execute("BEGIN IMMEDIATE")
            if many:
                conn.executemany(ledger_sqlite._INSERT, values[g : g + 32])
            else:
                for v in values[g : g + 32]:
                    conn.execute(ledger_sqlite._INSERT, v)
            conn.execute("COMMIT")
        spent = time.thread_time() - t0
        conn.close()
        return spent / rows * 1e6

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        for k in range(rounds):
            for name, m in modules:
                t0 = time.thread_time()
                for it in items:
                    m._row_values(it)
                out.setdefault(f"row values, {name}", []).append((time.thread_time() - t0) / rows * 1e6)
            for many in (False, True):
                label = "insert, executemany a group" if many else "insert, execute a row"
                out.setdefault(label, []).append(insert(d, f"{k}-{many}", many))
    head = ["part", *(f"round {k + 1}, us / row" for k in range(rounds))]
    return table(head, [[name, *(f"{v:.2f}" for v in vals)] for name, vals in out.items()])


def insert_forms_main(rows: int, rounds: int) -> str:
    values = [ledger_sqlite._row_values(_item(i)) for i in range(rows * 2)]
    one = "(" + ", ".join("?" * len(ledger_sqlite._COLS)) + ")"
    head = ledger_sqlite._INSERT.partition(" VALUES ")[0] + " VALUES "
    forms = (
        "executemany, in BEGIN/COMMIT",
        "multi-row INSERT, in BEGIN/COMMIT",
        "multi-row INSERT, autocommit",
    )
    best: dict[tuple[int, str], list[float]] = {}

    def run(path: str, size: int, form: str, rows_: list[tuple]) -> tuple[float, float]:
        conn = sqlite3.connect(path, isolation_level=None, cached_statements=512)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(ledger_sqlite._SCHEMA)
        c0, w0 = time.thread_time(), time.perf_counter()
        for g in range(0, len(rows_), size):
            group = rows_[g : g + size]
            if form == forms[0]:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(ledger_sqlite._INSERT, group)
                conn.execute("COMMIT")
                continue
            sql, flat = head + ", ".join([one] * len(group)), [v for row in group for v in row]
            if form == forms[1]:
                conn.execute("BEGIN IMMEDIATE")
                conn.execute(sql, flat)
                conn.execute("COMMIT")
            else:
                conn.execute(sql, flat)
        cpu, wall = time.thread_time() - c0, time.perf_counter() - w0
        conn.close()
        return cpu / len(rows_) * 1e6, wall / len(rows_) * 1e6

    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as d:
        for k in range(rounds):
            for size in (1, 4, 16, 32):
                for j, form in enumerate(forms):
                    start = (k + j) % 2 * rows
                    cpu, wall = run(
                        os.path.join(d, f"{k}-{size}-{j}.db"), size, form, values[start : start + rows]
                    )
                    b = best.setdefault((size, form), [float("inf"), float("inf")])
                    b[0], b[1] = min(b[0], cpu), min(b[1], wall)
    head_row = ["rows a group", "form", "CPU us / row (least)", "wall us / row (least)"]
    return table(head_row, [[str(s_), f, f"{c:.1f}", f"{w:.1f}"] for (s_, f), (c, w) in best.items()])


NOTE = (
    "At concurrency 1 `per row` and `queued` run the same code (a lone row commits at once in both), "
    "so the gap between those two rows is the machine's noise, not grouping.\n"
)


def markdown(results: list[Result], cmd: str) -> str:
    base = {(r.sync, r.concurrency, r.think_ms): r for r in results if r.label == "per row"}
    rows = []
    for r in results:
        b = base[(r.sync, r.concurrency, r.think_ms)]
        rows.append(
            [
                r.concurrency,
                f"{r.think_ms:g}",
                r.sync,
                r.label,
                f"{r.rows_per_s:,.0f}",
                f"{r.rows_per_s / b.rows_per_s:.2f}",
                f"{r.rows / r.commits:.1f}",
                f"{percentile(r.waits_ms, 50):.2f}",
                f"{percentile(r.waits_ms, 99):.2f}",
            ]
        )
    head = [
        "concurrency",
        "think ms",
        "synchronous",
        "grouping",
        "rows/s",
        "× per row",
        "rows/commit",
        "p50 wait ms",
        "p99 wait ms",
    ]
    return (
        "## Billing ledger: group commit (issue 30)\n\n"
        f"`{cmd}` on {platform.node() or 'this machine'} ({os.cpu_count()} cores, shared; one run, "
        "every variant side by side). Each row is one `SqliteLedger.record` through the real writer "
        "thread into a fresh WAL file; the wait is enqueue to resolved (after its group's COMMIT), "
        "which is what an answer's end waits for. `× per row`: rows/s against one commit per row, "
        f"same mode, concurrency and think time. `think ms`: mean pause between a writer's rows (0: back to back). The policy's defaults are `group_commit_ms: {GROUP_COMMIT_MS:g}`, "
        f"`group_commit_rows: {GROUP_COMMIT_ROWS}`.\n\n" + table(head, rows) + "\n\n" + NOTE
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows-c1", type=int, default=400)
    ap.add_argument("--rows-c32", type=int, default=4000)
    ap.add_argument("--think-ms", type=float, default=5.0)
    ap.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    ap.add_argument("--row-cost", action="store_true", help="the writer thread's CPU a row (see above)")
    ap.add_argument("--row-parts", action="store_true", help="the row's parts timed alone (see above)")
    ap.add_argument("--insert-forms", action="store_true", help="a group's insert forms by size (see above)")
    ap.add_argument("--rows", type=int, default=20000, help="--row-cost: rows a measurement")
    ap.add_argument("--rounds", type=int, default=3, help="--row-cost: alternating rounds")
    ap.add_argument("--checkout", metavar="DIR", help="--row-cost: also this checkout's SqliteLedger")
    args = ap.parse_args()
    if args.row_cost:
        print(asyncio.run(row_cost_main(args.rows, args.rounds, args.checkout)))
        raise SystemExit(0)
    if args.row_parts:
        print(row_parts_main(args.rows, args.rounds, args.checkout))
        raise SystemExit(0)
    if args.insert_forms:
        print(insert_forms_main(args.rows, args.rounds))
        raise SystemExit(0)
    res = asyncio.run(main(args.rows_c1, args.rows_c32, args.think_ms))
    cmd = (
        f"python -m bench.ledger_commit --rows-c1 {args.rows_c1} --rows-c32 {args.rows_c32}"
        f" --think-ms {args.think_ms:g} --write"
    )
    md = markdown(res, cmd)
    print(md)
    if args.write:
        write_section("ledger_commit", md)
