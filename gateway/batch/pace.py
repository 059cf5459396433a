"""Cooperative pacing of a batch's long steps on the event loop: validation, planning, settling.

A 50,000-line batch is a second or two of CPU (parse and check every line, render and hash every
prompt, sort and cut the plan). Run in a worker thread, that work held the event loop anyway: the loop
needs the GIL, which a thread drops only every 5 ms of its own running time, so on a loaded two-core
machine (the thread preempted while it held the GIL) ``/health`` waited 100-190 ms; one C call (a
``sorted`` of every line's key, an old-generation collection walking one object per line) held it
200-300 ms outright (``python -m bench.batch_memory``). Run on the loop in slices of at most
``YIELD_S`` that end in ``await asyncio.sleep(0)``, the work waits for nothing but the CPU, and every
other task on the loop (online requests, ``/health``) runs between two slices. Disk reads stay in
threads (``asyncio.to_thread``), ``READ_BYTES`` of lines at a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from typing import TypeVar

T = TypeVar("T")

YIELD_S = 0.005
"""The longest a batch's validation, planning or settling runs on the event loop before it yields (one
line's own work excepted: parsing a line of ``max_line_bytes`` is a single call)."""
READ_BYTES = 1 << 20
"""Bytes of input lines read from disk in one thread call (at least one line, whatever its length)."""
READ_LINES = 4096
"""Lines read in one thread call at most (however short they are)."""
THREAD_LINE_BYTES = 256 * 1024
"""A line at least this long is parsed and hashed for the plan in a worker thread: hashing renders and
counts its whole prompt in Python (a 10 MB line of 110,000 parts: a 40 ms parse, then 36 ms), which a
thread shares with the loop every 5 ms, where on the loop it would be one slice of 85 ms. The parse is
one C call either way; below this length a thread's hand-off costs more than the line."""


class Pacer:
    """``await pace()`` yields to the event loop once ``every_s`` has passed since the last yield."""

    __slots__ = ("_since", "every_s", "yields")

    def __init__(self, every_s: float = YIELD_S):
        self.every_s = every_s
        self.yields = 0
        self._since = time.perf_counter()

    async def __call__(self) -> None:
        if time.perf_counter() - self._since >= self.every_s:
            await asyncio.sleep(0)
            self.yields += 1
            self._since = time.perf_counter()


async def drive(steps: Generator[None, None, T], pace: Pacer) -> T:
    """Run a generator that yields between slices of its work (``router.batch_plan.plan_steps``) to its
    end, pacing between slices; its return value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value
        await pace()
