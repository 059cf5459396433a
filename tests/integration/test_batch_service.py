"""The batch service end to end inside one process: real simulator replicas on sockets, real SQLite
files and a real Redis, a real file directory. Lifecycle, validation, tenants, cancel, expiry, resume."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import redis.asyncio as aioredis

from bench.batch_workload import URL
from bench.oracle import oracle
from config.batch import BatchConfig
from gateway.batch.files import FileStore
from gateway.batch.objects import line_id
from gateway.batch.runner import BatchLine, Send, Slot
from gateway.batch.service import BatchService
from gateway.batch.store import JobStore
from gateway.batch.store_redis import RedisJobStore
from gateway.batch.store_sqlite import SqliteJobStore
from gateway.errors import GatewayError
from router.batch_plan import reserved_for_online
from router.types import OnlineReserve
from sim.config import SimConfig
from sim.fleet import Fleet, start_replicas
from tests.support.batch import StaticFleet, chunks, http_send, small_batch, with_a_bad_line

MODEL = "sim-llama"


@dataclass
class Env:
    service: BatchService
    files: FileStore
    sim: Fleet
    offset: list[float]  # added to the service's clock (expiry tests)

    async def upload(self, tenant: str, data: bytes) -> str:
        return (await self.files.upload(tenant, "in.jsonl", "batch", chunks(data))).id

    async def create(self, tenant: str, file_id: str, **extra: Any) -> dict[str, Any]:
        return await self.service.create(
            tenant, {"input_file_id": file_id, "endpoint": URL, "completion_window": "24h", **extra}
        )

    async def wait(self, tenant: str, batch_id: str, *statuses: str, timeout: float = 30.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            obj = await self.service.retrieve(tenant, batch_id)
            if obj["status"] in statuses:
                return obj
            assert time.monotonic() < deadline, f"batch still {obj['status']}"
            await asyncio.sleep(0.02)

    def read(self, tenant: str, file_id: str | None) -> list[dict[str, Any]]:
        assert file_id is not None
        path = self.files.content_path(tenant, file_id)
        assert path is not None
        return [orjson.loads(x) for x in path.read_bytes().splitlines()]

    def sim_requests(self) -> int:
        return sum(r.counters.requests for r in self.sim.replicas)


async def open_store(
    kind: str, tmp_path: Path, redis_url: str | None
) -> tuple[JobStore, aioredis.Redis | None]:
    if kind == "sqlite":
        return await SqliteJobStore.open(str(tmp_path / "jobs.db")), None
    assert redis_url is not None
    client = aioredis.from_url(redis_url)
    return RedisJobStore(client, key_prefix="t"), client


@asynccontextmanager
async def batch_env(
    tmp_path: Path,
    kind: str = "sqlite",
    redis_url: str | None = None,
    wrap: Callable[[Send], Send] | None = None,
    sim: Fleet | None = None,
    run: bool = True,
    **cfg: Any,
) -> AsyncIterator[Env]:
    own_sim = sim is None
    sim = sim or await start_replicas([SimConfig(speed=0.0) for _ in range(2)], base_port=0)
    cfg = {"poll_s": 0.05, "lease_ttl_s": 3, "share": 0.5, "replica_slots": 8, **cfg}
    config = BatchConfig(enabled=True, dir=str(tmp_path / "files"), **cfg)
    store, client = await open_store(kind, tmp_path, redis_url)
    files = FileStore(config.dir, config.limits)
    offset = [0.0]
    session = aiohttp.ClientSession()
    send = http_send(session, {f"r{i}": u for i, u in enumerate(sim.urls)})
    service = BatchService(
        config,
        store=store,
        files=files,
        fleet=StaticFleet({MODEL: [f"r{i}" for i in range(len(sim.urls))]}),
        send=wrap(send) if wrap else send,
        load=lambda _model, _replica: None,
        max_line_bytes=1 << 20,
        clock=lambda: time.time() + offset[0],
    )
    loop = asyncio.create_task(service.run()) if run else None
    try:
        yield Env(service, files, sim, offset)
    finally:
        await service.close()
        if loop is not None:
            await loop
        await session.close()
        await store.close()
        if client is not None:
            await client.aclose()
        if own_sim:
            await sim.stop()


class Gate:
    """Wraps a send: lines past the first ``free`` wait until ``open``; counts what is held."""

    def __init__(self, free: int) -> None:
        self.free, self.sent, self.held = free, 0, 0
        self.event = asyncio.Event()

    def __call__(self, send: Send) -> Send:
        async def gated(line: BatchLine, slot: Slot) -> tuple[int, Any]:
            self.sent += 1
            if self.sent > self.free:
                self.held += 1
                await self.event.wait()
            return await send(line, slot)

        return gated


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_batch_runs_to_completed_with_each_custom_id_answered_once(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if kind == "redis" else None
    wl = small_batch()
    data = with_a_bad_line(wl)
    async with batch_env(tmp_path, kind, redis_url) as env:
        fid = await env.upload("acme", data)
        created = await env.create("acme", fid, metadata={"job": "nightly"})
        assert created["status"] == "validating" and created["request_counts"] == {
            "total": 0,
            "completed": 0,
            "failed": 0,
        }
        assert created["expires_at"] - created["created_at"] == 86_400 and created["metadata"] == {
            "job": "nightly"
        }
        done = await env.wait("acme", created["id"], "completed", "failed")
        assert done["status"] == "completed", done["errors"]
        assert done["request_counts"] == {"total": 61, "completed": 60, "failed": 1}
        assert done["created_at"] <= done["in_progress_at"] <= done["finalizing_at"] <= done["completed_at"]
        assert done["model"] == MODEL and done["errors"] is None

        out = env.read("acme", done["output_file_id"])
        assert [x["custom_id"] for x in out] == [
            line["custom_id"] for line in wl.lines
        ]  # once each, input order
        for x in out:
            assert x["id"] == x["response"]["request_id"] == line_id(created["id"], x["custom_id"])
            assert x["error"] is None and x["response"]["status_code"] == 200
            assert x["response"]["body"]["object"] == "chat.completion"
        (err,) = env.read("acme", done["error_file_id"])
        assert err["custom_id"] == "bad-one" and err["response"]["status_code"] == 400
        assert env.sim_requests() == 61  # nothing sent twice

        usage = done["usage"]
        prompt = sum(x["response"]["body"]["usage"]["prompt_tokens"] for x in out)
        cached = sum(x["response"]["body"]["usage"]["prompt_tokens_details"]["cached_tokens"] for x in out)
        assert usage["input_tokens"] == prompt and usage["input_tokens_details"]["cached_tokens"] == cached
        assert usage["total_tokens"] == prompt + usage["output_tokens"]
        # Shared-prefix order: the replicas' own prefix caches hit nearly all an oracle could.
        best = oracle([line["body"] for line in wl.lines]).hit_tokens
        assert cached >= 0.9 * best, (cached, best)
        assert (env.service.stats.completed, env.service.stats.failed) == (60, 1)

        # Each template ran on one replica (the plan cuts at most one between the two).
        replicas_of: dict[str, set[int]] = {}
        for i, rep in enumerate(env.sim.replicas):
            for body in rep.requests_log:
                replicas_of.setdefault(body["messages"][0]["content"][:200], set()).add(i)
        assert sum(len(r) for r in replicas_of.values()) <= len(replicas_of) + 1

        listed = await env.service.list("acme")
        assert [b["id"] for b in listed["data"]] == [created["id"]] and not listed["has_more"]
        files, _ = await env.files.list("acme")
        assert {f.purpose for f in files} == {"batch", "batch_output"} and len(files) == 3


async def test_validation_errors_fail_the_batch_before_anything_runs(tmp_path: Path) -> None:
    wl = small_batch(requests=8, templates=2)
    lines = wl.jsonl().splitlines()
    lines[2] = b"{oops"
    lines[5] = lines[4]  # a duplicate custom_id
    async with batch_env(tmp_path) as env:
        fid = await env.upload("acme", b"\n".join(lines) + b"\n")
        created = await env.create("acme", fid)
        failed = await env.wait("acme", created["id"], "failed", "completed")
        assert failed["status"] == "failed" and failed["failed_at"] is not None
        assert [(e["line"], e["code"]) for e in failed["errors"]["data"]] == [
            (3, "invalid_json_line"),
            (6, "duplicate_custom_id"),
        ]
        assert failed["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        assert failed["output_file_id"] is None and env.sim_requests() == 0


async def test_tenants_see_only_their_own_batches_and_files(tmp_path: Path) -> None:
    async with batch_env(tmp_path) as env:
        fid = await env.upload("acme", small_batch(requests=4, templates=1).jsonl())
        mine = await env.create("acme", fid)
        with pytest.raises(GatewayError) as err:
            await env.create("globex", fid)
        assert (err.value.status, err.value.param) == (400, "input_file_id")
        for call in (env.service.retrieve, env.service.cancel):
            with pytest.raises(GatewayError) as err:
                await call("globex", mine["id"])
            assert err.value.status == 404
        assert (await env.service.list("globex"))["data"] == []
        with pytest.raises(GatewayError) as err:
            await env.service.delete_file("globex", fid)
        assert err.value.status == 404
        await env.wait("acme", mine["id"], "completed")
        assert (await env.service.list("acme"))["data"][0]["id"] == mine["id"]


async def test_create_checks_its_parameters(tmp_path: Path) -> None:
    async with batch_env(tmp_path, limits={"max_active_batches": 1}) as env:
        fid = await env.upload("acme", small_batch(requests=4, templates=1).jsonl())
        base = {"input_file_id": fid, "endpoint": URL, "completion_window": "24h"}
        cases = [
            ({**base, "priority": 1}, 400, "priority"),
            ({k: v for k, v in base.items() if k != "endpoint"}, 400, "endpoint"),
            ({**base, "endpoint": "/v1/responses"}, 400, "endpoint"),
            ({**base, "completion_window": "1h"}, 400, "completion_window"),
            ({**base, "metadata": {f"k{i}": "v" for i in range(17)}}, 400, "metadata"),
            ({**base, "metadata": {"k": 1}}, 400, "metadata"),
            ({**base, "input_file_id": "file-" + "0" * 32}, 400, "input_file_id"),
            ({**base, "input_file_id": 7}, 400, "input_file_id"),
        ]
        for body, status, param in cases:
            with pytest.raises(GatewayError) as err:
                await env.service.create("acme", body)
            assert (err.value.status, err.value.param) == (status, param), body
        first = await env.service.create("acme", base)
        with pytest.raises(GatewayError) as err:
            await env.service.create("acme", base)
        assert (err.value.status, err.value.code) == (429, "too_many_batches")
        with pytest.raises(GatewayError) as err:
            await env.service.delete_file("acme", fid)
        assert (err.value.status, err.value.code) == (409, "file_in_use")
        await env.wait("acme", first["id"], "completed")
        assert (await env.service.delete_file("acme", fid))["deleted"] is True
        with pytest.raises(GatewayError) as err:
            await env.service.list("acme", limit=101)
        assert err.value.status == 400


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_cancel_keeps_partial_results_and_settles_the_rest(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    redis_url = request.getfixturevalue("redis_url") if kind == "redis" else None
    gate = Gate(free=10)
    async with batch_env(tmp_path, kind, redis_url, wrap=gate) as env:
        wl = small_batch(requests=40)
        created = await env.create("acme", await env.upload("acme", wl.jsonl()))
        running = await env.wait("acme", created["id"], "in_progress")
        while (await env.service.retrieve("acme", created["id"]))["request_counts"][
            "completed"
        ] < 10 or not gate.held:
            await asyncio.sleep(0.02)
        cancelling = await env.service.cancel("acme", running["id"])
        assert cancelling["status"] in ("cancelling", "cancelled") and cancelling["cancelling_at"] is not None
        done = await env.wait("acme", created["id"], "cancelled")
        assert (await env.service.cancel("acme", created["id"]))["status"] == "cancelled"  # idempotent
        counts = done["request_counts"]
        assert counts["completed"] == 10 and counts["completed"] + counts["failed"] == counts["total"] == 40
        out, err = env.read("acme", done["output_file_id"]), env.read("acme", done["error_file_id"])
        assert len(out) == 10 and all(x["response"]["status_code"] == 200 for x in out)
        assert {x["error"]["code"] for x in err} == {"batch_cancelled"} and all(
            x["response"] is None for x in err
        )
        assert sorted(x["custom_id"] for x in out + err) == sorted(line["custom_id"] for line in wl.lines)
        gate.event.set()
    async with batch_env(tmp_path, kind, redis_url) as env:
        fid = await env.upload("acme", small_batch(requests=2, templates=1).jsonl())
        finished = await env.wait("acme", (await env.create("acme", fid))["id"], "completed")
        with pytest.raises(GatewayError) as exc:
            await env.service.cancel("acme", finished["id"])
        assert (exc.value.status, exc.value.code) == (409, "batch_not_cancellable")


async def test_expiry_mid_run_keeps_answers_and_marks_the_rest_expired(tmp_path: Path) -> None:
    gate = Gate(free=6)
    async with batch_env(tmp_path, wrap=gate) as env:
        wl = small_batch(requests=30)
        created = await env.create("acme", await env.upload("acme", wl.jsonl()))
        env.offset[0] = 86_400 - 1.5  # the window ends in 1.5 s
        done = await env.wait("acme", created["id"], "expired", timeout=20)
        assert done["expired_at"] is not None and done["request_counts"]["total"] == 30
        assert done["request_counts"]["completed"] == 6 and done["request_counts"]["failed"] == 24
        err = env.read("acme", done["error_file_id"])
        assert len(err) == 24 and {x["error"]["code"] for x in err} == {"batch_expired"}
        assert len(env.read("acme", done["output_file_id"])) == 6
        gate.event.set()


async def test_a_batch_past_its_window_before_it_runs_expires_whole(tmp_path: Path) -> None:
    async with batch_env(tmp_path, run=False) as env:  # created, then nobody runs it for a day
        created = await env.create(
            "acme", await env.upload("acme", small_batch(requests=5, templates=1).jsonl())
        )
    async with batch_env(tmp_path) as env:
        env.offset[0] = 90_000
        done = await env.wait("acme", created["id"], "expired")
        assert done["request_counts"] == {"total": 0, "completed": 0, "failed": 0}
        assert done["output_file_id"] is None and env.sim_requests() == 0


async def test_a_restarted_service_resumes_without_redoing_answered_lines(tmp_path: Path) -> None:
    sim = await start_replicas([SimConfig(speed=0.0) for _ in range(2)], base_port=0)
    try:
        gate = Gate(free=15)
        async with batch_env(tmp_path, wrap=gate, sim=sim) as env:
            wl = small_batch(requests=50)
            created = await env.create("acme", await env.upload("acme", wl.jsonl()))
            while (await env.service.retrieve("acme", created["id"]))["request_counts"]["completed"] < 15:
                await asyncio.sleep(0.02)
            while not gate.held:
                await asyncio.sleep(0.01)
        # closed mid-run: the held lines were cut off, the lease released
        first = sum(r.counters.requests for r in sim.replicas)
        assert first == 15
        async with batch_env(tmp_path, sim=sim, engine_priority=7) as env:
            done = await env.wait("acme", created["id"], "completed")
            assert done["request_counts"] == {"total": 50, "completed": 50, "failed": 0}
            out = env.read("acme", done["output_file_id"])
            assert Counter(x["custom_id"] for x in out) == Counter(line["custom_id"] for line in wl.lines)
            assert env.sim_requests() == 50  # the 15 answered lines were not sent again
            priorities = Counter(b.get("priority") for r in sim.replicas for b in r.requests_log)
            assert priorities == {None: 15, 7: 35}  # the resumed run sends the pool's engine priority
    finally:
        await sim.stop()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_process_that_runs_no_batch_learns_the_online_reserve_from_the_store(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Two processes on one store (the workers of --workers N, or pods): A runs the batch, B only serves
    online traffic; B's online requests prefer the same reserve while the batch runs, and stop after."""
    redis_url = request.getfixturevalue("redis_url") if kind == "redis" else None
    sim = await start_replicas([SimConfig(speed=0.0) for _ in range(3)], base_port=0)
    reserve = reserved_for_online(["r0", "r1", "r2"], 1, MODEL)
    gate = Gate(free=10)
    try:
        async with (
            batch_env(tmp_path, kind, redis_url, wrap=gate, sim=sim, online_replicas=1) as a,
            batch_env(tmp_path, kind, redis_url, sim=sim, run=False, online_replicas=1) as b,
        ):
            assert b.service.watches()
            watch = asyncio.create_task(b.service.watch())
            assert b.service.online_reserve(MODEL) is None
            created = await a.create("acme", await a.upload("acme", small_batch(requests=30).jsonl()))
            while not gate.held:
                await asyncio.sleep(0.01)
            assert a.service.online_reserve(MODEL) == OnlineReserve(reserve, 8)
            deadline = time.monotonic() + 5
            while b.service.online_reserve(MODEL) != OnlineReserve(reserve, 8):  # B's next read of the store
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            assert b.service.online_reserve("other-model") is None
            (kept,) = reserve
            assert sim.replicas[int(kept[1:])].counters.requests == 0  # no line ran on the reserve
            gate.event.set()
            await a.wait("acme", created["id"], "completed")
            while b.service.online_reserve(MODEL):  # lifted once the batch has left in_progress
                assert time.monotonic() < deadline + 10
                await asyncio.sleep(0.02)
            assert a.service.online_reserve(MODEL) is None
        await watch
    finally:
        await sim.stop()
