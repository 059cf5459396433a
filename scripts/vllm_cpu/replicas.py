"""Start, wait for and stop real vLLM CPU replicas of the tiny model, on loopback only.

Used by ``tests/real_vllm`` (as a module) and by hand (as a script)::

    python scripts/vllm_cpu/replicas.py start --n 2 --base-port 8100 [--kv-bytes 16M]
        [--kv-events tcp://127.0.0.1:5557 | --kv-events-bind] [--replay-base-port 5600] [--block-size 32]
    python scripts/vllm_cpu/replicas.py stop

``start`` prints the gateway policy (``precise_policy``) that matches the replicas it started: their
ids (``r0``, ``r1``), which are their KV-event topics, their replay sockets, block size and tokenizer.
docs/real-vllm.md shows that policy for the defaults (``tests/unit/test_real_vllm_docs.py`` keeps the
two equal).

Each replica: ``python -m vllm.entrypoints.openai.api_server`` from the vLLM venv, one OMP core
(``VLLM_CPU_OMP_THREADS_BIND``), ``--load-format dummy`` weights, prefix caching with
``sha256_cbor`` hashes (reproducible by the gateway, see ``router.vllm_hash``), prompt-token details
in usage, and optionally KV-cache events: published to the gateway's SUB socket under the topic
``replica_id`` (``--kv-events``, the gateway binds), or from a publisher each replica binds itself
(``--kv-events-bind``: ``ipc://$VLLM_CPU_HOME/run/<id>-<port>.kv-events``, replay on
``tcp://127.0.0.1:<--replay-base-port + i>``; every gateway process connects, ``kv_events.mode:
connect``). Loopback only, as the rest: vLLM binds its publisher only for an endpoint holding ``*``
(every interface) or ``ipc://`` and *connects* to any other (``tcp://127.0.0.1:...`` would connect), so
the publisher it binds is a Unix socket, which nothing off the host reaches; it used to be
``tcp://*:<base-port + 100 + i>``, on every interface (issue 31, item 8). The script writes pid files under
``$VLLM_CPU_HOME/run`` so that ``stop`` ends exactly the processes it started.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

HOME = Path(os.environ.get("VLLM_CPU_HOME", "/work/vllm-cpu"))
VENV = Path(os.environ.get("VLLM_CPU_VENV", str(HOME / "venv")))
MODEL_DIR = Path(os.environ.get("VLLM_CPU_MODEL", str(HOME / "tiny-llama")))
SERVED_NAME = "tiny-llama"
HASH_ALGO = "sha256_cbor"

# Words the tiny model's tokenizer knows as whole tokens: the text of every prompt the suite and the
# benchmark send.
WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "theta",
    "kappa",
    "lambda",
    "sigma",
    "omega",
    "river",
    "stone",
    "cloud",
    "field",
    "forest",
    "garden",
    "harbor",
    "island",
    "meadow",
    "mountain",
    "ocean",
    "valley",
    "canyon",
    "desert",
    "glacier",
    "prairie",
    "lagoon",
    "summit",
    "reef",
]


@dataclass
class ReplicaSpec:
    replica_id: str
    port: int
    core: int = 0  # VLLM_CPU_OMP_THREADS_BIND
    kv_bytes: str | None = None  # e.g. "16M": a small cache that evicts; None: VLLM_CPU_KVCACHE_SPACE
    kv_space_gib: int = 1
    block_size: int | None = None  # None: vLLM's CPU default (128); else a multiple of 32
    kv_events_endpoint: str | None = None  # the gateway's bound SUB socket, e.g. tcp://127.0.0.1:5557
    events_socket: Path | None = None  # the replica binds its own publisher here (ipc://path) instead
    replay_port: int | None = None  # ROUTER socket for missed batches (bound by the replica)
    max_num_seqs: int = 16
    dev_mode: bool = False  # VLLM_SERVER_DEV_MODE=1: POST /reset_prefix_cache (benchmarks reset between runs)
    extra_args: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def events_endpoint(self) -> str | None:
        """Where a gateway process connects to hear this replica (when it binds its publisher)."""
        return f"ipc://{self.events_socket}" if self.events_socket else None

    @property
    def replay_endpoint(self) -> str | None:
        return f"tcp://127.0.0.1:{self.replay_port}" if self.replay_port else None


def fleet_specs(
    n: int,
    events_endpoint: str | None = None,
    bind_events: bool = False,
    *,
    free_port: Callable[[], int],
    **common: Any,
) -> list[ReplicaSpec]:
    """``n`` replicas ``r0..``, each on a port of ``free_port()`` and its own core; with
    ``events_endpoint``, each publishes its KV events there, with ``bind_events`` from a publisher it
    binds itself; either way it binds a replay socket of its own. The ports are the caller's: the
    suite's allocator (``tests.support.ports``) or a benchmark's (``bench.procs``), so this script
    needs neither the tests nor the benchmarks."""
    events = events_endpoint is not None or bind_events
    return [
        ReplicaSpec(
            replica_id=f"r{i}",
            port=port,
            core=i,
            kv_events_endpoint=events_endpoint,
            events_socket=events_socket(f"r{i}", port) if bind_events else None,
            replay_port=free_port() if events else None,
            **common,
        )
        for i, port in enumerate(free_port() for _ in range(n))
    ]


def events_socket(replica_id: str, port: int) -> Path:
    """Where a replica started with ``bind_events`` binds its publisher (a Unix socket: loopback)."""
    return HOME / "run" / f"{replica_id}-{port}.kv-events"


@dataclass
class Replica:
    spec: ReplicaSpec
    popen: subprocess.Popen[bytes]
    log_path: Path

    @property
    def url(self) -> str:
        return self.spec.url

    def stop(self, timeout: float = 30.0) -> None:
        stop_pid(self.popen.pid, timeout)
        self.popen.poll()


def python() -> Path:
    return VENV / "bin" / "python"


def check_installed() -> None:
    if not python().is_file():
        raise RuntimeError(f"no vLLM venv at {VENV}: run scripts/vllm_cpu/setup.sh first")
    if not (MODEL_DIR / "config.json").is_file():
        raise RuntimeError(f"no tiny model at {MODEL_DIR}: run scripts/vllm_cpu/setup.sh first")


def command(spec: ReplicaSpec) -> list[str]:
    args = [
        str(python()),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(MODEL_DIR),
        "--served-model-name",
        SERVED_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(spec.port),
        "--load-format",
        "dummy",
        "--dtype",
        "float32",
        "--enable-prefix-caching",
        "--prefix-caching-hash-algo",
        HASH_ALGO,
        "--enable-prompt-tokens-details",
        "--max-model-len",
        "4096",
        "--max-num-seqs",
        str(spec.max_num_seqs),
    ]
    if spec.block_size is not None:
        if spec.block_size % 32:
            raise ValueError("the CPU backend needs --block-size to be a multiple of 32")
        args += ["--block-size", str(spec.block_size)]
    if spec.kv_bytes is not None:
        args += ["--kv-cache-memory-bytes", spec.kv_bytes]
    if spec.kv_events_endpoint is not None or spec.events_socket is not None:
        events = {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            # vLLM binds an endpoint with "*" or ipc:// (its own publisher) and connects to any other
            "endpoint": spec.kv_events_endpoint or spec.events_endpoint,
            "topic": spec.replica_id,
        }
        if spec.replay_endpoint:
            events["replay_endpoint"] = spec.replay_endpoint
        args += ["--kv-events-config", json.dumps(events)]
    return args + spec.extra_args


def environment(spec: ReplicaSpec) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("VLLM_CPU_KVCACHE_SPACE", "PYTHONHASHSEED", "VIRTUAL_ENV", "PYTHONPATH"):
        env.pop(var, None)  # never set empty: vLLM reads "" as a value
    if spec.kv_bytes is None:
        env["VLLM_CPU_KVCACHE_SPACE"] = str(spec.kv_space_gib)  # it overrides --kv-cache-memory-bytes
    env.update(
        VLLM_CPU_OMP_THREADS_BIND=str(spec.core),
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        VLLM_LOGGING_LEVEL=os.environ.get("VLLM_LOGGING_LEVEL", "WARNING"),
        VLLM_SERVER_DEV_MODE="1" if spec.dev_mode else "0",
        PATH=f"{VENV / 'bin'}:{env.get('PATH', '')}",
    )
    return env


def start(spec: ReplicaSpec, log_dir: Path | None = None) -> Replica:
    check_installed()
    log_dir = log_dir or HOME / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    if spec.events_socket is not None:
        spec.events_socket.parent.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{spec.replica_id}.log"
    out = open(log_path, "wb")  # noqa: SIM115 - owned by the child process
    popen = subprocess.Popen(
        command(spec),
        stdout=out,
        stderr=subprocess.STDOUT,
        env=environment(spec),
        cwd=str(HOME),
        start_new_session=True,  # its own process group: stop() ends the engine core child too
    )
    out.close()
    return Replica(spec, popen, log_path)


def wait_ready(replicas: Sequence[Replica], timeout_s: float = 300.0) -> None:
    """Until every replica answers ``/v1/models`` (about 50 s each; they start in parallel)."""
    deadline = time.monotonic() + timeout_s
    pending = list(replicas)
    while pending and time.monotonic() < deadline:
        for r in list(pending):
            if r.popen.poll() is not None:
                tail = r.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"replica {r.spec.replica_id} exited ({r.popen.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(r.url + "/v1/models", timeout=2) as resp:
                    if resp.status == 200:
                        pending.remove(r)
            except (urllib.error.URLError, OSError):
                pass
        if pending:
            time.sleep(1.0)
    if pending:
        raise RuntimeError(f"replicas not ready within {timeout_s}s: {[r.spec.replica_id for r in pending]}")


def stop_pid(pid: int, timeout: float = 30.0) -> None:
    """SIGTERM the replica's process group (API server + engine core), SIGKILL after ``timeout``."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pid, 0)
        except ProcessLookupError:
            return
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


