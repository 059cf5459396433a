"""Issue 23: usage reconciliation, the ledger's tokens per replica against the replica's own counters.

- Both ledgers total their fleet rows per (model, replica) over a period, estimated rows apart and
  named; served rows are no replica's; rows from before rows carried their replica (an old SQLite
  file, an old Redis stream item) are unattributed.
- 500 requests through a gateway process in front of the simulator (``bench.reconcile``, whose
  10,000-request run is the issue's check): a drift of 0 for every completed request, the whole drift
  exactly what the estimated rows (the streams the client closed) miss, those rows named, and the
  command ``prefix-gateway usage --reconcile`` reporting the same.
- Traffic sent to a replica behind the gateway's back is drift: the gauge, the exceeded counter and
  the ``usage_drift`` warning of the window that holds it.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import aiohttp
import pytest
import redis.asyncio as aioredis

from bench import reconcile as bench_reconcile
from bench.procs import START_TIMEOUT_S
from cache.billing.ledger import replica_totals_of
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem, RequestUsage, Rules, bill
from tests.integration.test_billing_estimated_rows import OLD_SCHEMA, PRICES
from tests.integration.test_billing_every_path import eventually, metrics_text
from tests.support.stack import gateway, policy_for, sim_fleet

TS = 1_790_000_000_000


def row(rid: str, replica: str | None, prompt: int, out: int, *, estimated: bool = False, source: str = "upstream",
        ts: int = TS) -> LineItem:  # fmt: skip
    usage = RequestUsage(prompt, out, 0, "none", estimated)
    return bill(usage, PRICES, Rules(), None, source, request_id=rid, tenant="acme", model="m", ts_ms=ts,
                replica_id=replica)  # fmt: skip


ROWS = [
    row("a", "r0", 100, 10),
    row("b", "r0", 50, 5, estimated=True),
    row("c", "r1", 70, 7),
    row("d", "r1", 999, 99, source="response_cache"),  # served: nobody's work
    row("e", "r0", 1, 1, ts=TS + 10_000),  # after the period
    row("f", "r1", 30, 3, source="batch", estimated=True),
]


@pytest.fixture(params=["sqlite", "redis"])
async def fresh_ledger(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "sqlite":
        led = await SqliteLedger.open(str(tmp_path / "ledger.db"))
        yield led
        await led.close()
    else:
        client = aioredis.from_url(request.getfixturevalue("redis_url"))
        yield RedisLedger(client, key_prefix=f"recon-{uuid.uuid4().hex[:8]}", stream_maxlen=10_000)
        await client.aclose()


async def test_both_ledgers_total_fleet_rows_per_replica(fresh_ledger: SqliteLedger | RedisLedger) -> None:
    for it in ROWS + ROWS[:1]:  # a retried write counts once
        await fresh_ledger.record(it)
    got = await fresh_ledger.replica_totals(TS, TS + 5_000)
    assert got == replica_totals_of(ROWS, TS, TS + 5_000)
    by = {t.replica: t for t in got}
    assert set(by) == {"r0", "r1"}
    assert (by["r0"].rows, by["r0"].prompt_tokens, by["r0"].output_tokens) == (2, 150, 15)
    assert (by["r0"].estimated_rows, by["r0"].estimated_prompt_tokens, by["r0"].estimated_ids) == (
        1,
        50,
        ["b"],
    )
    assert (by["r1"].rows, by["r1"].prompt_tokens, by["r1"].estimated_ids) == (2, 100, ["f"])
    assert [t.replica for t in await fresh_ledger.replica_totals(TS + 5_000, None)] == ["r0"]


async def test_an_old_sqlite_file_gains_the_replica_column_its_rows_unattributed(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(OLD_SCHEMA)
    con.commit()
    con.close()
    ledger = await SqliteLedger.open(str(path))
    try:
        assert await ledger.record(row("new-1", "r0", 5, 1, ts=1_790_000_000_500))
        got = {
            t.replica: (t.rows, t.prompt_tokens, t.output_tokens)
            for t in await ledger.replica_totals(None, None)
        }
        assert got == {None: (1, 10, 5), "r0": (1, 5, 1)}
    finally:
        await ledger.close()


async def test_an_old_redis_stream_item_reads_as_unattributed(redis_url: str) -> None:
    client = aioredis.from_url(redis_url)
    try:
        ledger = RedisLedger(client, key_prefix=f"recon-{uuid.uuid4().hex[:8]}")
        old = ROWS[0].to_dict()
        del old["replica_id"]  # an item written before the field
        assert LineItem.from_dict(old).replica_id is None
        await ledger.record(LineItem.from_dict({**old, "request_id": "old"}))
        await ledger.record(ROWS[2])
        got = {t.replica: t.rows for t in await ledger.replica_totals(None, None)}
        assert got == {None: 1, "r1": 1}
    finally:
        await client.aclose()


def test_500_requests_reconcile_to_zero_drift_for_completed_requests() -> None:
    out = bench_reconcile.run(500, concurrency=16, disconnect_share=0.03)
    assert out["failures"] == [], out
    assert out["estimated_rows"] == out["closed_by_client"] > 0
    assert out["drift"] == out["drift_explained_by_estimated"]
    assert out["command_exit"] == 3  # the estimated rows' drift passes the bench's 0 % threshold
    assert "rows with estimated usage" in out["table"] and "estimated on r" in out["table"]


async def test_traffic_behind_the_gateways_back_is_drift_a_gauge_and_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="prefix_gateway")
    async with sim_fleet(1) as fleet:
        policy = policy_for(
            fleet.urls,
            scrape={"interval_s": 0.1},
            billing={
                "ledger": {"path": ":memory:"},
                "reconcile": {"window_s": 1.0, "drift_threshold_pct": 1.0},
            },
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            body = {
                "model": "sim-llama",
                "messages": [{"role": "user", "content": "hello " * 40}],
                "max_tokens": 5,
            }
            async with s.post(gw.url + "/v1/chat/completions", json=body) as r:
                assert r.status == 200
            async with s.post(fleet.urls[0] + "/v1/chat/completions", json=body) as r:  # not through it
                assert r.status == 200
                usage = (await r.json())["usage"]
            started = time.monotonic()

            def drift_line(text: str) -> str:
                lines = [
                    ln for ln in text.splitlines() if ln.startswith("prefix_gateway_usage_drift_tokens{")
                ]
                return "\n".join(lines)

            text = await eventually(
                lambda: metrics_text(gw),
                lambda t: f"{float(usage['prompt_tokens'])}" in drift_line(t),
                timeout=15,
            )
            assert 'kind="prompt_tokens",model="sim-llama",replica="r0"' in drift_line(text)
            assert (
                f'kind="generation_tokens",model="sim-llama",replica="r0"}} {float(usage["completion_tokens"])}'
                in (drift_line(text))
            )
            assert (
                'prefix_gateway_usage_drift_exceeded_total{kind="prompt_tokens",model="sim-llama",replica="r0"}'
                in text
            )
            warned = [rec for rec in caplog.records if getattr(rec, "event", None) == "usage_drift"]
            assert warned and warned[0].drift["prompt_tokens"] == usage["prompt_tokens"], warned
            assert time.monotonic() - started < 15


async def test_the_endpoint_and_the_command_answer_in_the_api_shape(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = "reconcile-test-token"
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", token)
    auth = {"Authorization": f"Bearer {token}"}
    async with (
        sim_fleet(1) as fleet,
        gateway(policy_for(fleet.urls, scrape={"interval_s": 0.1})) as gw,
        aiohttp.ClientSession() as s,
    ):
        async with s.get(gw.url + "/admin/usage/reconcile") as r:
            assert r.status == 401
        async with s.get(gw.url + "/admin/usage/reconcile?since=10&until=5", headers=auth) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "until"
        async with s.get(gw.url + "/admin/usage/reconcile?since=yesterday", headers=auth) as r:
            assert r.status == 400 and (await r.json())["error"]["code"] == "invalid_request"

        async def report() -> dict:
            async with s.get(gw.url + "/admin/usage/reconcile", headers=auth) as r:
                assert r.status == 200
                return await r.json()

        rep = await eventually(
            report, lambda r: bool(r["replicas"]) and r["replicas"][0]["drift"] is not None
        )
        assert rep["replicas"][0]["drift"] == {"prompt_tokens": 0, "generation_tokens": 0}
        assert rep["exceeded"] is False and rep["unattributed"] is None
    # The command asks a gateway: none answering is an error, exit 1, not a traceback.
    policy = tmp_path / "p.yaml"
    policy.write_text("models:\n  - name: m\n    replicas: [{url: 'http://127.0.0.1:9'}]\n")
    cmd = [sys.executable, "-m", "gateway", "usage", "--reconcile", "--config", str(policy), "--url",
           "http://127.0.0.1:9"]  # fmt: skip
    done = subprocess.run(
        cmd, capture_output=True, timeout=START_TIMEOUT_S, check=False, env={**os.environ, "PYTHONPATH": "."}
    )
    assert done.returncode == 1 and b"error: http://127.0.0.1:9/admin/usage/reconcile" in done.stderr
