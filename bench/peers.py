"""The routers users compare us with, installed from PyPI into side virtualenvs and run as processes.

Never project dependencies: each peer gets its own venv under ``~/.cache/prefix-gateway/bench-peers``
(``PREFIX_GATEWAY_PEERS_DIR`` overrides), made once with ``python -m venv`` and ``pip install``; the two
cannot share one (sglang-router 0.3.2 installs its own ``smg`` command over smg's). Each is started
with its ``cache_aware`` policy in front of the given worker URLs, as its README shows, on loopback
ports, and stopped with SIGTERM.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.procs import Proc, free_port, wait_http

# How long a started peer may take to list every worker healthy after its /health first answers.
WORKERS_TIMEOUT_S = 60.0


@dataclass(frozen=True, slots=True)
class Peer:
    name: str  # the benchmark's row name
    requirement: str  # what pip installs
    module: str  # python -m <module> [subcommand]
    subcommand: tuple[str, ...]
    branch_metric: str | None  # the counter of its cache-aware decisions by branch, if it has one
    extra: tuple[str, ...] = ()  # flags beyond its defaults (each with its reason below)

    @property
    def dir_name(self) -> str:
        return self.requirement.replace("==", "-")


# smg polls its workers' load every 10 s by default; the trace replay runs about 40x faster than real
# time, so it polls every 1 s (the least it accepts, and the gateway's own scrape interval) to see loads
# no staler than the gateway does. sglang-router 0.3.2 polls nothing (in-flight counts only).
PEERS: dict[str, Peer] = {
    "smg": Peer(
        "smg",
        "smg==1.13.0",
        "smg",
        ("launch",),
        "smg_cache_aware_policy_branch_total",
        ("--load-monitor-interval", "1"),
    ),
    "sglang-router": Peer("sglang-router", "sglang-router==0.3.2", "sglang_router.launch_router", (), None),
}


def peers_dir() -> Path:
    root = os.environ.get("PREFIX_GATEWAY_PEERS_DIR")
    return Path(root) if root else Path.home() / ".cache" / "prefix-gateway" / "bench-peers"


def ensure_installed(peer: Peer, log: Path | None = None) -> Path:
    """The python of the peer's venv, creating the venv and installing the peer the first time."""
    venv = peers_dir() / peer.dir_name
    python = venv / "bin" / "python"
    marker = venv / ".installed"
    if marker.exists() and python.exists():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - closed below
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, stdout=out, stderr=out)
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", peer.requirement],
            check=True,
            stdout=out,
            stderr=out,
            timeout=900,
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]
    marker.write_text(peer.requirement + "\n")
    return python


@dataclass
class PeerProc:
    proc: Proc
    metrics_url: str


def start_peer(peer: Peer, worker_urls: list[str], log_path: str | None = None) -> PeerProc:
    """Start ``peer`` with its cache_aware policy in front of ``worker_urls``; returns when it answers."""
    python = ensure_installed(peer, Path(log_path) if log_path else None)
    port, prom = free_port(), free_port()
    args = [
        str(python), "-m", peer.module, *peer.subcommand,
        "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", *worker_urls,
        "--policy", "cache_aware",
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(prom),
        "--log-level", "warn",
        *peer.extra,
    ]  # fmt: skip
    out = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    popen = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT if log_path else subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(url + "/health", timeout=60.0, proc=popen)
        wait_workers(url, worker_urls, WORKERS_TIMEOUT_S, popen)
    except BaseException:
        Proc(popen, url).stop()
        raise
    return PeerProc(Proc(popen, url), f"http://127.0.0.1:{prom}/metrics")


def workers_ready(listing: Mapping[str, object], worker_urls: list[str]) -> bool:
    """Whether a peer's ``GET /workers`` answer lists every one of ``worker_urls`` as healthy. Both
    peers answer ``{"workers": [{"url": ..., "is_healthy": ...}, ...]}`` (smg 1.13.0, sglang-router
    0.3.2, read off the installed versions); a worker whose entry has no ``is_healthy`` counts as
    healthy. ``/health`` alone is not readiness: sglang-router 0.3.2 was seen in an earlier round
    answering it before the workers given on its command line were registered, so a run started on
    it could send its first requests to a router with fewer workers than the run says (on 2026-12-04,
    three starts of each peer in front of two simulated replicas listed both healthy at the first
    poll after ``/health``, 0.04-0.07 s: the wait costs nothing when they are ready)."""
    entries = listing.get("workers")
    if not isinstance(entries, list):
        return False
    healthy = {
        str(e.get("url", "")).rstrip("/")
        for e in entries
        if isinstance(e, dict) and e.get("is_healthy", True) is True
    }
    return all(u.rstrip("/") in healthy for u in worker_urls)


def wait_workers(
    url: str, worker_urls: list[str], timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Poll the peer's ``/workers`` until :func:`workers_ready`, or raise after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    with httpx.Client(timeout=1.0) as client:
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"peer exited with {proc.returncode} before its workers were ready")
            try:
                r = client.get(url + "/workers")
                last = f"{r.status_code} {r.text[:200]}"
                if r.status_code == 200 and workers_ready(r.json(), worker_urls):
                    return
            except (httpx.HTTPError, ValueError) as e:
                last = repr(e)
            time.sleep(0.05)
    raise RuntimeError(f"{url}/workers did not list {worker_urls} healthy within {timeout}s (last: {last})")
