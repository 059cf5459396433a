"""The process's named background tasks, handed to the loops that start others (discovery starts one
loop per pool, the KV-event listeners one per socket) instead of the whole ``Process``.

A name holds at most one task: starting a name cancels the task that held it, so a loop restarted by a
reload or a discovery change never runs twice. ``close`` (the process's exit stack) cancels every task
and waits for each to end.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)
class Tasks:
    _running: dict[str, asyncio.Task[Any]] = field(default_factory=dict)

    def start(self, name: str, coro: Awaitable[Any]) -> None:
        """Run ``coro`` as the task ``name`` (one of that name: a running one is cancelled)."""
        self.stop(name)
        self._running[name] = asyncio.ensure_future(coro)

    def stop(self, name: str) -> asyncio.Task[Any] | None:
        """Cancel the task ``name``; returned, so a caller that must wait for its end can."""
        task = self._running.pop(name, None)
        if task is not None:
            task.cancel()
        return task

    def alive(self, prefix: str) -> dict[str, bool]:
        """The tasks whose name starts with ``prefix``: name -> still running."""
        return {name: not t.done() for name, t in self._running.items() if name.startswith(prefix)}

    async def close(self) -> None:
        """Cancel every task and wait for each to end."""
        tasks = list(self._running.values())
        self._running.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