# -- CLI ----------------------------------------------------------------------------------------------
def _run_dir() -> Path:
    d = HOME / "run"
    d.mkdir(parents=True, exist_ok=True)
    return d


def precise_policy(
    specs: Sequence[ReplicaSpec], bind: str | None, model_dir: Path = MODEL_DIR
) -> dict[str, Any]:
    """The gateway's ``models`` entry for these replicas in precise mode: events to ``bind``, or (None)
    from each replica's own publisher, which every gateway process connects to."""
    block = specs[0].block_size
    replay = {s.replica_id: s.replay_endpoint for s in specs if s.replay_endpoint}
    events: dict[str, Any] = (
        {"bind": bind, "topics": {s.replica_id: s.replica_id for s in specs}, "replay": replay}
        if bind is not None
        else {
            "mode": "connect",
            "endpoints": {s.replica_id: s.events_endpoint for s in specs},
            "replay": replay,
        }
    )
    return {
        "models": [
            {
                "name": SERVED_NAME,
                "backend": "vllm",
                "replicas": [{"id": s.replica_id, "url": s.url} for s in specs],
                "routing": {
                    "policy": "prefix_affinity",
                    "index": "precise",
                    "block_size": 32,
                    "engine_block_size": block,
                    "hash_algo": HASH_ALGO,
                    "hash_seed": None,
                    "tokenizer": {"kind": "hf", "path": str(model_dir / "tokenizer.json")},
                    "kv_events": {**events, "speculative_ttl_s": 5, "replay_timeout_s": 1},
                },
            }
        ]
    }


