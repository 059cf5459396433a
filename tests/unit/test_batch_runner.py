"""The batch runner: the share of each replica is never exceeded, batch yields to online queues,
a group's lines wait for the line that warms their prefix, retries, stop."""

from __future__ import annotations

import asyncio
import itertools
import random
from array import array
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from config.batch import BatchConfig
from gateway.batch.objects import LineResult
from gateway.batch.runner import BatchLine, Runner, Slot, SlotPool
from router.batch_plan import LinePrefix, Plan, plan

BS = 16


def make_plan(replicas: list[str], templates: int = 6, per: int = 20, seed: int = 1) -> Plan:
    rng = random.Random(seed)
    lines = []
    for _t in range(templates):
        head = [rng.getrandbits(63) for _ in range(40)]  # 640 shared tokens
        for _ in range(per):
            blocks = [*head, rng.getrandbits(63)]
            lines.append(LinePrefix(len(lines) + 1, array("Q", blocks).tobytes(), len(blocks) * BS, 8))
    rng.shuffle(lines)
    return plan(lines, replicas, block_size=BS, warm_tokens=256)


async def read(key: int) -> BatchLine:
    return BatchLine(
        "batch_x", "acme", key, f"c{key}", f"batch_req_{key}", "chat", "/v1/chat/completions", "m", {}
    )


class Fleet:
    """A fake ``send``: answers after a short random delay and records who ran when, and how many at once."""

    def __init__(self, seed: int = 2, status: Any = 200) -> None:
        self.rng = random.Random(seed)
        self.status = status
        self.now: dict[str | None, int] = defaultdict(int)
        self.peak: dict[str | None, int] = defaultdict(int)
        self.starts: dict[int, float] = {}
        self.ends: dict[int, float] = {}
        self.calls: list[tuple[int, str | None]] = []
        self.cancelled = 0
        self.gate: asyncio.Event | None = None

    async def __call__(self, line: BatchLine, slot: Slot) -> tuple[int, Any]:
        replica = slot.replica
        loop = asyncio.get_running_loop()
        self.calls.append((line.line, replica))
        self.starts[line.line] = loop.time()
        self.now[replica] += 1
        self.peak[replica] = max(self.peak[replica], self.now[replica])
        try:
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.rng.uniform(0.001, 0.006))
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.now[replica] -= 1
        self.ends[line.line] = loop.time()
        status = self.status(line) if callable(self.status) else self.status
        if isinstance(status, Exception):
            raise status
        if isinstance(status, tuple):  # (status, body)
            return status
        return status, {"usage": {"prompt_tokens": 10, "completion_tokens": 2}}


def runner(
    p: Plan,
    send: Fleet,
    results: list[LineResult],
    *,
    load=lambda r: None,
    slots=None,
    reserve: frozenset[str] = frozenset(),
    **cfg: Any,
) -> Runner:
    cfg.setdefault("share", 0.25)
    cfg.setdefault("replica_slots", 16)
    return Runner(
        p,
        read=read,
        send=send,
        load=load,
        params=BatchConfig(**cfg).pool("m"),
        slots=slots or SlotPool(),
        record=lambda r: asyncio.sleep(0, results.append(r)),
        backoff_s=0.001,
        backoff_max_s=0.002,
        poll_s=0.01,
        reserve=reserve,
    )


async def test_every_line_runs_once_on_its_planned_replica_within_the_share() -> None:
    p, fleet, results = make_plan(["a", "b", "c"]), Fleet(), []
    r = runner(p, fleet, results)
    assert await r.run() == "done"
    assert sorted(x.line for x in results) == list(range(1, 121)) and all(x.ok for x in results)
    placed = {pl.key: replica for replica, seq in p.ranges.items() for pl in seq}
    assert sorted(key for key, _ in fleet.calls) == list(range(1, 121))  # each sent once
    # On its planned replica, unless an idle lane stole it (timing decides whether one does; a steal is
    # counted, so every line off its plan is one of them).
    off_plan = sum(placed[key] != replica for key, replica in fleet.calls)
    assert off_plan <= r.stats.stolen
    assert set(fleet.peak) == {"a", "b", "c"}
    assert max(fleet.peak.values()) == 4  # share 0.25 of 16 slots: reached, never exceeded
    assert (r.stats.sent, r.stats.completed, r.stats.prompt_tokens) == (120, 120, 1200)


