"""Per-process runtime of the app that is not part of a ``GatewayState``: it outlives reloads.

Stored once under ``app[RUNTIME]`` at creation (aiohttp freezes the app's mapping at start; the fields
of this object stay mutable): the policy file to reload from, the HTTP server (for connection counts),
process admission, background tasks, discovered replicas, and the hooks run after a graceful drain.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from gateway.process.admission import ProcessAdmission

ShutdownHook = Callable[[web.Application], Awaitable[None]]


@dataclass
class Runtime:
    policy_path: str | None = None
    secret: bytes | None = None
    server: web.Server | None = None
    admission: ProcessAdmission | None = None
    tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    # model name -> (discovery config it was resolved with, addresses "ip" in resolver order)
    discovered: dict[str, tuple[Any, list[str]]] = field(default_factory=dict)
    resolver: Any = None  # discovery's DNS resolver (None: loop.getaddrinfo); injectable in tests
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Run in order after in-flight requests drained (or the drain period ended), before upstream
    # sessions close: e.g. flushing a billing ledger. Each gets the app; exceptions are logged.
    shutdown_hooks: list[ShutdownHook] = field(default_factory=list)
    # Resources of replaced states (old upstream session, old cache), closed once their in-flight
    # requests had time to finish, or at shutdown.
    retired: list[tuple[asyncio.Task[Any], Callable[[], Awaitable[Any]]]] = field(default_factory=list)

    def start_task(self, name: str, coro: Awaitable[Any]) -> None:
        old = self.tasks.pop(name, None)
        if old is not None:
            old.cancel()
        self.tasks[name] = asyncio.ensure_future(coro)

    def retire(self, close: Callable[[], Awaitable[Any]], after_s: float) -> None:
        """Call ``close()`` after ``after_s`` seconds (or at shutdown, whichever comes first)."""

        async def later() -> None:
            await asyncio.sleep(after_s)
            await close()

        entry = (asyncio.ensure_future(later()), close)
        self.retired.append(entry)
        entry[0].add_done_callback(lambda _t: self.retired.remove(entry) if entry in self.retired else None)

    async def stop_tasks(self) -> None:
        tasks = list(self.tasks.values())
        self.tasks.clear()
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        retired, self.retired = self.retired, []
        for task, close in retired:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            with contextlib.suppress(Exception):
                await close()


RUNTIME = web.AppKey("runtime", Runtime)


def add_shutdown_hook(app: web.Application, hook: ShutdownHook) -> None:
    """Run ``hook(app)`` at shutdown, after the drain and before the upstream session closes."""
    app[RUNTIME].shutdown_hooks.append(hook)
