"""Issue 23: a generation the replica started is one ledger row, whatever ends the request.

Through a real gateway on loopback sockets in front of simulated replicas, the real ``openai`` client
for the streams, the SQLite and the Redis ledgers: an answer that completed, a stream the client closes
after N chunks, a client that times out before the first byte, a client that leaves after the last
chunk while the row is still being written (before ``[DONE]``), a stream the replica aborts or cuts, a
retry after a failed first attempt, a batch cancelled mid-run; and no row for what never reached a
replica. Each row is compared with the simulator's own record of the generation (``/sim/generations``:
the request id it received, its prompt tokens, the tokens it sent); a row without the replica's usage
says so (``usage_estimated``). When the client leaves, the simulator must see the generation aborted:
the gateway closed the upstream request at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import openai
import orjson
import pytest
import redis.asyncio as aioredis
from openai import AsyncOpenAI

from bench.batch_workload import URL, make_batch
from cache.billing.ledger_redis import RedisLedger
from cache.billing.ledger_sqlite import SqliteLedger
from cache.billing.pricing import LineItem
from cache.billing.report import render_table, report
from config.billing import LedgerConfig
from tests.support.batch import SLOW, batch_policy
from tests.support.stack import Gateway, gateway, policy_for, sim_faults, sim_fleet, sim_generations

MODEL = "sim-llama"
SLOW_DECODE = {"speed": 1.0, "decode_s_per_token": 0.02, "overhead_s": 0.0}
QUESTION = "Which of the travel desk's policies apply to a trip of three days abroad? " * 6
T = TypeVar("T")


@dataclass(frozen=True)
class Row:
    request_id: str
    source: str
    prompt: int
    completion: int
    estimated: bool


def _row(it: LineItem) -> Row:
    t = it.tokens
    prompt = t.uncached + t.implicit_hit + t.explicit_create + t.explicit_hit + t.served_input
    return Row(it.request_id, it.source, prompt, t.output + t.served_output, it.usage_estimated)


async def rows_of(gw: Gateway) -> dict[str, Row]:
    """Every row of the gateway's ledger, read from its own storage, by request id."""
    assert gw.process.metering is not None
    ledger = gw.process.metering.ledger
    if isinstance(ledger, SqliteLedger):
        raw = await ledger.call(
            lambda c: c.execute(
                "SELECT request_id, source, t_uncached + t_implicit_hit + t_explicit_create + t_explicit_hit"
                " + t_served_input, t_output + t_served_output, usage_estimated FROM line_items"
            ).fetchall()
        )
        return {r[0]: Row(r[0], r[1], r[2], r[3], bool(r[4])) for r in raw}
    assert isinstance(ledger, RedisLedger)
    entries = await ledger.client.xrange(ledger.stream_key, "-", "+")
    items = [_row(LineItem.from_dict(orjson.loads(fields[b"item"]))) for _, fields in entries]
    assert len({r.request_id for r in items}) == len(items)  # the stream holds each row once
    return {r.request_id: r for r in items}


