"""``prefix-gateway serve --workers N``: N full gateway processes on one port (SO_REUSEPORT).

The parent only supervises: it starts the workers (``python -m gateway serve ... --reuse-port``),
forwards SIGTERM/SIGINT (each worker drains on its own) and SIGHUP (each reloads its policy file), and
restarts a worker that dies while not stopping, at most ``MAX_RESTARTS`` times per minute (a worker that
cannot start at all must not loop). It exits 0 when every worker exited 0 after a stop signal.

The kernel spreads new connections over the listening workers. State per worker: in-flight counts,
prefix index, breakers, admission; shared through Redis (when configured): response cache, coalescing,
buckets, billing ledger; with ``shared_index.enabled``, placements (through Redis, or without it through
the Unix sockets of a directory the supervisor creates for its workers, ``PREFIX_GATEWAY_SHARED_DIR``).
The workers hash prompts with one server secret: the operator's (``tenancy.secret_env``), or when it is
unset one the supervisor draws at start and hands every worker (a restarted one too) in
``PREFIX_GATEWAY_WORKERS_SECRET``, never logged. Each worker drawing its own made their block hashes
differ, so the placements they shared never matched: on the Mooncake conversation trace two workers
reached 0.179 hit against one process's 0.263 (0.68x), and 0.263 with one secret. A drawn secret lives as
long as the supervisor; pods sharing Redis need the operator's (``serve`` refuses them without it).
Every worker serves the Files and Batches API (one job store on the host, or Redis); only worker 0
runs batches, so one slot pool holds each replica's batch share (``Process.worker``).
See docs/operations.md.
"""

from __future__ import annotations

import ctypes
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from pathlib import Path

from gateway.fleet.sharing.unix import ENV_DIR
from gateway.pipeline.tenant import WORKERS_SECRET_ENV

log = logging.getLogger("prefix_gateway")

MAX_RESTARTS = 5  # per worker slot, per minute
POLL_S = 0.2
WORKER_ENV = "PREFIX_GATEWAY_WORKER"  # a worker's index (``Process.worker``: its metrics listener is
# server.metrics_port + index; worker 0 runs batches, and a worker restarted in its slot keeps its index,
# so a batch of a dead worker 0 resumes there)


def usable_cpus() -> int:
    """The cores this process may use, for ``--workers auto``: the CPU affinity mask (taskset, a cpuset),
    capped by a cgroup v2 CPU quota (``cpu.max``: a container's ``resources.limits.cpu``), rounded up;
    at least 1. One worker per core: a worker is one event loop on one core."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, n)


def parse_workers(value: str) -> int:
    """``--workers``: a count, or ``auto`` (one per usable core)."""
    if value == "auto":
        return usable_cpus()
    n = int(value)
    if n < 1:
        raise ValueError("--workers must be at least 1")
    return n


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM (and so drain) if the supervisor dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass


def _spawn(argv: list[str], index: int, env: dict[str, str]) -> subprocess.Popen[bytes]:
    env = {**env, WORKER_ENV: str(index)}
    return subprocess.Popen([sys.executable, "-m", "gateway", *argv], env=env, preexec_fn=_die_with_parent)


def workers_env(secret_env: str, shared_dir: str) -> dict[str, str]:
    """The environment of every worker: this one, the shared-index directory, and when ``secret_env``
    is unset one secret drawn here for all of them (the operator's, when set, is theirs already)."""
    env = {ENV_DIR: shared_dir, **os.environ}
    env.pop(WORKERS_SECRET_ENV, None)
    if not os.environ.get(secret_env):
        env[WORKERS_SECRET_ENV] = secrets.token_urlsafe(32)
        log.warning(
            "server secret not set; the workers share one drawn for this run",
            extra={"event": "secret_drawn", "env": secret_env},
        )
    return env


# An AF_UNIX socket's path is at most 107 bytes; a worker's socket is ``<pid>-<8 hex>.sock`` (at most 22
# bytes with its slash) in a directory ``pgw-workers-`` + 8 characters long.
SUN_PATH_MAX = 107
SOCKET_NAME_MAX = 22
_DIR_NAME = len("/pgw-workers-") + 8


def shared_socket_dir(parents: tuple[str, ...] = ()) -> str:
    """A new directory for the workers' shared-index sockets: under the temporary directory, or under
    /tmp when that one's path is too long for a socket (a long ``TMPDIR`` made every worker's bind fail,
    and the shared index share nothing, with only a warning)."""
    candidates = parents or (tempfile.gettempdir(), "/tmp")
    for parent in candidates:
        fits = len(parent.rstrip("/")) + _DIR_NAME + SOCKET_NAME_MAX <= SUN_PATH_MAX
        if fits and os.path.isdir(parent) and os.access(parent, os.W_OK):
            return tempfile.mkdtemp(prefix="pgw-workers-", dir=parent)
    raise SystemExit(
        f"error: none of {list(candidates)} can hold the workers' sockets (a Unix socket's path is at most"
        f" {SUN_PATH_MAX} bytes, or the directory is not writable): set TMPDIR to a short directory"
    )


def supervise(argv: list[str], workers: int, secret_env: str) -> int:
    """Run ``workers`` workers until they all exit; the directory of their shared-index sockets and a
    secret drawn for them (``secret_env`` unset) live as long as this supervisor."""
    shared_dir = shared_socket_dir()
    try:
        return _supervise(argv, workers, workers_env(secret_env, shared_dir))
    finally:
        shutil.rmtree(shared_dir, ignore_errors=True)


def _supervise(argv: list[str], workers: int, env: dict[str, str]) -> int:
    procs: list[subprocess.Popen[bytes]] = [_spawn(argv, i, env) for i in range(workers)]
    restarts: list[deque[float]] = [deque(maxlen=MAX_RESTARTS) for _ in range(workers)]
    stopping = False
    pending: list[int] = []

    def forward(sig: int, _frame: object) -> None:
        nonlocal stopping
        if sig in (signal.SIGTERM, signal.SIGINT):
            stopping = True
        pending.append(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, forward)
    log.info("workers started", extra={"event": "workers", "pids": [p.pid for p in procs]})
    while True:
        while pending:
            got = pending.pop(0)
            for p in procs:
                if p.poll() is None:
                    p.send_signal(got)
        if all(p.poll() is not None for p in procs):
            break
        if not stopping:
            for i, p in enumerate(procs):
                code = p.poll()
                if code is None:
                    continue
                now = time.monotonic()
                window = restarts[i]
                if len(window) == MAX_RESTARTS and now - window[0] < 60:
                    log.error(
                        "worker keeps dying; stopping", extra={"event": "worker_crashloop", "worker": i}
                    )
                    stopping = True
                    pending.append(signal.SIGTERM)
                    break
                window.append(now)
                log.warning(
                    "worker died; restarting", extra={"event": "worker_restart", "worker": i, "code": code}
                )
                procs[i] = _spawn(argv, i, env)
        time.sleep(POLL_S)
    codes = [p.returncode for p in procs]
    return 0 if all(c == 0 for c in codes) else 1
