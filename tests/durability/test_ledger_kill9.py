"""kill -9 the gateway under load: every request whose response completed is in the ledger, exactly.

The load generator records each completed response (request id, usage). After SIGKILL the SQLite file
is read directly: every completed request has its row with the replica's own token counts; rows beyond
those can only be requests that were in flight at the kill (written, answer not yet received).
Then the gateway restarts on the same ledger and keeps serving and counting.

Run with the policy's defaults at 16 clients, and with ``synchronous: full`` and a 5 ms group-commit
window at 64 clients, where many requests (and an open group of rows) are in flight when the kill
comes: the test asserts how many were in flight at that moment.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import orjson
import pytest
import yaml

from bench.procs import running, start_gateway, start_sim


def write_policy(path: Path, urls: list[str], ledger: Path, ledger_extra: dict) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "sim-llama", "replicas": [{"url": u} for u in urls]}],
                "billing": {
                    "ledger": {"path": str(ledger), **ledger_extra},
                    "models": {"sim-llama": {"input_per_1m": "1.0", "output_per_1m": "2.0"}},
                },
                "cache": {"enabled": False},
            }
        )
    )


@dataclass
class Load:
    started: int = 0
    in_flight: int = 0


async def load_until_killed(
    url: str, seconds: float, completed: dict[str, dict], concurrency: int, load: Load
) -> None:
    """Closed-loop load; counts requests started and in flight. Stream and non-stream alternate."""
    stop_at = time.monotonic() + seconds

    async def worker(w: int) -> None:
        async with aiohttp.ClientSession() as s:
            i = 0
            while time.monotonic() < stop_at:
                i += 1
                load.started += 1
                stream = (w + i) % 2 == 0
                body = {
                    "model": "sim-llama",
                    "max_tokens": 6,
                    "stream": stream,
                    "messages": [{"role": "user", "content": f"worker {w} request {i}"}],
                }
                if stream:
                    body["stream_options"] = {"include_usage": True}
                load.in_flight += 1
                try:
                    async with s.post(url + "/v1/chat/completions", json=body) as r:
                        raw = await r.read()
                        rid = r.headers["x-request-id"]
                except (aiohttp.ClientError, KeyError):
                    return  # the gateway is gone
                finally:
                    load.in_flight -= 1
                if stream:
                    if not raw.endswith(b"data: [DONE]\n\n"):
                        continue  # not completed
                    usage_line = [e for e in raw.split(b"\n\n") if b'"usage":{' in e][-1]
                    usage = orjson.loads(usage_line[len(b"data: ") :])["usage"]
                else:
                    usage = orjson.loads(raw)["usage"]
                completed[rid] = usage

    await asyncio.gather(*(worker(w) for w in range(concurrency)))


@pytest.mark.parametrize(
    ("concurrency", "ledger_extra"),
    [(16, {}), (64, {"synchronous": "full", "group_commit_ms": 5.0})],
    ids=["defaults-c16", "full-window5ms-c64"],
)
def test_kill9_loses_no_completed_request(tmp_path: Path, concurrency: int, ledger_extra: dict) -> None:
    ledger = tmp_path / "ledger.db"
    policy = tmp_path / "policy.yaml"
    sim, urls = start_sim(
        1, extra=["--mode", "simple", "--decode-s-per-token", "0.002", "--overhead-s", "0.001"]
    )
    with running(sim):
        write_policy(policy, urls, ledger, ledger_extra)
        gw = start_gateway(["--config", str(policy)])
        completed: dict[str, dict] = {}

        load = Load()

        async def scenario() -> int:
            task = asyncio.create_task(load_until_killed(gw.url, 60.0, completed, concurrency, load))
            # The kill lands under load, once a fair number of answers (and their rows) are behind it:
            # counted, not timed (2 s of load was 40 answers on a loaded machine, 400 on a quiet one).
            deadline = time.monotonic() + 45
            while len(completed) <= 60 and time.monotonic() < deadline and not task.done():
                await asyncio.sleep(0.02)
            in_flight = load.in_flight
            gw.popen.send_signal(signal.SIGKILL)
            await task
            return in_flight

        in_flight_at_kill = asyncio.run(scenario())
        started = load.started
        gw.popen.wait(10)
        assert gw.popen.returncode == -signal.SIGKILL
        assert len(completed) > 50, "the load must have completed a fair number of requests"
        assert in_flight_at_kill >= concurrency // 2, (
            f"only {in_flight_at_kill} requests in flight at the kill"
        )

        con = sqlite3.connect(ledger)
        rows = {
            rid: (prompt, out)
            for rid, prompt, out in con.execute(
                "SELECT request_id, t_uncached + t_implicit_hit + t_explicit_create + t_explicit_hit, t_output "
                "FROM line_items"
            )
        }
        con.close()
        missing = [rid for rid in completed if rid not in rows]
        assert not missing, f"{len(missing)} completed requests not in the ledger"
        for rid, usage in completed.items():
            assert rows[rid] == (usage["prompt_tokens"], usage["completion_tokens"]), rid
        extra = set(rows) - set(completed)
        assert len(extra) <= concurrency, "only requests in flight at the kill may be unconfirmed"
        assert started >= len(rows)

        # Restart on the same ledger: it opens, serves, and adds to what is there.
        gw2 = start_gateway(["--config", str(policy)])
        with running(gw2):
            r = httpx.post(
                gw2.url + "/v1/chat/completions",
                json={
                    "model": "sim-llama",
                    "max_tokens": 3,
                    "messages": [{"role": "user", "content": "after"}],
                },
            )
            assert r.status_code == 200
        con = sqlite3.connect(ledger)
        assert con.execute("SELECT COUNT(*) FROM line_items").fetchone()[0] == len(rows) + 1
        con.close()