async def eventually(probe: Callable[[], Awaitable[T]], ok: Callable[[T], bool], timeout: float = 10.0) -> T:
    """``probe()`` until ``ok`` holds of its value (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if ok(value):
            return value
        assert time.monotonic() < deadline, value
        await asyncio.sleep(0.02)


async def generations(urls: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for url in urls:
        out.extend(await sim_generations(url))
    return out


async def metrics_text(gw: Gateway) -> str:
    async with aiohttp.ClientSession() as s, s.get(gw.metrics_url + "/metrics") as r:
        return await r.text()


def ledger_sections(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> dict[str, Any]:
    if kind == "sqlite":
        return {"billing": {"ledger": {"path": str(tmp_path / "ledger.db")}}}
    return {"redis": {"url": request.getfixturevalue("redis_url")}, "billing": {"ledger": {"kind": "redis"}}}


@pytest.fixture(params=["sqlite", "redis"])
def ledger_kind(request: pytest.FixtureRequest) -> str:
    return request.param


def client_of(gw: Gateway, **kw: Any) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=gw.url + "/v1", api_key="none", max_retries=0, **kw)


@pytest.fixture
async def clients() -> AsyncIterator[list[AsyncOpenAI]]:
    made: list[AsyncOpenAI] = []
    yield made
    for c in made:
        await c.close()


def messages(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{QUESTION} (question {i})"}]


async def test_streams_closed_after_n_chunks_are_one_estimated_row_each(
    ledger_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clients: list[AsyncOpenAI]
) -> None:
    n_chunks = 7
    async with (
        sim_fleet(1, **SLOW_DECODE) as fleet,
        gateway(policy_for(fleet.urls, **ledger_sections(ledger_kind, tmp_path, request))) as gw,
    ):
        c = client_of(gw)
        clients.append(c)
        full = await c.chat.completions.create(model=MODEL, messages=messages(0), max_tokens=6, stream=True)
        full_id = full.response.headers["x-gateway-request-id"]
        async for _ in full:
            pass
        received: dict[str, int] = {}
        for i in range(1, 4):
            stream = await c.chat.completions.create(
                model=MODEL, messages=messages(i), max_tokens=400, stream=True
            )
            rid = stream.response.headers["x-gateway-request-id"]
            received[rid] = 0
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    received[rid] += 1
                    if received[rid] == n_chunks:
                        break
            await stream.close()  # the client goes away, 8 s before the answer would end

        # The simulator saw each closed stream aborted: the gateway closed the upstream request at once.
        gens = await eventually(
            lambda: sim_generations(fleet.urls[0]),
            lambda g: sum(x["outcome"] == "aborted" for x in g) == 3,
        )
        by_id = {g["request_id"]: g for g in gens}
        assert set(by_id) == {full_id, *received} and len(gens) == 4
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 4)
        assert set(rows) == set(by_id)

        done, sim_done = rows[full_id], by_id[full_id]
        assert sim_done["outcome"] == "completed" and not done.estimated
        assert (done.prompt, done.completion) == (sim_done["prompt_tokens"], sim_done["completion_tokens"])
        for rid, n in received.items():
            row, sim = rows[rid], by_id[rid]
            assert sim["outcome"] == "aborted" and row.estimated and row.source == "upstream"
            # What the client received is billed; never more than the replica generated.
            assert n == n_chunks <= row.completion <= sim["completion_tokens"] < 400
            # The prompt by the gateway's own count: within the replica's (its template adds markup).
            assert sim["prompt_tokens"] - 10 <= row.prompt <= sim["prompt_tokens"]

        assert gw.process.metering is not None
        rep = await report(
            gw.process.metering.ledger,
            "USD",
            tenant=None,
            model=None,
            since=None,
            until=None,
            group_by=("tenant",),
        )
        assert (rep["totals"]["requests"], rep["totals"]["estimated"]) == (4, 3)
        assert rep["rows"][0]["estimated"] == 3
        assert "3 with estimated usage" in render_table(rep)


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_times_out_before_the_first_byte_is_one_row_and_an_abort(
    stream: bool, tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    # A prefill of about 2 s (300 tokens at 6.7 ms): the client gives up after 0.3 s.
    sim = {**SLOW_DECODE, "prefill_s_per_token": 0.0067}
    async with (
        sim_fleet(1, **sim) as fleet,
        gateway(policy_for(fleet.urls, **policy_sections(tmp_path))) as gw,
    ):
        c = client_of(gw, timeout=0.3)
        clients.append(c)
        with pytest.raises(openai.APITimeoutError):
            answer = await c.chat.completions.create(
                model=MODEL, messages=messages(0), max_tokens=50, stream=stream
            )
            async for _ in answer:  # type: ignore[union-attr]
                pass
        (gen,) = await eventually(
            lambda: sim_generations(fleet.urls[0]), lambda g: bool(g) and g[0]["outcome"] == "aborted"
        )
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 1)
        row = rows[gen["request_id"]]
        assert row.estimated and row.completion == 0 == gen["completion_tokens"]
        assert gen["prompt_tokens"] - 10 <= row.prompt <= gen["prompt_tokens"]


def ledger_at(tmp_path: Path) -> LedgerConfig:
    """A SQLite ledger file under ``tmp_path``, as the policy's ledger section."""
    return LedgerConfig(path=str(tmp_path / "ledger.db"))


