"""What one simulated replica costs per request at ``--speed 0`` (the floor of the overhead benchmark).

    python -m bench.sim_selfbench [--requests 4000] [--concurrency 16]

Starts ``python -m sim --speed 0`` as its own process, drives it with ``bench.loadgen`` from this
one, and reports requests/s and the simulator process's CPU time per request (psutil), for
non-stream and stream chat completions.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import subprocess
import sys
from pathlib import Path

import psutil

from bench.loadgen import run_load

ROOT = Path(__file__).resolve().parents[1]


def body(i: int) -> dict:
    return {
        "model": "sim-llama",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": f"request {i}: summarise the plot of a short story."}],
    }


def cpu_seconds(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system


async def measure(url: str, pid: int, requests: int, concurrency: int) -> list[str]:
    proc = psutil.Process(pid)
    lines = []
    for stream in (False, True):
        await run_load(url, body, requests=min(300, requests), concurrency=concurrency, stream=stream)
        before = cpu_seconds(proc)
        r = await run_load(url, body, requests=requests, concurrency=concurrency, stream=stream)
        cpu_us = (cpu_seconds(proc) - before) / max(1, r.ok) * 1e6
        mode = "stream" if stream else "non-stream"
        lines.append(f"| {mode} | {concurrency} | {r.ok} | {r.rps:,.0f} | {cpu_us:.0f} | {r.errors} |")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--mode", choices=("simple", "engine"), default="simple", help="the simulator's model"
    )
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sim = subprocess.Popen(
        [sys.executable, "-m", "sim", "--mode", args.mode, "--speed", "0", "--base-port", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )
    try:
        assert sim.stdout is not None
        url = sim.stdout.readline().split()[3] + "/v1/chat/completions"
        try:
            import uvloop

            runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
        except ImportError:
            runner = asyncio.Runner()
        with runner:
            rows = runner.run(measure(url, sim.pid, args.requests, args.concurrency))
    finally:
        sim.terminate()
        sim.wait(10)
    print(f"python -m bench.sim_selfbench {' '.join(sys.argv[1:])}".strip())
    print(f"{platform.machine()}, {psutil.cpu_count()} cores, Python {platform.python_version()}\n")
    print("| mode | concurrency | requests | req/s | sim CPU µs / req | errors |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