async def test_no_line_may_move_to_the_online_reserve() -> None:
    """The router may move a line to any replica whose share has room, never to the online reserve."""
    p, fleet = make_plan(["a", "b"]), Fleet()
    rooms: list[tuple[bool, bool]] = []

    async def send(line: BatchLine, slot: Slot) -> tuple[int, Any]:
        other = "b" if slot.replica == "a" else "a"
        rooms.append((slot.has_room("c"), slot.has_room(other)))
        return await fleet(line, slot)

    r = runner(p, send, [], reserve=frozenset({"c"}))  # type: ignore[arg-type]
    assert await r.run() == "done"
    assert len(rooms) == 120 and not any(c for c, _ in rooms) and any(o for _, o in rooms)
    assert {rep for _, rep in fleet.calls} == {"a", "b"}


async def test_two_batches_together_stay_within_one_share() -> None:
    slots, fleet = SlotPool(), Fleet()
    a = runner(make_plan(["a", "b"], seed=1), fleet, [], slots=slots)
    b = runner(make_plan(["a", "b"], seed=5), fleet, [], slots=slots)
    assert await asyncio.gather(a.run(), b.run()) == ["done", "done"]
    assert max(fleet.peak.values()) == 4 and slots.used("a") == slots.used("b") == 0


async def test_followers_wait_for_the_line_that_warms_their_prefix() -> None:
    p, fleet = make_plan(["a", "b"]), Fleet()
    assert await runner(p, fleet, []).run() == "done"
    for seq in p.ranges.values():
        waits = [pl for pl in seq if pl.after is not None]
        assert len(waits) >= len(seq) - 4  # all but each group's lead wait
        for pl in waits:
            assert fleet.starts[pl.key] >= fleet.ends[pl.after]
        # only one warming line per replica at a time: their sends never overlap
        leads = sorted((fleet.starts[pl.key], fleet.ends[pl.key]) for pl in seq if pl.after is None)
        assert all(nxt[0] >= cur[1] for cur, nxt in itertools.pairwise(leads))


async def test_batch_yields_while_the_online_queue_is_long() -> None:
    waiting = {"a": 20.0, "b": 0.0}  # backoff default: full share at <= 1 waiting, none at >= 8
    p, fleet, results = make_plan(["a", "b"]), Fleet(), []
    r = runner(p, fleet, results, load=waiting.get)
    task = asyncio.create_task(r.run())
    while sum(1 for _, rep in fleet.calls if rep == "b") < 60:
        await asyncio.sleep(0.005)
    assert not any(rep == "a" for _, rep in fleet.calls)  # a's online queue is long: nothing sent there
    waiting["a"] = 5.0  # 3/7 of the way from start to stop: 4 * 3/7 -> 1 slot
    while sum(1 for _, rep in fleet.calls if rep == "a") < 5:
        await asyncio.sleep(0.005)
    assert fleet.peak["a"] == 1
    waiting["a"] = 0.0
    assert await task == "done"
    assert fleet.peak["a"] == 4 and len(results) == 120


async def test_retries_then_the_last_answer_is_the_result() -> None:
    tries: dict[int, int] = defaultdict(int)

    def status(line: BatchLine) -> Any:
        tries[line.line] += 1
        if line.line % 3 == 0:
            return 503 if tries[line.line] < 3 else 200  # recovers on the third attempt
        if line.line % 3 == 1:
            return 400  # not retried
        return ConnectionResetError("replica went away")  # always fails

    p, results = make_plan(["a"], templates=2, per=6), []
    r = runner(p, Fleet(status=status), results)
    assert await r.run() == "done"
    by = {x.line: x for x in results}
    assert len(by) == 12
    for key, x in by.items():
        rec = orjson.loads(x.record)
        if key % 3 == 0:
            assert x.ok and tries[key] == 3 and rec["response"]["status_code"] == 200
        elif key % 3 == 1:
            assert not x.ok and tries[key] == 1 and rec["response"]["status_code"] == 400
        else:
            assert not x.ok and tries[key] == 3 and rec["response"] is None
            assert (
                rec["error"]["code"] == "request_failed" and "ConnectionResetError" in rec["error"]["message"]
            )
    assert r.stats.retried == 4 * 2 + 4 * 2


async def test_a_spent_budget_is_the_lines_answer_at_once_and_other_429s_are_retried() -> None:
    tries: dict[int, int] = defaultdict(int)
    spent = {"error": {"message": "budget spent", "type": "insufficient_quota", "param": None,
                       "code": "budget_exceeded"}}  # fmt: skip
    limited = {"error": {"message": "slow down", "type": "rate_limit_error", "param": None,
                         "code": "rate_limit_exceeded"}}  # fmt: skip

    def status(line: BatchLine) -> Any:
        tries[line.line] += 1
        return (429, spent) if line.line % 2 else (429, limited)

    p, results = make_plan(["a"], templates=2, per=4), []
    r = runner(p, Fleet(status=status), results)
    assert await r.run() == "done"
    assert len(results) == 8 and not any(x.ok for x in results)
    for x in results:
        rec = orjson.loads(x.record)
        assert rec["response"]["status_code"] == 429
        assert tries[x.line] == (1 if x.line % 2 else 3), (x.line, tries[x.line])
    assert r.stats.retried == 4 * 2