def policy_sections(tmp_path: Path) -> dict[str, Any]:
    return {"billing": {"ledger": {"path": str(tmp_path / "ledger.db")}}}


async def test_a_client_that_leaves_while_its_row_is_written_before_done_is_still_billed(
    redis_url: str, clients: list[AsyncOpenAI]
) -> None:
    sections = {"redis": {"url": redis_url}, "billing": {"ledger": {"kind": "redis"}}}
    admin = aioredis.from_url(redis_url)
    try:
        async with sim_fleet(1, **SLOW_DECODE) as fleet, gateway(policy_for(fleet.urls, **sections)) as gw:
            c = client_of(gw)
            clients.append(c)
            stream = await c.chat.completions.create(
                model=MODEL, messages=messages(0), max_tokens=40, stream=True
            )
            rid = stream.response.headers["x-gateway-request-id"]
            it = stream.__aiter__()
            await anext(it)
            # Redis takes no write for a while: the row's write waits, and so does the stream's [DONE].
            await admin.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
            while True:
                chunk = await asyncio.wait_for(anext(it), 10.0)
                if chunk.choices and chunk.choices[0].finish_reason is not None:
                    break
            with pytest.raises(TimeoutError):  # the last chunk came; [DONE] waits for the row
                await asyncio.wait_for(anext(it), 0.5)
            await stream.close()  # the client leaves after the last chunk, before [DONE]
            # Redis takes writes again only once the gateway has seen the client leave (499).
            await eventually(lambda: metrics_text(gw), lambda text: 'status="499"} 1.0' in text)
            await admin.execute_command("CLIENT", "UNPAUSE")
            rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 1, timeout=20.0)
            (gen,) = await sim_generations(fleet.urls[0])
            row = rows[rid]
            assert gen["outcome"] == "completed" and not row.estimated  # the usage had come
            assert (
                (row.prompt, row.completion)
                == (gen["prompt_tokens"], gen["completion_tokens"])
                == (
                    gen["prompt_tokens"],
                    40,
                )
            )
    finally:
        await admin.execute_command("CLIENT", "UNPAUSE")
        await admin.aclose()


async def test_a_stream_the_replica_aborts_or_cuts_is_one_row(
    ledger_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clients: list[AsyncOpenAI]
) -> None:
    async with (
        sim_fleet(1, **SLOW_DECODE) as fleet,
        gateway(policy_for(fleet.urls, **ledger_sections(ledger_kind, tmp_path, request))) as gw,
    ):
        c = client_of(gw)
        clients.append(c)
        await sim_faults(fleet.urls[0], {"abort_after": 3})  # vLLM's finish_reason "abort", usage sent
        aborted = await c.chat.completions.create(
            model=MODEL, messages=messages(0), max_tokens=9, stream=True
        )
        aborted_id = aborted.response.headers["x-gateway-request-id"]
        reasons = [ch.choices[0].finish_reason async for ch in aborted if ch.choices]
        assert reasons[-1] == "abort"
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 5})  # the replica's connection breaks
        cut = await c.chat.completions.create(model=MODEL, messages=messages(1), max_tokens=9, stream=True)
        cut_id = cut.response.headers["x-gateway-request-id"]
        content = 0
        with pytest.raises(openai.APIError):  # the gateway ends the stream with an error event
            async for ch in cut:
                content += bool(ch.choices and ch.choices[0].delta.content)
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 2)
        gens = {g["request_id"]: g for g in await sim_generations(fleet.urls[0])}
        assert not rows[aborted_id].estimated
        assert rows[aborted_id].completion == gens[aborted_id]["completion_tokens"] == 3
        assert rows[aborted_id].prompt == gens[aborted_id]["prompt_tokens"]
        assert gens[cut_id]["outcome"] == "dropped" and rows[cut_id].estimated
        assert content <= rows[cut_id].completion <= gens[cut_id]["completion_tokens"] == 4


