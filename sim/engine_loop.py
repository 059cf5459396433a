"""Runs a replica's ``Engine`` in real time: one task steps it, each step lasting its modelled duration.

A request handler ``submit``s an ``EngineRequest`` and awaits its ``Progress``: tokens are handed over
when a step produced the first token, when the request finished, and otherwise every
``stream_interval`` tokens (vLLM's ``--stream-interval``: fewer wake-ups, the same token times). A step
is computed when it starts and its tokens exist when it ends, so a handler never sees a token before
its step's time has passed. Steps are paced on the loop clock against their planned end, so a late
wake-up does not stretch the schedule; ``speed 0`` runs steps back to back, yielding between them.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.engine import Engine, EngineRequest, StepOutput


@dataclass(slots=True, eq=False)
class Progress:
    """What a handler may use of its request so far (set by the loop when a step ends)."""

    request: EngineRequest
    tokens: int = 0  # output tokens produced by steps that have ended
    done: bool = False
    event: asyncio.Event = field(default_factory=asyncio.Event)

    async def next(self) -> int:
        """Wait for more tokens (or the end); the number produced so far."""
        await self.event.wait()
        self.event.clear()
        return self.tokens


class EngineLoop:
    def __init__(
        self,
        engine: Engine,
        time_factor: Callable[[], float],
        stream_interval: int = 1,
        on_finished: Callable[[EngineRequest], None] | None = None,
    ) -> None:
        self.engine = engine
        self.time_factor = time_factor  # wall seconds per model second, read at every step (faults change it)
        self.stream_interval = max(1, stream_interval)
        self.on_finished = on_finished
        self._progress: dict[EngineRequest, Progress] = {}
        self.paced_s = 0.0  # wall seconds the steps should have taken (model time x factor)
        self.late_s = 0.0  # how much later than planned they ended (a CPU-starved process falls behind)
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def submit(self, req: EngineRequest) -> Progress:
        progress = Progress(req)
        self._progress[req] = progress
        self.engine.add(req, asyncio.get_running_loop().time())
        self._wake.set()
        return progress

    def abort(self, req: EngineRequest) -> None:
        self._progress.pop(req, None)
        self.engine.abort(req)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        while True:
            if engine.idle:
                self._wake.clear()
                await self._wake.wait()
            start = loop.time()
            factor = self.time_factor()
            out = engine.step(start, factor)
            end = start + out.duration_s * factor
            delay = end - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            self.paced_s += end - start
            self.late_s += max(0.0, loop.time() - end)
            self._deliver(out)

    def _deliver(self, out: StepOutput) -> None:
        interval = self.stream_interval
        progress = self._progress
        for req in out.tokens:
            p = progress.get(req)
            if p is None:
                continue
            n = req.num_output_tokens
            if req.finished or n == 1 or n - p.tokens >= interval:
                p.tokens = n
                p.done = req.finished
                p.event.set()
        for req in out.finished:
            if progress.pop(req, None) is not None and self.on_finished is not None:
                self.on_finished(req)
