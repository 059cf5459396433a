"""kill -9 the gateway under load: every request whose response completed is in the ledger, exactly.

The load generator records each completed response (request id, usage). After SIGKILL the SQLite file
is read directly: every completed request has its row with the replica's own token counts; rows beyond
those can only be requests that were in flight at the kill (written, answer not yet received).
Then the gateway restarts on the same ledger and keeps serving and counting.
"""

from __future__ import annotations

import asyncio
import signal
import sqlite3
import time
from pathlib import Path

import aiohttp
import httpx
import orjson
import yaml

from bench.procs import running, start_gateway, start_sim

CONCURRENCY = 16


def write_policy(path: Path, urls: list[str], ledger: Path) -> None:
    path.write_text(
        yaml.safe_dump(
            {
                "models": [{"name": "sim-llama", "replicas": [{"url": u} for u in urls]}],
                "billing": {
                    "ledger": {"path": str(ledger)},
                    "models": {"sim-llama": {"input_per_1m": "1.0", "output_per_1m": "2.0"}},
                },
                "cache": {"enabled": False},
            }
        )
    )


async def load_until_killed(url: str, seconds: float, completed: dict[str, dict]) -> int:
    """Closed-loop load; returns how many requests were started. Stream and non-stream alternate."""
    started = 0
    stop_at = time.monotonic() + seconds

    async def worker(w: int) -> None:
        nonlocal started
        async with aiohttp.ClientSession() as s:
            i = 0
            while time.monotonic() < stop_at:
                i += 1
                started += 1
                stream = (w + i) % 2 == 0
                body = {
                    "model": "sim-llama",
                    "max_tokens": 6,
                    "stream": stream,
                    "messages": [{"role": "user", "content": f"worker {w} request {i}"}],
                }
                if stream:
                    body["stream_options"] = {"include_usage": True}
                try:
                    async with s.post(url + "/v1/chat/completions", json=body) as r:
                        raw = await r.read()
                        rid = r.headers["x-request-id"]
                except (aiohttp.ClientError, KeyError):
                    return  # the gateway is gone
                if stream:
                    if not raw.endswith(b"data: [DONE]\n\n"):
                        continue  # not completed
                    usage_line = [e for e in raw.split(b"\n\n") if b'"usage":{' in e][-1]
                    usage = orjson.loads(usage_line[len(b"data: ") :])["usage"]
                else:
                    usage = orjson.loads(raw)["usage"]
                completed[rid] = usage

    await asyncio.gather(*(worker(w) for w in range(CONCURRENCY)))
    return started


def test_kill9_loses_no_completed_request(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger.db"
    policy = tmp_path / "policy.yaml"
    sim, urls = start_sim(
        1, extra=["--mode", "simple", "--decode-s-per-token", "0.002", "--overhead-s", "0.001"]
    )
    with running(sim):
        write_policy(policy, urls, ledger)
        gw = start_gateway(["--config", str(policy)])
        completed: dict[str, dict] = {}

        async def scenario() -> int:
            load = asyncio.create_task(load_until_killed(gw.url, 10.0, completed))
            await asyncio.sleep(2.0)
            gw.popen.send_signal(signal.SIGKILL)
            return await load

        started = asyncio.run(scenario())
        gw.popen.wait(10)
        assert gw.popen.returncode == -signal.SIGKILL
        assert len(completed) > 50, "the load must have completed a fair number of requests"

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
        assert len(extra) <= CONCURRENCY, "only requests in flight at the kill may be unconfirmed"
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
