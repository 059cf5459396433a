"""Issue 19, item 2: the ledger's row key is the gateway's own id for each generation.

A client that sends one ``x-request-id`` with several different requests must get one ledger row per
generation (SQLite and Redis ledgers alike); its id is kept as a field of each row and echoed back.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem
from tests.support.stack import gateway, policy_for, sim_fleet

CLIENT_ID = "same-id-for-everything"


async def _rows(ledger: Any) -> list[tuple[str, str | None]]:
    """(request_id, client_request_id) of every row, read from the ledger's own storage."""
    if isinstance(ledger, SqliteLedger):
        return await ledger.call(
            lambda c: c.execute("SELECT request_id, client_request_id FROM line_items").fetchall()
        )
    assert isinstance(ledger, RedisLedger)
    entries = await ledger.client.xrange(ledger.stream_key, "-", "+")
    items = [LineItem.from_dict(orjson.loads(fields[b"item"])) for _, fields in entries]
    return [(it.request_id, it.client_request_id) for it in items]


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_one_client_request_id_for_five_generations_bills_five_rows(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sections: dict[str, Any] = {}
    if kind == "sqlite":
        sections["billing"] = {"ledger": {"path": str(tmp_path / "ledger.db")}}
    else:
        sections["redis"] = {"url": request.getfixturevalue("redis_url")}
        sections["billing"] = {"ledger": {"kind": "redis"}}
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, **sections)) as gw:
        echoed, gateway_ids, completion_tokens = [], [], 0
        async with aiohttp.ClientSession() as s:
            for i in range(5):
                body = {
                    "model": "sim-llama",
                    "max_tokens": 3 + i,
                    "messages": [{"role": "user", "content": f"question number {i}"}],
                }
                async with s.post(
                    gw.url + "/v1/chat/completions", json=body, headers={"x-request-id": CLIENT_ID}
                ) as r:
                    assert r.status == 200
                    completion_tokens += (await r.json())["usage"]["completion_tokens"]
                    echoed.append(r.headers["x-request-id"])
                    gateway_ids.append(r.headers.get("x-gateway-request-id"))
        ledger = gw.process.metering.ledger
        (total,) = await ledger.query(group_by=())
        assert total.requests == 5
        assert total.tokens.output == completion_tokens  # what the metrics count, the ledger holds
        assert echoed == [CLIENT_ID] * 5
        assert len(set(gateway_ids)) == 5 and CLIENT_ID not in gateway_ids
        rows = await _rows(ledger)
        assert sorted(rid for rid, _ in rows) == sorted(gateway_ids)
        assert {cid for _, cid in rows} == {CLIENT_ID}


async def test_a_request_without_an_id_gets_the_gateway_id_in_both_headers(tmp_path: Path) -> None:
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, billing={"ledger": {"path": str(tmp_path / "l.db")}})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            body = {"model": "sim-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
                assert r.headers["x-request-id"] == r.headers["x-gateway-request-id"]
                gid = r.headers["x-gateway-request-id"]
            assert await _rows(gw.process.metering.ledger) == [(gid, None)]


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
    PRIMARY KEY (tenant, request_id)
);
INSERT INTO line_items VALUES ('acme', 'old-1', 'm', 1790000000000, '2026-09-21', 'upstream', 'replica',
    'USD', 'v0', 0, 10, 0, 0, 0, 5, 0, 0, 20, 0, 0, 0, 40, 0, 0, 60, 60);
"""


async def test_an_existing_sqlite_ledger_gains_the_column_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.commit()
    con.close()
    async with sim_fleet(1) as fleet:
        policy = policy_for(fleet.urls, billing={"ledger": {"path": str(path)}})
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            body = {"model": "sim-llama", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
            async with s.post(
                gw.url + "/v1/chat/completions", json=body, headers={"x-request-id": "c1"}
            ) as r:
                assert r.status == 200
                gid = r.headers["x-gateway-request-id"]
            ledger = gw.process.metering.ledger
            assert sorted(await _rows(ledger)) == sorted([("old-1", None), (gid, "c1")])
            (total,) = await ledger.query(group_by=())
            assert total.requests == 2 and total.tokens.uncached >= 10 and total.cost_micros >= 60
