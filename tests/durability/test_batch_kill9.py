"""kill -9 a process running a batch: another resumes it and every custom_id is answered exactly once.

The workers are real processes (``tests.support.batch_worker``) sending each line over HTTP to a
simulator process slow enough that the kill lands mid-batch. SQLite: the killed worker's lease runs
out and a restarted worker resumes on the same file. Redis: two workers (two pods) run at once; the
one holding the batch is killed and the other takes it over. Afterwards the output file holds each
custom_id once, and the replicas saw each line once plus at most the lines that were in flight at the
kill (sent, answer not yet recorded).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import redis
import yaml

from bench.batch_workload import URL, make_batch
from bench.procs import running, start_sim
from config.loader import load_policy
from gateway.batch.files import FileStore
from gateway.batch.service import BatchService
from gateway.batch.store import open_store
from tests.support.batch import StaticFleet, chunks

LINES = 120
SLOTS = 2 * 4  # two replicas, share 0.5 of 8 slots each: the most lines in flight at once
LEASE_S = 2.0


def write_policy(path: Path, urls: list[str], tmp: Path, store: str, redis_url: str | None) -> None:
    policy: dict[str, Any] = {
        "models": [
            {"name": "sim-llama", "replicas": [{"id": f"r{i}", "url": u} for i, u in enumerate(urls)]}
        ],
        "batch": {
            "enabled": True,
            "dir": str(tmp / "files"),
            "sqlite_path": str(tmp / "jobs.db"),
            "store": store,
            "poll_s": 0.1,
            "lease_ttl_s": LEASE_S,
            "share": 0.5,
            "replica_slots": 8,
            "retry_backoff_s": 0.05,
        },
    }
    if redis_url:
        policy["redis"] = {"url": redis_url, "key_prefix": "kill9"}
    path.write_text(yaml.safe_dump(policy))


def start_worker(policy: Path, owner: str, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.batch_worker", "--config", str(policy), "--owner", owner],
        stdout=open(log, "ab"),  # noqa: SIM115 - owned by the child
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    return proc


async def create_batch(policy_path: Path) -> tuple[str, list[str]]:
    """Upload the batch and create it through a service of the test's own (its loop never runs)."""
    policy = load_policy(policy_path)
    client = redis.asyncio.from_url(policy.redis.url) if policy.redis.url else None
    store = await open_store(policy.batch, client, policy.redis.key_prefix)
    files = FileStore(policy.batch.dir, policy.batch.limits)

    async def no_send(*_: Any) -> tuple[int, Any]:
        raise AssertionError("the test's own service sends nothing")

    service = BatchService(
        policy.batch,
        store=store,
        files=files,
        fleet=StaticFleet({"sim-llama": ["r0", "r1"]}),
        send=no_send,
        load=lambda _: None,
        max_line_bytes=1 << 20,
    )
    wl = make_batch(
        seed=9, requests=LINES, templates=6, system_tokens=(200, 400), user_tokens=(5, 20), max_tokens=(4, 8)
    )
    up = await files.upload("acme", "in.jsonl", "batch", chunks(wl.jsonl()))
    obj = await service.create("acme", {"input_file_id": up.id, "endpoint": URL, "completion_window": "24h"})
    await store.close()
    if client is not None:
        await client.aclose()
    return obj["id"], [line["custom_id"] for line in wl.lines]


class State:
    """Reads a batch's state straight from the store the workers use."""

    def __init__(self, tmp: Path, batch_id: str, redis_url: str | None):
        self.batch_id, self.tmp = batch_id, tmp
        self.r = redis.Redis.from_url(redis_url) if redis_url else None

    def recorded(self) -> int:
        if self.r is not None:
            return int(self.r.hlen(f"kill9:batch:{{{self.batch_id}}}:r"))
        with sqlite3.connect(self.tmp / "jobs.db") as con:
            return con.execute(
                "SELECT COUNT(*) FROM results WHERE batch_id = ?", (self.batch_id,)
            ).fetchone()[0]

    def record(self) -> dict[str, Any]:
        if self.r is not None:
            return orjson.loads(self.r.get(f"kill9:batch:{{{self.batch_id}}}:o"))
        with sqlite3.connect(self.tmp / "jobs.db") as con:
            return orjson.loads(
                con.execute("SELECT obj FROM batches WHERE id = ?", (self.batch_id,)).fetchone()[0]
            )

    def owner(self) -> str | None:
        if self.r is not None:
            raw = self.r.get(f"kill9:batch:{{{self.batch_id}}}:l")
            return raw.decode() if raw else None
        with sqlite3.connect(self.tmp / "jobs.db") as con:
            return con.execute("SELECT owner FROM batches WHERE id = ?", (self.batch_id,)).fetchone()[0]


def wait_for(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def sim_requests(urls: list[str]) -> int:
    return sum(httpx.get(u + "/sim/stats").json()["requests"] for u in urls)


def check_output(tmp: Path, state: State, custom_ids: list[str]) -> None:
    rec = state.record()
    assert rec["status"] == "completed" and rec["final_counts"] == [LINES, 0]
    files = FileStore(tmp / "files", load_policy(tmp / "policy.yaml").batch.limits)
    path = files.content_path("acme", rec["output_file_id"])
    assert path is not None
    out = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert Counter(x["custom_id"] for x in out) == Counter(custom_ids)  # each exactly once
    assert all(x["response"]["status_code"] == 200 for x in out)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "redis"])
def test_kill9_mid_batch_then_another_process_finishes_it_exactly_once(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if store == "redis" else None
    sim, urls = start_sim(
        2, extra=["--mode", "simple", "--decode-s-per-token", "0.03", "--overhead-s", "0.01"]
    )
    with running(sim):
        policy = tmp_path / "policy.yaml"
        write_policy(policy, urls, tmp_path, store, redis_url)
        batch_id, custom_ids = asyncio.run(create_batch(policy))
        state = State(tmp_path, batch_id, redis_url)
        log = tmp_path / "workers.log"
        first = start_worker(policy, "pod-a", log)
        other = start_worker(policy, "pod-b", log) if store == "redis" else None
        procs = [p for p in (first, other) if p is not None]
        try:
            wait_for(lambda: state.owner() is not None, 20, "a worker to claim the batch")
            holder_name = state.owner()
            holder = first if holder_name == "pod-a" else other
            assert holder is not None
            wait_for(lambda: state.recorded() >= 30, 30, "30 answered lines")
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            assert holder.returncode == -signal.SIGKILL
            time.sleep(0.2)  # let the replicas receive what the killed worker had already written
            at_kill = state.recorded()
            sent_at_kill = sim_requests(urls)
            assert 30 <= at_kill < LINES, "the kill must land mid-batch"
            assert state.record()["status"] == "in_progress"
            if store == "sqlite":  # the restart of the killed process, on the same file
                procs.append(start_worker(policy, "pod-a-restarted", log))
            wait_for(lambda: state.record()["status"] == "completed", 60, "the batch to complete")
            assert state.owner() is None  # an ended batch holds no lease
            check_output(tmp_path, state, custom_ids)
            total = sim_requests(urls)
            in_flight_at_kill = sent_at_kill - at_kill
            assert 0 <= in_flight_at_kill <= SLOTS
            assert total == LINES + in_flight_at_kill  # only the lines cut off by the kill ran twice
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    try:
                        p.wait(10)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait(5)
            print(log.read_text()[-3000:])
