"""Issue 23: a row whose tokens the gateway estimated says so, in both ledgers, in old files, and in the
``prefix-gateway usage`` report; rows written before the flag existed read as the replica's usage."""

from __future__ import annotations

import asyncio
import csv
import io
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import yaml

from cache.billing.ledger import aggregate
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem, ModelPrices, RequestUsage, Rules, bill
from cache.billing.report import render_csv, render_table, report

PRICES = ModelPrices(2_000_000, 8_000_000, "USD", "v1")
TS = 1_790_000_000_000


def item(rid: str, estimated: bool, tenant: str = "acme") -> LineItem:
    usage = RequestUsage(120, 7, 0, "none", estimated)
    return bill(usage, PRICES, Rules(), None, "upstream", request_id=rid, tenant=tenant, model="m", ts_ms=TS)


def test_the_flag_travels_with_the_item_and_an_old_item_reads_as_reported() -> None:
    est, exact = item("r1", True), item("r2", False)
    assert est.usage_estimated and not exact.usage_estimated
    assert est.total_micros == exact.total_micros  # the same tokens cost the same: only the flag differs
    assert LineItem.from_dict(orjson.loads(orjson.dumps(est.to_dict()))) == est
    old = est.to_dict()
    del old["usage_estimated"]  # a Redis stream item written before the field
    assert LineItem.from_dict(old).usage_estimated is False
    (row,) = aggregate([est, exact, item("r3", True)], group_by=())
    assert (row.requests, row.estimated) == (3, 2)


async def test_both_ledgers_count_the_estimated_rows(ledger) -> None:
    items = [item("a", True), item("b", False), item("c", True, tenant="globex")]
    for it in items + items[:1]:  # a retried write counts once, its flag too
        await ledger.record(it)
    by_tenant = {r.tenant: r for r in await ledger.query(group_by=("tenant",))}
    assert (by_tenant["acme"].requests, by_tenant["acme"].estimated) == (2, 1)
    assert (by_tenant["globex"].requests, by_tenant["globex"].estimated) == (1, 1)
    rep = await report(ledger, "USD", tenant=None, model=None, since=None, until=None, group_by=("tenant",))
    assert rep["totals"]["estimated"] == 2
    assert "total: 3 requests (2 with estimated usage)" in render_table(rep)
    rows = list(csv.DictReader(io.StringIO(render_csv(rep))))
    assert [(r["tenant"], r["requests"], r["estimated"]) for r in rows] == [
        ("acme", "2", "1"),
        ("globex", "1", "1"),
    ]


OLD_SCHEMA = """
CREATE TABLE line_items (
    tenant TEXT NOT NULL, request_id TEXT NOT NULL, model TEXT NOT NULL, ts_ms INTEGER NOT NULL,
    day TEXT NOT NULL, source TEXT NOT NULL, cached_source TEXT NOT NULL, currency TEXT NOT NULL,
    price_version TEXT NOT NULL, reported_cached_tokens INTEGER NOT NULL,
    t_uncached INTEGER NOT NULL, t_implicit_hit INTEGER NOT NULL, t_explicit_create INTEGER NOT NULL,
    t_explicit_hit INTEGER NOT NULL, t_output INTEGER NOT NULL, t_served_input INTEGER NOT NULL,
    t_served_output INTEGER NOT NULL,
    m_uncached INTEGER NOT NULL, m_implicit_hit INTEGER NOT NULL, m_explicit_create INTEGER NOT NULL,
    m_explicit_hit INTEGER NOT NULL, m_output INTEGER NOT NULL, m_served_input INTEGER NOT NULL,
    m_served_output INTEGER NOT NULL,
    total_micros INTEGER NOT NULL, cost_without_cache_micros INTEGER NOT NULL,
    client_request_id TEXT,
    PRIMARY KEY (tenant, request_id)
);
INSERT INTO line_items VALUES ('acme', 'old-1', 'm', 1790000000000, '2026-09-21', 'upstream', 'replica',
    'USD', 'v0', 0, 10, 0, 0, 0, 5, 0, 0, 20, 0, 0, 0, 40, 0, 0, 60, 60, NULL);
"""


async def test_an_old_sqlite_file_gains_the_column_and_its_rows_read_as_reported(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.commit()
    con.close()
    ledger = await SqliteLedger.open(str(path))
    try:
        assert await ledger.record(item("new-1", True))
        (total,) = await ledger.query(group_by=())
        assert (total.requests, total.estimated) == (2, 1)
        flags = await ledger.call(
            lambda c: c.execute("SELECT request_id, usage_estimated FROM line_items ORDER BY 1").fetchall()
        )
        assert flags == [("new-1", 1), ("old-1", 0)]
    finally:
        await ledger.close()


def test_the_usage_command_shows_the_estimated_rows(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"

    async def write() -> None:
        ledger = await SqliteLedger.open(str(path))
        for it in (item("a", True), item("b", False), item("c", True)):
            await ledger.record(it)
        await ledger.close()

    asyncio.run(write())
    policy = tmp_path / "policy.yaml"
    policy.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9"}]}],
                "billing": {"ledger": {"path": str(path)}},
            }
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "usage", "--config", str(policy)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    header = out.stdout.splitlines()[0].split()
    assert header[:4] == ["tenant", "model", "requests", "estimated"]
    assert "total: 3 requests (2 with estimated usage)" in out.stdout
