"""Both job stores (a real SQLite file, a real Redis): records, checked moves, exactly-once results,
leases. Each test opens two stores on the same state, as two processes or pods would."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis

from gateway.batch.objects import BatchRecord, LineResult, answered, unanswered
from gateway.batch.store import JobStore
from gateway.batch.store_redis import RedisJobStore
from gateway.batch.store_sqlite import SqliteJobStore


@pytest.fixture(params=["sqlite", "redis"])
async def pods(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Callable]:
    """A factory of store instances sharing one state; all closed at the end."""
    opened: list[JobStore] = []
    clients: list[aioredis.Redis] = []

    async def make() -> JobStore:
        if request.param == "sqlite":
            store: JobStore = await SqliteJobStore.open(str(tmp_path / "jobs.db"))
        else:
            client = aioredis.from_url(request.getfixturevalue("redis_url"))
            clients.append(client)
            store = RedisJobStore(client, key_prefix="t")
        opened.append(store)
        return store

    yield make
    for s in opened:
        await s.close()
    for c in clients:
        await c.aclose()


def rec(
    batch_id: str, tenant: str = "acme", status: str = "validating", created_at: int = 100
) -> BatchRecord:
    return BatchRecord(
        id=batch_id,
        tenant=tenant,
        endpoint="/v1/chat/completions",
        input_file_id="file-" + "0" * 32,
        completion_window="24h",
        status=status,
        created_at=created_at,
        expires_at=created_at + 86_400,
        metadata={"k": "v"},
    )


async def test_records_list_newest_first_per_tenant(pods: Callable) -> None:
    a, b = await pods(), await pods()
    for i in range(5):
        await a.create(rec(f"batch_{i}", created_at=100 + i))
    await a.create(rec("batch_other", tenant="globex"))
    got = await b.get("batch_3")
    assert got == rec("batch_3", created_at=103)
    assert await b.get("batch_missing") is None
    page, more = await b.list("acme", after=None, limit=2)
    assert [r.id for r in page] == ["batch_4", "batch_3"] and more
    page, more = await b.list("acme", after="batch_3", limit=10)
    assert [r.id for r in page] == ["batch_2", "batch_1", "batch_0"] and not more
    assert (await b.list("acme", after="batch_other", limit=10))[0] == []  # another tenant's id is no cursor
    assert [r.id for r in (await b.list("globex", after=None, limit=10))[0]] == ["batch_other"]
    assert {r.id for r in await b.active("acme")} == {f"batch_{i}" for i in range(5)}


async def test_moves_follow_the_status_machine_and_one_of_two_racers_wins(pods: Callable) -> None:
    a, b = await pods(), await pods()
    await a.create(rec("batch_1"))
    assert await b.count_by_status() == {"validating": 1}
    assert await a.move("batch_1", "completed", 200) is None  # validating cannot complete
    moved = await a.move("batch_1", "in_progress", 150, model="m", total=10)
    assert moved is not None and (moved.status, moved.in_progress_at, moved.model, moved.total) == (
        "in_progress",
        150,
        "m",
        10,
    )
    assert await b.get("batch_1") == moved
    results = await asyncio.gather(
        a.move("batch_1", "finalizing", 160), b.move("batch_1", "cancelling", 160), return_exceptions=True
    )
    assert sum(r is not None for r in results) == 1, results
    winner = next(r for r in results if r is not None)
    assert isinstance(winner, BatchRecord) and (await a.get("batch_1")).status == winner.status
    end = "completed" if winner.status == "finalizing" else "cancelled"
    done = await b.move("batch_1", end, 170, output_file_id="file-x", final_counts=(9, 1))
    assert done is not None and done.final_counts == (9, 1) and getattr(done, f"{end}_at") == 170
    assert await a.active("acme") == [] and await a.runnable() == []
    assert await a.move("batch_1", "failed", 180) is None  # ended is ended
    assert not await a.claim("batch_1", "pod-a", 30)
    await a.create(rec("batch_2"))
    assert await b.count_by_status() == {end: 1, "validating": 1}  # the racers moved it once


async def test_each_custom_id_is_recorded_once(pods: Callable) -> None:
    a, b = await pods(), await pods()
    await a.create(rec("batch_1"))
    first = answered("batch_1", "req-7", 7, 200, {"choices": [], "usage": {"prompt_tokens": 3}})
    assert await a.record("batch_1", [first]) == 1
    second = answered("batch_1", "req-7", 7, 200, {"choices": ["a second answer"]})
    assert await b.record("batch_1", [second]) == 0  # a re-run after a takeover changes nothing
    batch = [
        answered("batch_1", f"req-{i}", i, 200 if i % 4 else 500, {"i": i})
        for i in range(1200, 0, -1)
        if i != 7
    ]
    assert await b.record("batch_1", batch) == 1199
    assert (
        await a.record("batch_1", [*batch[:10], unanswered("batch_1", "req-7", 7, "batch_expired", "late")])
        == 0
    )
    assert await a.counts("batch_1") == (900, 300)
    assert await b.recorded("batch_1") == {f"req-{i}" for i in range(1, 1201)}
    got = [r async for r in b.results("batch_1")]
    assert [r.line for r in got] == list(range(1, 1201))  # input order, across pages
    assert got[6] == first
    assert all(r.ok == (r.line % 4 != 0) for r in got)
    await a.drop_results("batch_1")
    assert await b.counts("batch_1") == (0, 0) and [r async for r in b.results("batch_1")] == []
    assert await b.recorded("batch_1") == set()


async def test_leases_one_holder_renewal_expiry_release(pods: Callable) -> None:
    a, b = await pods(), await pods()
    await a.create(rec("batch_2"))
    await a.create(rec("batch_1"))
    assert await a.runnable() == ["batch_2", "batch_1"]  # oldest first
    # Each "still held" below is asserted under a lease that cannot run out meanwhile, and each lease
    # meant to run out is waited out: the old 0.4 s leases, renewed 0.25 s apart, left 0.15 s for two
    # calls, which a test worker descheduled on a loaded machine can exceed.
    assert await a.claim("batch_1", "pod-a", 0.3)
    assert await a.claim("batch_1", "pod-a", 30)  # a renewal: the holder's claim sets a new expiry
    assert not await b.claim("batch_1", "pod-b", 30)
    assert await b.runnable() == ["batch_2"]
    await asyncio.sleep(0.5)  # past the first lease
    assert not await b.claim("batch_1", "pod-b", 30)  # the renewal kept it
    await b.release("batch_1", "pod-b")  # not b's to release: nothing happens
    assert not await b.claim("batch_1", "pod-b", 30)
    assert await a.claim("batch_1", "pod-a", 0.3)  # a's last renewal, then pod-a dies
    await asyncio.sleep(0.5)  # its lease runs out
    assert await b.runnable() == ["batch_2", "batch_1"]
    assert await b.claim("batch_1", "pod-b", 30)
    assert not await a.claim("batch_1", "pod-a", 30)
    await b.release("batch_1", "pod-b")
    assert await a.claim("batch_1", "pod-a", 30)


async def test_running_models_are_those_of_leased_batches_in_progress(pods: Callable) -> None:
    a, b = await pods(), await pods()
    for batch_id, model in (("batch_1", "m1"), ("batch_2", "m2"), ("batch_3", "m1")):
        await a.create(dataclasses.replace(rec(batch_id), model=model))
    assert await b.running_models() == set()
    assert await a.claim("batch_1", "pod-a", 30)  # validating under a lease: not running yet
    assert await b.running_models() == set()
    assert await a.move("batch_1", "in_progress", 101) is not None
    assert await a.move("batch_2", "in_progress", 101) is not None  # in progress, no lease: nobody runs it
    assert await b.running_models() == {"m1"}
    assert await a.claim("batch_2", "pod-a", 30)
    assert await b.running_models() == {"m1", "m2"}
    assert await a.claim("batch_2", "pod-a", 0.3)  # its holder's last renewal, then it dies
    await asyncio.sleep(0.5)  # its lease ran out
    assert await b.running_models() == {"m1"}
    assert await a.move("batch_1", "finalizing", 102) is not None
    assert await b.running_models() == set()


def test_result_lines_have_openai_shapes() -> None:
    ok = answered("batch_1", "c1", 1, 200, {"id": "chatcmpl-1"})
    assert ok.ok and orjson.loads(ok.record) == {
        "id": ok_id(ok),
        "custom_id": "c1",
        "response": {"status_code": 200, "request_id": ok_id(ok), "body": {"id": "chatcmpl-1"}},
        "error": None,
    }
    bad = answered("batch_1", "c2", 2, 400, {"error": {"message": "bad"}})
    assert not bad.ok and orjson.loads(bad.record)["response"]["status_code"] == 400
    gone = unanswered("batch_1", "c3", 3, "batch_expired", "too late")
    assert orjson.loads(gone.record)["response"] is None
    assert orjson.loads(gone.record)["error"] == {"code": "batch_expired", "message": "too late"}
    assert ok_id(answered("batch_1", "c1", 1, 500, {})) == ok_id(ok)  # the id is the line's, not the answer's
    assert ok_id(answered("batch_2", "c1", 1, 200, {})) != ok_id(ok)


def ok_id(r: LineResult) -> str:
    return orjson.loads(r.record)["id"]