async def test_stop_cuts_off_what_is_in_flight_and_sends_nothing_more() -> None:
    p, fleet, results = make_plan(["a", "b"]), Fleet(), []
    fleet.gate = asyncio.Event()
    r = runner(p, fleet, results)
    task = asyncio.create_task(r.run())
    while len(fleet.calls) < 2:
        await asyncio.sleep(0.005)
    r.stop("cancelled")
    assert await task == "cancelled"
    assert fleet.cancelled == len(fleet.calls) and results == []
    sent = len(fleet.calls)
    await asyncio.sleep(0.05)
    assert len(fleet.calls) == sent


async def test_a_stop_never_cuts_an_answer_being_recorded() -> None:
    """An answer in hand is recorded even when the stop comes while its record is written (its slot is
    already free, so the next line is in flight beside it): only sends are cut."""
    p, fleet, results = make_plan(["a"], templates=6, per=1), Fleet(), []
    recording, release = asyncio.Event(), asyncio.Event()

    async def slow_record(res: LineResult) -> None:
        recording.set()
        await release.wait()
        results.append(res)

    async def until(cond: Callable[[], bool]) -> None:
        async with asyncio.timeout(5):
            while not cond():
                await asyncio.sleep(0.001)

    r = Runner(
        p,
        read=read,
        send=fleet,
        load=lambda _: None,
        params=BatchConfig(share=0.25, replica_slots=4).pool("m"),
        slots=SlotPool(),
        record=slow_record,
        poll_s=0.01,
    )
    task = asyncio.create_task(r.run())
    try:
        await asyncio.wait_for(recording.wait(), 5)
        fleet.gate = asyncio.Event()  # the next line's send (its slot free already) waits in flight
        await until(lambda: len(fleet.calls) == 2)
        r.stop("cancelled")
        await until(lambda: fleet.cancelled == 1)  # the stop has cut the send in flight...
        await asyncio.sleep(0.01)  # ...and had every chance to cut the record too
        release.set()
        assert await asyncio.wait_for(task, 5) == "cancelled"
    finally:
        task.cancel()
    assert [x.ok for x in results] == [True]  # the answer in hand was recorded, not cut


async def test_a_failing_store_stops_the_run_with_its_error() -> None:
    async def broken(_: LineResult) -> None:
        raise OSError("disk full")

    r = Runner(
        make_plan(["a"], templates=1, per=3),
        read=read,
        send=Fleet(),
        load=lambda _: None,
        params=BatchConfig().pool("m"),
        slots=SlotPool(),
        record=broken,
        poll_s=0.01,
    )
    with pytest.raises(OSError, match="disk full"):
        await r.run()


async def test_an_idle_replica_steals_from_a_stalled_one() -> None:
    waiting = {"a": 0.0, "b": 50.0}  # b's online queue never lets batch in
    p, fleet, results = make_plan(["a", "b"]), Fleet(), []
    r = runner(p, fleet, results, load=waiting.get)
    assert await asyncio.wait_for(r.run(), 10) == "done"
    assert sorted(x.line for x in results) == list(range(1, 121))
    assert {rep for _, rep in fleet.calls} == {"a"} and len(fleet.calls) == 120
    assert r.stats.stolen == len(p.ranges["b"])
    # the first stolen line warms the prefix: the others of b's range start after it has answered
    stolen = {pl.key for pl in p.ranges["b"]}
    first = min(stolen, key=lambda k: fleet.starts[k])
    assert all(fleet.starts[k] >= fleet.ends[first] for k in stolen - {first})


async def test_a_slow_replica_hands_work_to_a_fast_one() -> None:
    class Uneven(Fleet):
        async def __call__(self, line: BatchLine, slot: Slot) -> tuple[int, Any]:
            if slot.replica == "b":
                await asyncio.sleep(0.02)  # b is busy with online traffic: each batch line takes longer
            return await super().__call__(line, slot)

    p, fleet, results = make_plan(["a", "b"], templates=8, per=25), Uneven(), []
    r = runner(p, fleet, results)
    assert await r.run() == "done"
    on_a = sum(1 for _, rep in fleet.calls if rep == "a")
    assert r.stats.stolen > 0 and on_a > len(p.ranges["a"])
    assert sorted(x.line for x in results) == list(range(1, 201)) and len(fleet.calls) == 200
