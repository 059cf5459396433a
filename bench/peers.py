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
from dataclasses import dataclass
from pathlib import Path

from bench.procs import Proc, free_port, wait_http


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
    except BaseException:
        Proc(popen, url).stop()
        raise
    return PeerProc(Proc(popen, url), f"http://127.0.0.1:{prom}/metrics")
