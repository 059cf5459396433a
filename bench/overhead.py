"""What the gateway costs: direct-to-simulator vs through-the-gateway, side by side in one run.

    python -m bench.overhead [--requests 3000] [--write]

A zero-latency simulator (``--speed 0``) in its own process, the gateway (default policy) in its own
process, the load generator in this one. For each of non-stream and stream, at concurrency 1 and 64:
requests/s, p50/p99 latency, and the gateway process's CPU seconds per 1,000 requests (psutil).
Direct and gateway runs alternate, twice each, and the better run of each is kept, to damp the noise of
a small shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys

import psutil

from bench.loadgen import LoadResult, run_load
from bench.procs import running, start_gateway, start_sim
from bench.report import percentile, table, write_section

MODEL = "sim-llama"


def body(i: int) -> dict:
    return {
        "model": MODEL,
        "max_tokens": 16,
        "messages": [{"role": "user", "content": f"request {i}: summarise the plot of a short story."}],
    }


async def measure(url: str, requests: int, concurrency: int, stream: bool) -> LoadResult:
    warm = await run_load(url, body, requests=min(200, requests), concurrency=concurrency, stream=stream)
    assert warm.errors == 0, warm.statuses
    return await run_load(url, body, requests=requests, concurrency=concurrency, stream=stream)


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


async def main_async(args: argparse.Namespace) -> str:
    sim, urls = start_sim(1, extra=["--mode", "simple", "--speed", "0"])
    gw = start_gateway(["--replica", urls[0], "--model", MODEL])
    rows = []
    with running(gw, sim):
        for stream in (False, True):
            for conc in (1, 64):
                n = args.requests if conc > 1 else max(300, args.requests // 4)
                best_direct: LoadResult | None = None
                best_gw: LoadResult | None = None
                best_cpu = float("inf")
                for _ in range(args.rounds):
                    d = await measure(urls[0] + "/v1/chat/completions", n, conc, stream)
                    before = cpu_seconds(gw.pid)
                    g = await measure(gw.url + "/v1/chat/completions", n, conc, stream)
                    cpu = (cpu_seconds(gw.pid) - before) / (g.ok + min(200, n)) * 1000
                    assert d.errors == 0 and g.errors == 0, (d.statuses, g.statuses)
                    if best_direct is None or d.rps > best_direct.rps:
                        best_direct = d
                    if best_gw is None or g.rps > best_gw.rps:
                        best_gw = g
                    best_cpu = min(best_cpu, cpu)
                assert best_direct is not None and best_gw is not None
                dp50, dp99 = percentile(best_direct.latencies, 50), percentile(best_direct.latencies, 99)
                gp50, gp99 = percentile(best_gw.latencies, 50), percentile(best_gw.latencies, 99)
                rows.append(
                    [
                        "stream" if stream else "non-stream",
                        conc,
                        n,
                        f"{best_direct.rps:,.0f}",
                        f"{best_gw.rps:,.0f}",
                        f"{best_gw.rps / best_direct.rps:.2f}",
                        f"{dp50 * 1000:.2f} / {dp99 * 1000:.2f}",
                        f"{gp50 * 1000:.2f} / {gp99 * 1000:.2f}",
                        f"{(gp50 - dp50) * 1000:+.2f}",
                        f"{best_cpu:.2f}",
                    ]
                )
                print(rows[-1], flush=True)
    headers = [
        "mode",
        "concurrency",
        "requests",
        "direct req/s",
        "gateway req/s",
        "ratio",
        "direct p50 / p99 ms",
        "gateway p50 / p99 ms",
        "added p50 ms",
        "gateway CPU s / 1k req",
    ]
    cmd = "python -m bench.overhead " + " ".join(sys.argv[1:])
    return (
        "## Gateway overhead\n\n"
        f"Command: `{cmd.strip()}` on {platform.machine()}, {psutil.cpu_count()} cores, Python "
        f"{platform.python_version()}. Simulator with `--speed 0` (no modelled latency), default policy "
        "(`prefix_affinity`), unique prompts; load generator, simulator and gateway are three processes "
        f"sharing the cores; best of {args.rounds} alternating rounds.\n\n" + table(headers, rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=3000, help="requests per measurement at concurrency 64"
    )
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    try:
        import uvloop

        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    with runner:
        md = runner.run(main_async(args))
    print(md)
    if args.write:
        write_section("overhead", md)


if __name__ == "__main__":
    main()
