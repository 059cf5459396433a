"""A batch's validation and planning run on the event loop in short slices (``gateway.batch.pace``):
while a 20,000-line file is validated, or a 50,000-line batch planned, no slice runs longer than a few
``YIELD_S`` of the loop thread's CPU, and the result is what the one-call version gives. CPU time of
the loop thread (``time.thread_time``), not the wall clock, so a loaded machine cannot fail it."""

from __future__ import annotations

import asyncio
import gc
import random
import time
from array import array
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from gateway.batch.pace import READ_BYTES, YIELD_S, Pacer, drive
from gateway.batch.validate import InputLine, iter_lines, read_bodies, validate_file, validate_input
from router.batch_plan import PLAN_STEP, LinePrefix, Prefixes, plan, plan_steps

URL = "/v1/chat/completions"
SLICE_BOUND_S = 4 * YIELD_S  # a slice, its last line's own work and the loop's other tasks
LIMITS = {
    "max_file_bytes": 1 << 30,
    "max_line_bytes": 1 << 20,
    "max_lines": 50_000,
    "max_custom_id_chars": 64,
    "max_reported_errors": 10,
}


@pytest.fixture(autouse=True)
def _frozen() -> Iterator[None]:
    """What exists before the test out of the collector's generations, as the gateway does after its
    start (``gateway.cli.main``): an old-generation collection then walks what the batch allocates, not
    the test runner's objects (30-55 ms here)."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def batch_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "in.jsonl"
    body = {"model": "m", "max_tokens": 3, "messages": [{"role": "user", "content": "x " * 200}]}
    path.write_bytes(
        b"".join(
            orjson.dumps({"custom_id": f"r{i}", "method": "POST", "url": URL, "body": body}) + b"\n"
            for i in range(n)
        )
    )
    return path


async def longest_slice(work) -> tuple[float, int, object]:  # type: ignore[no-untyped-def]
    """Run ``work`` beside a task that ticks at every turn of the loop: the most loop-thread CPU
    between two ticks, the ticks, and the work's result."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        last = time.thread_time()
        while not done.is_set():
            await asyncio.sleep(0)
            now = time.thread_time()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    try:
        result = await work
    finally:
        done.set()
        await ticker
    return max(gaps), len(gaps), result


async def test_validating_a_big_file_on_the_loop_yields_every_few_ms(tmp_path: Path) -> None:
    path = batch_file(tmp_path, 20_000)
    assert path.stat().st_size > 4 * READ_BYTES  # several reads
    longest, ticks, v = await longest_slice(
        validate_file(path, endpoint=URL, serves=lambda m: m == "m", **LIMITS)
    )
    assert v == validate_input(path, endpoint=URL, serves=lambda m: m == "m", **LIMITS)
    assert v.ok and len(v.lines) == 20_000
    assert longest < SLICE_BOUND_S, longest
    assert ticks > 20


async def test_lines_are_read_back_in_slices_the_same_as_in_one_call(tmp_path: Path) -> None:
    path = batch_file(tmp_path, 5_000)
    v = validate_input(path, endpoint=URL, serves=lambda m: m == "m", **LIMITS)
    pace = Pacer()
    got = [(line, orjson.loads(raw)["body"]) async for line, raw in iter_lines(path, iter(v.lines), pace)]
    assert got == list(read_bodies(path, v.lines))
    assert all(isinstance(line, InputLine) for line, _ in got)
    assert pace.yields > 0


def prefixes(n: int, seed: int = 5) -> Prefixes:
    rng = random.Random(seed)
    groups = [[rng.getrandbits(64) for _ in range(rng.randint(2, 30))] for _ in range(200)]
    out = Prefixes()
    for key in range(n):
        blocks = [*rng.choice(groups), *(rng.getrandbits(64) for _ in range(rng.randint(0, 4)))]
        out.append(LinePrefix(key, array("Q", blocks).tobytes(), len(blocks) * 16, rng.randint(1, 64)))
    return out


def test_planning_a_50000_line_batch_in_steps_of_a_few_ms() -> None:
    lines = prefixes(50_000)
    steps = plan_steps(lines, ["a", "b", "c"], block_size=16)
    longest, count = 0.0, 0
    while True:
        t = time.thread_time()
        try:
            next(steps)
        except StopIteration as done:
            stepped = done.value
            break
        longest = max(longest, time.thread_time() - t)
        count += 1
    assert count >= 50_000 // PLAN_STEP
    assert longest < SLICE_BOUND_S, longest
    whole = plan([lines[i] for i in range(len(lines))], ["a", "b", "c"], block_size=16)  # from objects
    assert stepped == whole and len(whole) == 50_000
    assert sorted(pl.key for r in whole.ranges.values() for pl in r) == list(range(50_000))


async def test_drive_paces_a_generator_and_returns_its_value() -> None:
    def work():  # type: ignore[no-untyped-def]
        for _ in range(3):
            yield
        return "done"

    pace = Pacer(0.0)
    assert await drive(work(), pace) == "done"
    assert pace.yields == 3