@pytest.mark.parametrize("stream", [False, True])
async def test_a_retry_after_a_failed_first_attempt_is_one_row(
    stream: bool, ledger_kind: str, tmp_path: Path, request: pytest.FixtureRequest, clients: list[AsyncOpenAI]
) -> None:
    async with (
        sim_fleet(2) as fleet,
        gateway(policy_for(fleet.urls, **ledger_sections(ledger_kind, tmp_path, request))) as gw,
    ):
        # r0 starts every generation and breaks its connection before the first token: the gateway
        # retries on r1 (nothing reached the client yet).
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 0})
        c = client_of(gw)
        clients.append(c)
        ids = []
        for i in range(2):  # round robin: one of them starts on r0
            answer = await c.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=messages(i),
                max_tokens=5,
                stream=stream,
                **({"stream_options": {"include_usage": True}} if stream else {}),
            )
            ids.append(answer.headers["x-gateway-request-id"])
            parsed = answer.parse()
            if stream:
                async for _ in parsed:  # type: ignore[union-attr]
                    pass
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 2)
        assert set(rows) == set(ids)
        r0, r1 = await sim_generations(fleet.urls[0]), await sim_generations(fleet.urls[1])
        assert r0 and all(g["outcome"] == "dropped" and g["request_id"] in ids for g in r0)
        answered = {g["request_id"]: g for g in r1}
        assert set(answered) == set(ids)
        for rid in ids:  # one row each, with the tokens of the attempt that answered
            assert not rows[rid].estimated
            assert (rows[rid].prompt, rows[rid].completion) == (
                answered[rid]["prompt_tokens"],
                answered[rid]["completion_tokens"],
            )


async def test_a_batch_cancelled_mid_run_bills_the_lines_that_reached_a_replica(
    tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    wl = make_batch(
        seed=5,
        requests=40,
        templates=4,
        system_tokens=(300, 600),
        preambles=1,
        preamble_tokens=(100, 150),
        user_tokens=(5, 30),
        max_tokens=(30, 40),  # about 0.7 s a line: lines are in flight whenever the cancel comes
    )
    async with sim_fleet(2, **SLOW) as fleet, gateway(batch_policy(fleet.urls, tmp_path)) as gw:
        c = client_of(gw)
        clients.append(c)
        up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
        created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
        await eventually(lambda: c.batches.retrieve(created.id), lambda b: b.request_counts.completed >= 4)
        await c.batches.cancel(created.id)
        await eventually(lambda: c.batches.retrieve(created.id), lambda b: b.status == "cancelled")
        # Every generation the replicas started has ended (those in flight were aborted) ...
        gens = await eventually(
            lambda: generations(fleet.urls), lambda g: all(x["outcome"] != "running" for x in g)
        )
        started = {g["request_id"]: g for g in gens}
        aborted = {g["request_id"] for g in gens if g["outcome"] == "aborted"}
        assert aborted, "no line was in flight at the cancel"
        # ... and each is one row: exact for the answered lines, estimated for the aborted ones.
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) >= len(started))
        assert set(rows) == set(started)
        # Every aborted line is estimated (no usage came). A line the replica finished while the cancel
        # cut the gateway's read of its answer is estimated too (the usage was in the unread body): which
        # lines those are is the cancel's timing, so the test allows them, at most the replica's tokens.
        estimated = {rid for rid, r in rows.items() if r.estimated}
        assert aborted <= estimated
        assert all(started[rid]["outcome"] == "completed" for rid in estimated - aborted)
        for rid, row in rows.items():
            gen = started[rid]
            assert row.source == "batch"
            if rid in aborted:
                assert 0 < row.prompt <= gen["prompt_tokens"] and row.completion == 0
            elif rid in estimated:
                assert 0 < row.prompt <= gen["prompt_tokens"] and row.completion <= gen["completion_tokens"]
            else:
                assert (row.prompt, row.completion) == (gen["prompt_tokens"], gen["completion_tokens"])


