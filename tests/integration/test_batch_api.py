"""The Files and Batches API of a real gateway (real sockets) in front of simulated replicas, driven by
the real ``openai`` client: the whole cycle, validation errors by line number, tenant isolation, expiry,
cancel, the batch's share of each replica (from the simulator's own counts), billing of batch lines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from openai import AsyncOpenAI

from bench.batch_workload import URL, make_batch
from cache.billing.pricing import (
    FULL_PRICE_BP,
    bill,
    prices_from_config,
    rules_from_config,
    usage_from_response,
)
from gateway.batch.bridge import PoolFleet
from gateway.batch.objects import line_id
from router.batch_plan import reserved_for_online
from router.types import OnlineReserve
from tests.support.batch import KEYS, MODEL, SLOW, batch_policy, small_batch, with_a_bad_line
from tests.support.stack import Gateway, gateway, policy_for, sim_fleet


@asynccontextmanager
async def batch_gateway(
    tmp: Path, n: int = 2, sim: dict[str, Any] | None = None, **kw: Any
) -> AsyncIterator[Any]:
    async with sim_fleet(n, **(sim or {})) as fleet, gateway(batch_policy(fleet.urls, tmp, **kw)) as gw:
        yield fleet, gw


_CLIENTS: list[AsyncOpenAI] = []


@pytest.fixture(autouse=True)
async def _close_clients() -> AsyncIterator[None]:
    yield
    while _CLIENTS:
        await _CLIENTS.pop().close()


def client(gw: Gateway, tenant: str | None = None, key: str | None = None) -> AsyncOpenAI:
    """An openai client of ``tenant`` (or with ``key``), closed after the test."""
    c = AsyncOpenAI(
        base_url=gw.url + "/v1", api_key=key or (KEYS[tenant] if tenant else "none"), max_retries=0
    )
    _CLIENTS.append(c)
    return c


async def wait(c: AsyncOpenAI, batch_id: str, *statuses: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        b = await c.batches.retrieve(batch_id)
        if b.status in statuses:
            return b
        assert time.monotonic() < deadline, f"batch still {b.status}"
        await asyncio.sleep(0.03)


async def lines_of(c: AsyncOpenAI, file_id: str | None) -> list[dict[str, Any]]:
    assert file_id is not None
    return [orjson.loads(x) for x in (await c.files.content(file_id)).content.splitlines()]


async def test_the_openai_client_through_the_whole_cycle(tmp_path: Path) -> None:
    wl = small_batch(requests=40)
    data = with_a_bad_line(wl)
    async with batch_gateway(tmp_path) as (fleet, gw):
        c = client(gw)
        up = await c.files.create(file=("nightly.jsonl", data), purpose="batch")
        assert (up.object, up.purpose, up.bytes, up.filename, up.status) == (
            "file",
            "batch",
            len(data),
            "nightly.jsonl",
            "processed",
        )
        assert (await c.files.retrieve(up.id)).id == up.id
        assert (await c.files.content(up.id)).content == data
        created = await c.batches.create(
            input_file_id=up.id, endpoint=URL, completion_window="24h", metadata={"job": "nightly"}
        )
        assert created.status == "validating" and created.metadata == {"job": "nightly"}
        with pytest.raises(openai.ConflictError):  # the input of a live batch
            await c.files.delete(up.id)
        done = await wait(c, created.id, "completed", "failed")
        assert done.status == "completed", done.errors
        assert (done.request_counts.total, done.request_counts.completed, done.request_counts.failed) == (
            41,
            40,
            1,
        )
        assert done.model == MODEL and done.usage is not None

        out = await lines_of(c, done.output_file_id)
        assert [x["custom_id"] for x in out] == [
            line["custom_id"] for line in wl.lines
        ]  # once each, in order
        assert all(x["response"]["status_code"] == 200 and x["error"] is None for x in out)
        assert all(x["id"] == x["response"]["request_id"] == line_id(created.id, x["custom_id"]) for x in out)
        (err,) = await lines_of(c, done.error_file_id)
        assert err["custom_id"] == "bad-one" and err["response"]["status_code"] == 400
        assert err["response"]["body"]["error"]["param"] == "max_tokens"  # the request path's own 400
        assert sum(r.counters.requests for r in fleet.replicas) == 40  # the bad line never left the gateway

        # Billing: one ledger row per line at the batch price, source batch (OpenAI charges half).
        cfg = gw.state.policy.billing
        expected = sum(
            bill(
                usage_from_response(x["response"]["body"]["usage"], None),
                prices_from_config(cfg, MODEL),
                rules_from_config(cfg, MODEL),
                None,
                "batch",
                request_id=x["id"],
                tenant="default",
                model=MODEL,
                ts_ms=0,
                price_factor_bp=FULL_PRICE_BP // 2,
            ).total_micros
            for x in out
        )
        assert gw.process.metering is not None
        (row,) = await gw.process.metering.ledger.query(group_by=("source",))
        assert (row.source, row.requests, row.cost_micros) == ("batch", 40, expected) and expected > 0
        assert row.tokens.implicit_hit > 0  # lines sharing a prefix ran where it was cached

        # Lists, and what a finished batch allows: deleting its input, not cancelling it.
        files = await c.files.list()
        assert {f.purpose for f in files.data} == {"batch", "batch_output"} and len(files.data) == 3
        assert [f.id for f in (await c.files.list(purpose="batch")).data] == [up.id]
        assert [b.id for b in (await c.batches.list()).data] == [created.id]
        with pytest.raises(openai.ConflictError):
            await c.batches.cancel(created.id)
        assert (await c.files.delete(up.id)).deleted is True
        with pytest.raises(openai.NotFoundError):
            await c.files.retrieve(up.id)

        async with aiohttp.ClientSession() as s, s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        assert 'prefix_gateway_batches{status="completed"} 1.0' in text
        assert 'prefix_gateway_batch_lines_total{outcome="completed"} 40.0' in text
        assert 'prefix_gateway_batch_lines_total{outcome="failed"} 1.0' in text
        assert 'reason="batch_plan"' in text


async def test_cancel_mid_run_keeps_the_answered_lines(tmp_path: Path) -> None:
    wl = small_batch(requests=60)
    async with batch_gateway(tmp_path, sim=SLOW) as (fleet, gw):
        c = client(gw)
        up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        while (await c.batches.retrieve(created.id)).request_counts.completed < 8:
            await asyncio.sleep(0.02)
        cancelling = await c.batches.cancel(created.id)
        assert cancelling.status in ("cancelling", "cancelled") and cancelling.cancelling_at is not None
        done = await wait(c, created.id, "cancelled")
        counts = done.request_counts
        assert 8 <= counts.completed < 60 and counts.completed + counts.failed == counts.total == 60
        out, err = await lines_of(c, done.output_file_id), await lines_of(c, done.error_file_id)
        assert len(out) == counts.completed and {x["error"]["code"] for x in err} == {"batch_cancelled"}
        assert sorted(x["custom_id"] for x in out + err) == sorted(line["custom_id"] for line in wl.lines)
        await asyncio.sleep(0.3)
        sent = sum(r.counters.requests for r in fleet.replicas)
        assert gw.process.batch is not None
        stats = gw.process.batch.stats
        async with aiohttp.ClientSession() as s, s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        upstream_errors = sum(
            float(row.rsplit(" ", 1)[1])
            for row in text.splitlines()
            if row.startswith("prefix_gateway_upstream_errors_total{")
        )
        # Nothing was sent after the cancel but what was in flight (the share: 8), and sends again of
        # lines a 5xx or a timeout had failed, by the batch runner or by the request path's own retry
        # (a loaded machine makes some).
        assert sent <= counts.completed + 8 + stats.retried + upstream_errors, (sent, stats, upstream_errors)


async def test_every_validation_error_is_named_with_its_line_number(tmp_path: Path) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4}
    good = {"custom_id": "ok-1", "method": "POST", "url": URL, "body": body}

    def line(**kw: Any) -> bytes:
        return orjson.dumps({**good, **kw})

    rows = [
        line(custom_id="ok-1"),  # 1
        b"{not json",  # 2
        b"[1, 2]",  # 3
        orjson.dumps({"method": "POST", "url": URL, "body": body}),  # 4: no custom_id
        line(custom_id="get", method="GET"),  # 5
        line(custom_id="other-url", url="/v1/embeddings"),  # 6
        line(custom_id="unknown-model", body={**body, "model": "no-such-model"}),  # 7
        line(custom_id="streamed", body={**body, "stream": True}),  # 8
        line(custom_id="ok-1"),  # 9: duplicate
        line(custom_id="huge", body={**body, "messages": [{"role": "user", "content": "x" * 3000}]}),  # 10
        line(custom_id="no-messages", body={"model": MODEL}),  # 11
        line(custom_id="second-model", body={**body, "model": "other-model"}),  # 12
        b"\xff\xfe not utf-8",  # 13
    ]
    expected = [
        (2, "invalid_json_line"),
        (3, "invalid_json_line"),
        (4, "missing_required_parameter"),
        (5, "invalid_request"),
        (6, "url_mismatch"),
        (7, "model_not_found"),
        (8, "invalid_request"),
        (9, "duplicate_custom_id"),
        (10, "line_too_large"),
        (11, "missing_required_parameter"),
        (12, "model_mismatch"),
        (13, "invalid_json_line"),
    ]
    async with sim_fleet(1) as fleet:
        policy = batch_policy(fleet.urls, tmp_path, limits={"max_line_bytes": 2048, "max_lines": 20})
        other = policy.models[0].model_copy(update={"name": "other-model"})
        policy = policy.model_copy(update={"models": [policy.models[0], other]})
        async with gateway(policy) as gw:
            c = client(gw)
            up = await c.files.create(file=("bad.jsonl", b"\n".join(rows) + b"\n"), purpose="batch")
            created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
            failed = await wait(c, created.id, "failed", "completed")
            assert failed.status == "failed" and failed.errors is not None
            assert [(e.line, e.code) for e in failed.errors.data] == expected
            assert "ok-1" in next(e.message for e in failed.errors.data if e.code == "duplicate_custom_id")
            assert failed.output_file_id is None and failed.request_counts.total == 0

            too_many = b"\n".join(line(custom_id=f"c{i}") for i in range(21))
            for data, code in ((b"", "empty_file"), (too_many, "too_many_tasks")):
                up = await c.files.create(file=("f.jsonl", data), purpose="batch")
                b = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
                b = await wait(c, b.id, "failed", "completed")
                assert b.status == "failed" and code in [e.code for e in b.errors.data], b.errors
            assert sum(r.counters.requests for r in fleet.replicas) == 0  # nothing half-run

            # The request checks of create and upload, in OpenAI's error shape.
            for kw, param in (
                (
                    {"input_file_id": "file-nope", "endpoint": URL, "completion_window": "24h"},
                    "input_file_id",
                ),
                (
                    {"input_file_id": up.id, "endpoint": "/v1/moderations", "completion_window": "24h"},
                    "endpoint",
                ),
                ({"input_file_id": up.id, "endpoint": URL, "completion_window": "1h"}, "completion_window"),
            ):
                with pytest.raises(openai.BadRequestError) as exc:
                    await c.batches.create(**kw)  # type: ignore[arg-type]
                assert exc.value.body["param"] == param  # type: ignore[index]
            with pytest.raises(openai.BadRequestError):
                await c.files.create(file=("x.jsonl", b"{}"), purpose="assistants")


async def test_uploads_are_streamed_within_their_limits(tmp_path: Path) -> None:
    async with batch_gateway(tmp_path, limits={"max_file_bytes": 4096}) as (_fleet, gw):
        c = client(gw)
        with pytest.raises(openai.APIStatusError) as exc:
            await c.files.create(file=("big.jsonl", b"x" * 10_000), purpose="batch")
        assert exc.value.status_code == 413 and exc.value.body["code"] == "file_too_large"  # type: ignore[index]
        assert (await c.files.list()).data == []  # nothing kept of it
        async with aiohttp.ClientSession() as s:
            form = aiohttp.FormData()
            form.add_field("file", b"{}", filename="a.jsonl")
            form.add_field("purpose", "batch")
            async with s.post(gw.url + "/v1/files", data=form) as r:  # the file before its purpose
                assert r.status == 400 and (await r.json())["error"]["param"] == "purpose"
            async with s.post(gw.url + "/v1/files", json={"purpose": "batch"}) as r:
                assert r.status == 415 and (await r.json())["error"]["code"] == "unsupported_media_type"
            form = aiohttp.FormData()
            form.add_field("purpose", "batch")
            form.add_field("file", b"{}", filename="a.jsonl")
            form.add_field("expires_after", "3600")
            async with s.post(gw.url + "/v1/files", data=form) as r:  # a part after the file
                assert r.status == 400
        assert (await c.files.list()).data == []


async def test_tenants_see_only_their_own_files_and_batches(tmp_path: Path) -> None:
    wl = small_batch(requests=6, templates=1)
    async with batch_gateway(tmp_path, tenants=True) as (_fleet, gw):
        acme, globex = client(gw, "acme"), client(gw, "globex")
        up = await acme.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        mine = await acme.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        done = await wait(acme, mine.id, "completed")
        for call in (
            globex.files.retrieve(up.id),
            globex.files.content(up.id),
            globex.files.delete(up.id),
            globex.files.content(done.output_file_id or ""),
            globex.batches.retrieve(mine.id),
            globex.batches.cancel(mine.id),
        ):
            with pytest.raises(openai.NotFoundError):  # another tenant's ids do not exist (never a 403)
                await call
        with pytest.raises(openai.BadRequestError) as exc:
            await globex.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        assert exc.value.body["code"] == "file_not_found"  # type: ignore[index]
        assert (await globex.files.list()).data == [] and (await globex.batches.list()).data == []
        assert len((await acme.files.list()).data) == 2 and len((await acme.batches.list()).data) == 1
        anonymous = client(gw, key="sk-wrong")
        with pytest.raises(openai.AuthenticationError):
            await anonymous.batches.list()
        with pytest.raises(openai.AuthenticationError):
            await anonymous.files.create(file=("in.jsonl", b"{}"), purpose="batch")
        # The lines ran as the tenant that created the batch.
        assert gw.process.metering is not None
        rows = await gw.process.metering.ledger.query(group_by=("tenant", "source"))
        assert [(r.tenant, r.source, r.requests) for r in rows] == [("acme", "batch", 6)]


async def test_expiry_keeps_the_answered_lines_and_marks_the_rest(tmp_path: Path) -> None:
    """600 lines of about 0.2 s each, 8 at a time, take 15 s; the window is 3 s."""
    wl = make_batch(seed=6, requests=600, templates=4, system_tokens=(300, 600), max_tokens=(8, 12))
    async with batch_gateway(tmp_path, sim=SLOW, completion_windows=["24h", "3s"]) as (_fleet, gw):
        c = client(gw)
        up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="3s")
        assert created.expires_at - created.created_at == 3
        done = await wait(c, created.id, "expired", "completed", timeout=30)
        assert done.status == "expired" and done.expired_at is not None
        counts = done.request_counts
        assert 0 < counts.completed < 600 and counts.completed + counts.failed == counts.total == 600
        err = await lines_of(c, done.error_file_id)
        assert {x["error"]["code"] for x in err} == {"batch_expired"} and len(err) == counts.failed
        assert len(await lines_of(c, done.output_file_id)) == counts.completed


async def test_a_batch_never_holds_more_than_its_share_of_a_replica(tmp_path: Path) -> None:
    """r1 is four times slower: r0 runs out of planned work and steals r1's lines (and may place some
    off the plan, past the bounded load); the simulator's own counts of requests in the replica never
    exceed the share (4)."""
    wl = small_batch(requests=120, templates=6)
    async with batch_gateway(tmp_path, sim=SLOW) as (fleet, gw):
        fleet.replicas[1].cfg.faults.slow_factor = 4.0
        peaks = [0, 0]
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                for i, rep in enumerate(fleet.replicas):
                    peaks[i] = max(peaks[i], rep.running + rep.waiting)
                await asyncio.sleep(0.001)

        sampler = asyncio.create_task(sample())
        c = client(gw)
        up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        done = await wait(c, created.id, "completed", timeout=60)
        stop.set()
        await sampler
        assert done.request_counts.completed == 120
        assert peaks == [4, 4]  # the share used, never exceeded
        assert sum(r.counters.requests for r in fleet.replicas) == 120
        assert fleet.replicas[0].counters.requests > len(wl) / 2  # the fast replica took over work
        assert gw.process.batch is not None and gw.process.batch.stats.stolen > 0
        async with aiohttp.ClientSession() as s, s.get(gw.metrics_url + "/metrics") as r:
            text = await r.text()
        placed = {
            line.split('reason="')[1].split('"')[0]
            for line in text.splitlines()
            if line.startswith("prefix_gateway_routing_decisions_total")
        }
        # The plan's replica took lines. Whether one is also placed off its plan (its planned replica past
        # the bounded load at that instant) is a scheduling outcome here, so it is not asserted:
        # tests/unit/test_router_pool.py::test_a_batch_lines_plan_is_a_soft_pin_within_the_share causes
        # one and checks its slot moves; this run checks the share holds wherever lines went (peaks).
        assert "batch_plan" in placed
        assert 'prefix_gateway_batch_in_flight{model="sim-llama",replica="r0"} 0.0' in text


async def test_batches_off_answer_404_in_openai_shape(tmp_path: Path) -> None:
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls)) as gw:
        c = client(gw)
        with pytest.raises(openai.NotFoundError) as exc:
            await c.batches.list()
        assert exc.value.body["code"] == "batch_api_disabled"  # type: ignore[index]
        with pytest.raises(openai.NotFoundError):
            await c.files.create(file=("in.jsonl", b"{}"), purpose="batch")


async def test_the_backoff_signal_is_each_replicas_scraped_queue(tmp_path: Path) -> None:
    async with batch_gateway(tmp_path) as (_fleet, gw):
        fleet = PoolFleet(gw.process.current_pools, lambda: gw.process.state.tenants)
        assert (
            fleet.serves(MODEL) and not fleet.serves("other") and list(fleet.replicas(MODEL)) == ["r0", "r1"]
        )
        r0 = gw.state.pools[MODEL].router.replica("r0")
        assert r0 is not None
        deadline = time.monotonic() + 10
        while r0.reported_at is None:  # the first scrape of the replica's /metrics
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        assert fleet.waiting(MODEL, "r0") == r0.reported_waiting == 0.0
        r0.reported_waiting = (
            5.0  # what the next scrape would write of a replica with 5 online requests waiting
        )
        assert fleet.waiting(MODEL, "r0") == 5.0
        assert fleet.waiting(MODEL, "nope") is None and fleet.waiting("other", "r0") is None
        r0.healthy = False
        assert list(fleet.replicas(MODEL)) == ["r1"]  # the plan uses the replicas that take requests now


async def test_a_running_batch_leaves_its_online_replicas_to_online_traffic(tmp_path: Path) -> None:
    """``batch.online_replicas: 1`` on three replicas: no batch line runs on the reserved one, and online
    requests made while the batch runs go there, even those whose prompt the router knows cached on a
    replica the batch runs on; once it ends the reserve is lifted."""
    wl = small_batch(requests=160)
    reserve = reserved_for_online(["r0", "r1", "r2"], 1, MODEL)
    async with batch_gateway(tmp_path, n=3, sim=SLOW, online_replicas=1) as (fleet, gw):
        assert gw.process.batch is not None
        c = client(gw)

        async def ask(i: int) -> None:
            content = f"question {i % 12} " * 30
            await c.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": content}], max_tokens=4
            )

        def counts() -> dict[str, int]:
            return {f"r{i}": r.counters.requests for i, r in enumerate(fleet.replicas)}

        for i in range(12):  # before the batch: the router learns where each of 12 prompts is cached
            await ask(i)
        before = counts()
        (kept,) = reserve
        assert before[kept] < 12  # the prefix policy spread them: some are cached elsewhere
        up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        online = 0
        # One at a time (a burst beyond the bounded load spills: unit-tested), while a quarter of the
        # batch is still to run: each answer takes far less than that quarter.
        while (await c.batches.retrieve(created.id)).request_counts.completed < 120:
            if gw.process.batch.online_reserve(MODEL):
                assert gw.process.batch.online_reserve(MODEL) == OnlineReserve(reserve, 8)
                await ask(online)  # the same 12 prompts again, in turn
                online += 1
            await asyncio.sleep(0.01)
        assert online >= 3
        done = await wait(c, created.id, "completed")
        assert done.request_counts.completed == 160
        deadline = time.monotonic() + 5
        while gw.process.batch.online_reserve(MODEL) is not None:  # lifted at the store's next read
            assert time.monotonic() < deadline, "the reserve outlived its batch"
            await asyncio.sleep(0.02)
        sent = {r: n - before[r] for r, n in counts().items()}
        assert sent[kept] == online
        assert sum(sent.values()) - online == 160 + gw.process.batch.stats.retried
