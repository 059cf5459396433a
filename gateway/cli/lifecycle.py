"""Run the gateway in this process until a signal: the event loop, the signals, the drain. Shared by
``serve`` (``gateway.cli.main``) and ``demo`` (``gateway.cli.demo``)."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any

from config.policy import Policy
from gateway.observability.logs import ACCESS_LOG
from gateway.process.process import PROCESS
from gateway.process.reload import reload
from gateway.server.app import serve

log = logging.getLogger("prefix_gateway")

# The young generation's collection threshold once serving (CPython's default: 700). The count is
# tracked allocations less deallocations, so 32 requests in flight (their tasks, frames, dicts,
# headers) pass 700 over and over with hardly any garbage: at the default a gateway process ran 474
# young, 43 middle and 3 full collections over 6,400 requests (non-stream, concurrency 32, load average
# 3), 0.42 ms of CPU each young one (1.8 ms at p99), 53 us of CPU per request in all (7 % of it), every
# pause waited out by the requests in flight; at 10,000 it ran one collection (15 ms) over the same
# requests (gc.callbacks timed with time.thread_time in the gateway process; docs/benchmarks.md,
# "Fixed cost per request, the third profile").
GC_YOUNG_THRESHOLD = 10_000


def run_async(main: Callable[[], Coroutine[Any, Any, int]]) -> int:
    """Run on uvloop (a dependency everywhere but Windows; it is faster), else on asyncio's own loop."""
    try:
        import uvloop

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is optional
        factory = None
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main())


async def wait_for_signal(on_hup: Callable[[], None] | None = None) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if on_hup is not None:
        loop.add_signal_handler(signal.SIGHUP, on_hup)
    await stop.wait()


async def serve_until_signal(
    policy: Policy,
    on_started: Callable[[str, str | None], None] | None = None,
    *,
    policy_path: str | None = None,
    reuse_port: bool = False,
    worker: int = 0,
) -> int:
    """Serve until SIGTERM/SIGINT, then drain: stop accepting at once (and /ready answers 503), let
    requests in flight finish within ``server.drain_timeout_s``, run the shutdown hooks, exit 0.
    SIGHUP reloads the policy file."""
    runner, url = await serve(policy, policy_path=policy_path, reuse_port=reuse_port, worker=worker)
    process = runner.app[PROCESS]
    # What start-up built (modules, the policy, the simulator's and tokenizer's tables) lives as long as
    # the process: out of the collector's generations, so an old-generation collection under load walks
    # only what requests allocate (a pause every request in flight waits out).
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    log.info("gateway listening", extra={"event": "listening", "url": url, "metrics": process.metrics_url})
    if on_started:
        on_started(url, process.metrics_url)
    reloads: set[asyncio.Task[object]] = set()

    def on_hup() -> None:
        task = asyncio.ensure_future(reload(process, source="sighup"))
        reloads.add(task)
        task.add_done_callback(reloads.discard)

    await wait_for_signal(on_hup)
    process.draining = True
    log.info("draining", extra={"event": "draining", "timeout_s": policy.server.drain_timeout_s})
    await runner.cleanup()
    log.info("stopped", extra={"event": "stopped"})
    ACCESS_LOG.flush()
    return 0