async def test_no_row_for_what_never_reached_a_replica_and_cache_hits_keep_theirs(
    tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    sections = {**policy_sections(tmp_path), "cache": {"enabled": True}}
    async with sim_fleet(1) as fleet, gateway(policy_for(fleet.urls, **sections)) as gw:
        c = client_of(gw)
        clients.append(c)
        with pytest.raises(openai.BadRequestError):  # the gateway's own 400, before any dispatch
            await c.chat.completions.create(model=MODEL, messages=messages(0), max_tokens=0)
        await sim_faults(fleet.urls[0], {"fail_status": 400})
        with pytest.raises(openai.BadRequestError):  # the replica refused it: no generation
            await c.chat.completions.create(model=MODEL, messages=messages(0), max_tokens=3)
        # Every attempt started on the replica and broke off before its first byte: the client gets
        # the gateway's 502; the replica never delivered a generation, so none is billed.
        await sim_faults(fleet.urls[0], {"drop_mid_stream_after": 0})
        with pytest.raises(openai.InternalServerError):
            await c.chat.completions.create(model=MODEL, messages=messages(0), max_tokens=3)
        dropped = await sim_generations(fleet.urls[0])
        assert [g["outcome"] for g in dropped] == ["dropped"]  # no other replica to retry on
        await sim_faults(fleet.urls[0], {})
        for _ in range(2):  # a miss, then a hit
            await c.chat.completions.create(model=MODEL, messages=messages(1), max_tokens=3, temperature=0)
        rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == 2)
        assert sorted(r.source for r in rows.values()) == ["response_cache", "upstream"]
        assert not any(r.estimated for r in rows.values())
        (gen,) = [g for g in await sim_generations(fleet.urls[0]) if g["outcome"] == "completed"]
        assert rows[gen["request_id"]].source == "upstream"


async def test_a_batch_cut_by_a_shutdown_is_billed_once_by_the_run_that_resumes_it(
    tmp_path: Path, clients: list[AsyncOpenAI]
) -> None:
    """A stop after which the cut lines are sent again (a shutdown, a lost lease) bills them once, by
    the run that answers them: the ledger keeps the first row of a request id, and an estimated row
    of the cut run would have stood for the whole answer."""
    wl = make_batch(
        seed=6,
        requests=24,
        templates=3,
        system_tokens=(300, 600),
        preambles=1,
        preamble_tokens=(100, 150),
        user_tokens=(5, 30),
        max_tokens=(20, 30),
    )
    async with sim_fleet(2, **SLOW) as fleet:
        base = batch_policy(fleet.urls, tmp_path)
        policy = base.model_copy(
            update={"billing": base.billing.model_copy(update={"ledger": ledger_at(tmp_path)})}
        )
        async with gateway(policy) as gw:
            c = client_of(gw)
            clients.append(c)
            up = await c.files.create(file=("in.jsonl", wl.jsonl()), purpose="batch")
            created = await c.batches.create(input_file_id=up.id, endpoint=URL, completion_window="24h")
            await eventually(
                lambda: c.batches.retrieve(created.id), lambda b: b.request_counts.completed >= 4
            )
        cut = {g["request_id"] for g in await generations(fleet.urls) if g["outcome"] == "aborted"}
        assert cut, "no line was in flight at the shutdown"
        async with gateway(policy) as gw:
            c = client_of(gw)
            clients.append(c)
            await eventually(
                lambda: c.batches.retrieve(created.id), lambda b: b.status == "completed", timeout=30.0
            )
            rows = await eventually(lambda: rows_of(gw), lambda r: len(r) == len(wl.lines))
            answered = {
                g["request_id"]: g for g in await generations(fleet.urls) if g["outcome"] == "completed"
            }
            assert set(answered) == set(rows) and cut <= set(rows)  # the cut lines were answered later
            assert not any(r.estimated for r in rows.values())
            for rid, row in rows.items():
                assert (row.prompt, row.completion) == (
                    answered[rid]["prompt_tokens"],
                    answered[rid]["completion_tokens"],
                )
