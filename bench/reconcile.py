"""Usage reconciliation end to end: N requests through a gateway *process* in front of simulated
replicas, then ``prefix-gateway usage --reconcile`` (the command itself, against the running gateway).

    python -m bench.reconcile --requests 10000
    python -m bench.reconcile --requests 500 --ledger redis --redis-url redis://127.0.0.1:6379/0

Requests mix streams and whole answers; a share of the streams (``--disconnect-share``, 2 % by
default) is closed by the client after two chunks, so those rows are billed on the gateway's estimate
(``usage_estimated``). Checked, against the simulator's own record of every generation
(``/sim/generations``, under the ``X-Request-Id`` the gateway sent):

- every request is one row, and a row the replica's usage priced carries exactly the simulator's
  prompt and generated tokens (a drift of 0 tokens for completed requests);
- the reconciliation's drift per replica (its ``vllm:*_tokens_total`` counters' increase minus the
  ledger) is exactly what the estimated rows miss of what the replica did, and those rows are the
  ones the report names (the client-closed streams);
- the command exits 0 (no drift beyond the threshold would be 3) only when nothing is estimated.

Exit status 0 when every check holds, 1 otherwise; the report is printed either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.procs import Proc, running, start_gateway, start_sim

ADMIN_TOKEN = "reconcile-admin-token"
MODEL = "sim-llama"


def policy_yaml(urls: list[str], tmp: str, ledger: str, redis_url: str | None) -> str:
    billing: dict[str, Any] = {"reconcile": {"window_s": 1.0, "drift_threshold_pct": 0.0}}
    policy: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False, "log_level": "warning"},
        "health": {"interval_s": 1.0},
        "scrape": {"interval_s": 0.2},
        "limits": {"max_concurrent_requests": 1024},
        "cache": {"enabled": False},  # every request a generation: what reconciliation is about
        "models": [
            {
                "name": MODEL,
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "round_robin"},
            }
        ],
    }
    if ledger == "redis":
        assert redis_url, "--ledger redis needs --redis-url"
        policy["redis"] = {"url": redis_url, "key_prefix": f"recon{os.getpid()}x{random.randrange(10**6)}"}
        billing["ledger"] = {"kind": "redis"}
    else:
        billing["ledger"] = {"path": str(Path(tmp) / "ledger.db")}
    policy["billing"] = billing
    return yaml.safe_dump(policy)


@dataclass
class Traffic:
    sent: int = 0
    errors: list[str] = field(default_factory=list)
    closed: set[str] = field(default_factory=set)  # request ids of the streams the client closed
    ids: set[str] = field(default_factory=set)


def _body(i: int, rng: random.Random, stream: bool) -> dict[str, Any]:
    return {
        "model": MODEL,
        "messages": [
            {"role": "user", "content": f"Reconcile request {i}: " + "tokens " * rng.randrange(5, 60)}
        ],
        "max_tokens": rng.randrange(4, 40),
        "stream": stream,
    }


async def drive(url: str, n: int, concurrency: int, disconnect_share: float, seed: int) -> Traffic:
    rng = random.Random(seed)
    plan = [(i, rng.random() < 0.6, rng.random() < disconnect_share) for i in range(n)]
    out = Traffic()
    queue: asyncio.Queue[tuple[int, bool, bool]] = asyncio.Queue()
    for p in plan:
        queue.put_nowait(p)

    async def worker(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            i, stream, close = queue.get_nowait()
            body = _body(i, random.Random(seed * 1_000_003 + i), stream or close)
            if close:
                body["max_tokens"] = 200  # long enough to still be generating when the client leaves
            try:
                async with session.post(url + "/v1/chat/completions", json=body) as resp:
                    rid = resp.headers.get("x-gateway-request-id", "")
                    out.ids.add(rid)
                    if resp.status != 200:
                        out.errors.append(f"{i}: {resp.status}")
                        continue
                    if close:
                        chunks = 0
                        async for _ in resp.content:
                            chunks += 1
                            if chunks >= 4:  # two events (data + blank line each), then away
                                break
                        out.closed.add(rid)
                        resp.close()
                    else:
                        await resp.read()
            except aiohttp.ClientError as exc:
                out.errors.append(f"{i}: {type(exc).__name__}")
            out.sent += 1

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return out


def _admin(url: str, path: str) -> Any:
    req = urllib.request.Request(url + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return orjson.loads(resp.read())


def _wait(probe: Any, ok: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if ok(value):
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}: {value}")
        time.sleep(0.05)


def _generations(urls: list[str]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for u in urls:
        for g in _get_json(u + "/sim/generations"):
            out[g["request_id"]] = g
    return out


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return orjson.loads(resp.read())


def _rows_sqlite(path: str) -> dict[str, tuple[int, int, bool, str | None]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT request_id, t_uncached + t_implicit_hit + t_explicit_create + t_explicit_hit, t_output,"
            " usage_estimated, replica_id FROM line_items"
        ).fetchall()
    finally:
        conn.close()
    return {r[0]: (int(r[1]), int(r[2]), bool(r[3]), r[4]) for r in rows}


@contextmanager
def stack(
    requests: int, ledger: str, redis_url: str | None, log_path: str | None
) -> Iterator[tuple[Proc, list[str], str, str]]:
    with tempfile.TemporaryDirectory() as tmp:
        extra = ["--mode", "simple", "--speed", "1", "--overhead-s", "0", "--decode-s-per-token", "0.002",
                 "--prefill-s-per-token", "0", "--max-recorded-requests", str(requests + 100)]  # fmt: skip
        sim, urls = start_sim(2, extra=extra, log_path=log_path)
        with running(sim):
            path = Path(tmp) / "policy.yaml"
            path.write_text(policy_yaml(urls, tmp, ledger, redis_url))
            env = {"PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN, "PREFIX_GATEWAY_SECRET": "reconcile-secret"}
            gw = start_gateway(["--config", str(path)], env=env, log_path=log_path)
            with running(gw):
                yield gw, urls, str(path), str(Path(tmp) / "ledger.db")


def run(
    requests: int,
    *,
    concurrency: int = 32,
    disconnect_share: float = 0.02,
    ledger: str = "sqlite",
    redis_url: str | None = None,
    seed: int = 7,
    log_path: str | None = None,
) -> dict[str, Any]:
    """Run the traffic and the reconciliation; the summary's ``failures`` lists what did not hold."""
    failures: list[str] = []
    with stack(requests, ledger, redis_url, log_path) as (gw, urls, policy_path, db):
        # A quiet first edge: both replicas' counters read at least twice before any traffic.
        _wait(
            lambda: _admin(gw.url, "/admin/usage/reconcile"),
            lambda r: len([x for x in r["replicas"] if x["replica_counters"] is not None]) == 2,
            30,
            "two scrapes of both replicas",
        )
        t0 = time.time()
        started = time.monotonic()
        traffic = asyncio.run(drive(gw.url, requests, concurrency, disconnect_share, seed))
        elapsed = time.monotonic() - started
        if traffic.errors:
            failures.append(f"{len(traffic.errors)} requests failed: {traffic.errors[:5]}")
        # Every row written (the client-closed ones in the background), then a scrape after the last.
        _wait(
            lambda: _admin(gw.url, f"/admin/usage?since={t0 - 1}")["totals"]["requests"],
            lambda n: n >= requests,
            60,
            "every row",
        )
        t_done = time.time()
        rep = _wait(
            lambda: _admin(gw.url, f"/admin/usage/reconcile?since={t0}"),
            lambda r: r["until_ms"] is not None and r["until_ms"] > t_done * 1000,
            30,
            "a scrape after the last row",
        )
        cmd = [sys.executable, "-m", "gateway", "usage", "--reconcile", "--config", policy_path,
               "--url", gw.url, "--since", str(t0), "--format", "json"]  # fmt: skip
        env = {**os.environ, "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN}
        env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
        done = subprocess.run(cmd, capture_output=True, env=env, timeout=120, check=False)
        table = subprocess.run(cmd[:-2], capture_output=True, env=env, timeout=120, check=False)
        cli = json.loads(done.stdout) if done.stdout else {}
        gens = _generations(urls)
        rows = _rows_sqlite(db) if ledger == "sqlite" else None

    if done.returncode not in (0, 3):
        failures.append(f"usage --reconcile exited {done.returncode}: {done.stderr.decode()[-500:]}")
    if cli.get("totals") != rep["totals"]:
        failures.append("the command's totals differ from the admin endpoint's")
    estimated_ids = {rid for r in rep["replicas"] for rid in r["estimated"]["request_ids"]}
    n_estimated = rep["totals"]["estimated"]["rows"]
    # The drift is exactly what the estimated rows miss of what the replica did.
    expected = {"prompt_tokens": 0, "generation_tokens": 0}
    exact_mismatch = 0
    if rows is not None:
        if set(rows) != traffic.ids:
            failures.append(f"rows {len(rows)} != requests {len(traffic.ids)}")
        for rid, (prompt, output, est, replica) in rows.items():
            g = gens.get(rid)
            if g is None:
                failures.append(f"row {rid} has no generation on the simulator")
                continue
            if replica is None:
                failures.append(f"row {rid} has no replica")
            if est:
                expected["prompt_tokens"] += g["prompt_tokens"] - prompt
                expected["generation_tokens"] += g["completion_tokens"] - output
            elif (prompt, output) != (g["prompt_tokens"], g["completion_tokens"]) or g[
                "outcome"
            ] != "completed":
                exact_mismatch += 1
        if exact_mismatch:
            failures.append(f"{exact_mismatch} rows priced by the replica's usage differ from its record")
        if rep["totals"]["drift"] != expected:
            failures.append(f"drift {rep['totals']['drift']} != what the estimated rows miss {expected}")
    if n_estimated != len(traffic.closed):
        failures.append(f"{n_estimated} estimated rows, {len(traffic.closed)} streams closed by the client")
    complete = all(r["estimated"]["rows"] == len(r["estimated"]["request_ids"]) for r in rep["replicas"])
    if not estimated_ids <= traffic.closed or (complete and estimated_ids != traffic.closed):
        failures.append("the estimated rows named are not the client-closed streams")
    if n_estimated == 0 and (rep["totals"]["drift"] != expected or rep["exceeded"]):
        failures.append("drift without estimated rows")
    return {
        "requests": requests,
        "ledger": ledger,
        "elapsed_s": round(elapsed, 1),
        "closed_by_client": len(traffic.closed),
        "estimated_rows": n_estimated,
        "completed_rows_drift": 0 if not exact_mismatch else None,
        "drift": rep["totals"]["drift"],
        "drift_explained_by_estimated": expected,
        "replica_counters": rep["totals"]["replica_counters"],
        "ledger_tokens": rep["totals"]["ledger"],
        "command_exit": done.returncode,
        "table": table.stdout.decode(),
        "failures": failures,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--concurrency", type=int, default=32)
    ap.add_argument("--disconnect-share", type=float, default=0.02)
    ap.add_argument("--ledger", choices=["sqlite", "redis"], default="sqlite")
    ap.add_argument("--redis-url")
    ap.add_argument("--log", help="append the processes' output to this file")
    args = ap.parse_args(argv)
    out = run(
        args.requests,
        concurrency=args.concurrency,
        disconnect_share=args.disconnect_share,
        ledger=args.ledger,
        redis_url=args.redis_url,
        log_path=args.log,
    )
    print(out.pop("table"))
    print(json.dumps(out, indent=2))
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
