"""A killed gateway loses no acknowledged ledger row (SQLite WAL, both synchronous modes).

A child process records line items as fast as it can and prints each request id once ``record`` has
returned; the test SIGKILLs it mid-stream, reopens the file, and checks every acknowledged id is there.
(Power loss, where ``synchronous=normal`` differs from ``full``, cannot be simulated here.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cache.billing.ledger_sqlite import SqliteLedger

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, sys
from cache.billing.pricing import ModelPrices, RequestUsage, Rules, bill
from cache.billing.ledger_sqlite import SqliteLedger

async def main(path, sync):
    led = await SqliteLedger.open(path, synchronous=sync)
    prices = ModelPrices(3_000_000, 15_000_000)

    async def worker(w):
        for i in range(w, 100_000, 16):
            item = bill(RequestUsage(1000, 10, 300, "replica"), prices, Rules(), None, "upstream",
                        request_id=f"r{i}", tenant="t", model="m", ts_ms=1_790_000_000_000 + i)
            await led.record(item)
            sys.stdout.write(f"ack r{i}\n")
            sys.stdout.flush()

    await asyncio.gather(*[worker(w) for w in range(16)])

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


@pytest.mark.parametrize("sync", ["full", "normal"])
async def test_kill_loses_no_acknowledged_row(tmp_path, sync):
    path = str(tmp_path / "ledger.db")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, path, sync], stdout=subprocess.PIPE, cwd=str(ROOT), env=env
    )
    acked: list[str] = []
    deadline = time.monotonic() + 15
    try:
        assert proc.stdout is not None
        while len(acked) < 300 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            acked.append(line.decode().split()[1])
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    # lines already in the pipe were acknowledged before the kill too
    acked += [ln.split()[1] for ln in proc.stdout.read().decode().splitlines() if ln.startswith("ack ")]
    assert len(acked) >= 300, "the child did not get going"
    led = await SqliteLedger.open(path)
    try:
        rows = await led.call(lambda c: {r[0] for r in c.execute("SELECT request_id FROM line_items")})
        (total,) = await led.query(group_by=())
    finally:
        await led.close()
    assert set(acked) <= rows
    assert total.requests == len(rows)