def cli_specs(args: argparse.Namespace) -> list[ReplicaSpec]:
    """The replicas ``start`` runs: ``r0..`` on consecutive ports and cores (their ids are their
    topics), each with a replay socket when events are on."""
    return [
        ReplicaSpec(
            replica_id=f"r{i}",
            port=args.base_port + i,
            core=i,
            kv_bytes=args.kv_bytes,
            block_size=args.block_size,
            kv_events_endpoint=args.kv_events,
            events_socket=events_socket(f"r{i}", args.base_port + i) if args.kv_events_bind else None,
            replay_port=args.replay_base_port + i if args.kv_events or args.kv_events_bind else None,
        )
        for i in range(args.n)
    ]


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description="real vLLM CPU replicas of the tiny model")
    sub = ap.add_subparsers(dest="cmd", required=True)
    st = sub.add_parser("start")
    st.add_argument("--n", type=int, default=2, choices=(1, 2))
    st.add_argument("--base-port", type=int, default=8100)
    st.add_argument("--kv-bytes", default=None, help="e.g. 16M (small evicting cache)")
    st.add_argument("--block-size", type=int, default=32, help="a multiple of 32 (the CPU backend's rule)")
    st.add_argument("--kv-events", default=None, help="gateway SUB endpoint, e.g. tcp://127.0.0.1:5557")
    st.add_argument("--kv-events-bind", action="store_true", help="each replica binds its publisher")
    st.add_argument(
        "--replay-base-port", type=int, default=5600, help="replica i binds its replay socket here + i"
    )
    sub.add_parser("stop")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.cmd == "stop":
        for pidfile in sorted(_run_dir().glob("*.pid")):
            stop_pid(int(pidfile.read_text()))
            pidfile.unlink()
            print(f"stopped {pidfile.stem}")
        return 0
    reps = []
    specs = cli_specs(args)
    for spec in specs:
        r = start(spec)
        (_run_dir() / f"{spec.replica_id}.pid").write_text(str(r.popen.pid))
        reps.append(r)
    wait_ready(reps)
    for r in reps:
        events = f" events={r.spec.events_endpoint}" if r.spec.events_socket else ""
        print(f"{r.spec.replica_id} {r.url}{events} log={r.log_path}")
    if args.kv_events or args.kv_events_bind:
        print("# the gateway policy for these replicas (precise mode):")
        print(yaml.safe_dump(precise_policy(specs, args.kv_events), sort_keys=False), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
