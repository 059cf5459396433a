"""Start the simulator and the gateway as separate processes on loopback, for benchmarks and tests
that need real process boundaries (CPU accounting, two gateway processes, kill -9).

Each process runs in a working directory of its own, removed when it stops: whatever a policy names
relative to the working directory (the quick start's ``var/ledger.db``) never lands in the checkout,
and two gateways never share it."""

from __future__ import annotations

import fcntl
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx


def _port_range() -> range:
    """The ports handed out: below the kernel's ephemeral range, so an outgoing connection never takes
    one between the check and a child's bind, and under the policy's default metrics port (29000)."""
    try:
        low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])  # noqa: SIM115
    except (OSError, ValueError, IndexError):
        low = 32768
    return range(10_000, min(low, 28_000))


_RANGE = _port_range()
_next = random.randrange(len(_RANGE))
# A port handed out is reserved machine-wide by an exclusive lock on its file here, held by this
# process for its next HELD allocations (by then the child has bound it or is gone): every process
# that allocates through this function (the suite's xdist workers, another suite or a benchmark run
# at the same time) skips it. Without it, two runs on one machine handed out one port, and the
# health check of one gateway was answered by another run's gateway on it.
_LOCKS = Path(tempfile.gettempdir()) / "pgw-ports"
HELD = 512
_held: deque[int] = deque()


def _reserve(port: int) -> bool:
    _LOCKS.mkdir(exist_ok=True)
    fd = os.open(_LOCKS / str(port), os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _held.append(fd)
    while len(_held) > HELD:
        os.close(_held.popleft())  # closing the descriptor drops its lock
    return True


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(n: int) -> list[int]:
    """``n`` consecutive ports that bind now, reserved for this process (see ``_LOCKS``) and never
    handed out before by it until the range wraps: each test's servers get ports no other test, and
    no other run on the machine, is given."""
    global _next
    for _ in range(len(_RANGE)):
        if _next + n > len(_RANGE):
            _next = 0
        ports = [_RANGE[_next + k] for k in range(n)]
        _next += n
        if all(_bindable(p) for p in ports) and all(_reserve(p) for p in ports):
            return ports
    raise RuntimeError(f"no run of {n} free ports in {_RANGE}")


def free_port() -> int:
    return free_ports(1)[0]


@dataclass
class Proc:
    popen: subprocess.Popen[bytes]
    url: str
    metrics_url: str | None = None  # a gateway's /metrics listener
    workdir: str | None = None  # its working directory, removed at stop

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        return self.popen.returncode


# How long a started process may take to answer its first /health: a gateway start is about 1.2 s of
# CPU (imports), and a --workers 2 gateway three of them; on a two-core machine under a CPU hog and
# four test workers that took more than 20 s (scripts/flake_sweep.sh). Only a failure waits this long.
START_TIMEOUT_S = 90.0


def wait_http(
    url: str, timeout: float = START_TIMEOUT_S, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll ``url`` until it answers below 500. One client for the whole wait: ``httpx.get`` builds a
    client (and loads the CA bundle) per call, 0.1 s of CPU on a loaded machine, twenty times a second,
    taken from the process being waited for."""
    deadline = time.monotonic() + timeout
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
            try:
                if client.get(url).status_code < 500:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
    raise RuntimeError(f"{url} did not answer within {timeout}s")


def _spawn(
    args: list[str], env: dict[str, str] | None, log_path: str | None, checkout: str | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    """``python -m gateway ARGS`` in a fresh working directory (returned); ``checkout``: run another
    checkout's code (a worktree of an earlier commit, for before/after comparisons in one run)."""
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    env = {**os.environ, **(env or {})}
    env["PYTHONPATH"] = checkout or str(Path(__file__).resolve().parents[1])
    workdir = tempfile.mkdtemp(prefix="pgw-proc-")
    popen = subprocess.Popen(
        [sys.executable, "-m", "gateway", *args],
        stdout=out,
        stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL,
        env=env,
        cwd=workdir,
    )
    return popen, workdir


def start_sim(
    replicas: int, *, extra: list[str] | None = None, log_path: str | None = None, attempts: int = 3
) -> tuple[Proc, list[str]]:
    """The simulator on ``replicas`` consecutive free ports. Another process may take one of them
    between the check and the bind (the machine is shared): then it starts again on new ports."""
    for attempt in range(attempts):
        ports = free_ports(replicas)
        popen, workdir = _spawn(
            ["sim", "--replicas", str(replicas), "--base-port", str(ports[0]), *(extra or [])], None, log_path
        )
        urls = [f"http://127.0.0.1:{p}" for p in ports]
        try:
            _wait_or_stop(Proc(popen, urls[0], workdir=workdir), [u + "/health" for u in urls])
        except RuntimeError:
            if attempt + 1 == attempts:
                raise
            continue
        return Proc(popen, urls[0], workdir=workdir), urls
    raise AssertionError("not reached")


def start_gateway(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    log_path: str | None = None,
    port: int | None = None,
    checkout: str | None = None,
) -> Proc:
    port = port or free_port()
    head = ["serve", "--host", "127.0.0.1", "--port", str(port)]
    metrics_url = None
    if checkout is None or Path(checkout, "gateway", "process", "exposition.py").exists():
        # worker i of --workers N listens on metrics_port + i: every one of those must be free
        metrics_port = free_ports(_workers(args))[0]
        head += ["--metrics-port", str(metrics_port)]
        metrics_url = f"http://127.0.0.1:{metrics_port}"
    popen, workdir = _spawn([*head, *args], env, log_path, checkout)
    url = f"http://127.0.0.1:{port}"
    proc = Proc(popen, url, metrics_url, workdir)
    _wait_or_stop(proc, [url + "/health"])
    return proc


def _workers(args: list[str]) -> int:
    """The worker processes ``prefix-gateway serve args`` starts (``--workers N``, ``auto``: one a CPU)."""
    if "--workers" not in args:
        return 1
    given = args[args.index("--workers") + 1]
    return int(given) if given.isdigit() else os.cpu_count() or 1


def _wait_or_stop(proc: Proc, health_urls: list[str]) -> None:
    """Wait for every url to answer; a process that does not come up is stopped, not left behind."""
    try:
        for u in health_urls:
            wait_http(u, timeout=START_TIMEOUT_S, proc=proc.popen)
    except BaseException:
        proc.stop()
        raise


@contextmanager
def running(*procs: Proc) -> Iterator[None]:
    try:
        yield
    finally:
        for p in procs:
            p.stop()
