"""What the gateway costs: direct-to-simulator vs through-the-gateway, side by side in one run.

    python -m bench.overhead [--requests 3000] [--rounds 2] [--baseline DIR] [--write]

A zero-latency simulator (``--speed 0``) in its own process, the gateway (default policy) in its own
process, the load generator in this one. For each of non-stream and stream, at concurrency 1 and 64:
requests/s, p50/p99 latency, and the gateway process's CPU seconds per 1,000 requests (psutil).
Direct and gateway runs alternate, ``--rounds`` times each, and the better run of each is kept, to damp
the noise of a small shared machine. ``--baseline DIR`` also runs the gateway of another checkout
(e.g. ``git worktree add DIR <commit>``) in the same alternation: before and after, in one run.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys

import psutil

from bench.loadgen import LoadResult, run_load
from bench.procs import Proc, running, start_gateway, start_sim
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
    flags = ["--replica", urls[0], "--model", MODEL]
    targets: list[tuple[str, Proc]] = [("gateway", start_gateway(flags))]
    if args.baseline:
        targets.append(("baseline", start_gateway(flags, checkout=args.baseline)))
    rows = []
    with running(*(p for _, p in targets), sim):
        for stream in (False, True):
            for conc in (1, 64):
                n = args.requests if conc > 1 else max(300, args.requests // 4)
                best_direct: LoadResult | None = None
                best: dict[str, LoadResult] = {}
                best_cpu = dict.fromkeys((name for name, _ in targets), float("inf"))
                for _ in range(args.rounds):
                    d = await measure(urls[0] + "/v1/chat/completions", n, conc, stream)
                    assert d.errors == 0, d.statuses
                    if best_direct is None or d.rps > best_direct.rps:
                        best_direct = d
                    for name, proc in targets:
                        before = cpu_seconds(proc.pid)
                        g = await measure(proc.url + "/v1/chat/completions", n, conc, stream)
                        cpu = (cpu_seconds(proc.pid) - before) / (g.ok + min(200, n)) * 1000
                        assert g.errors == 0, (name, g.statuses)
                        if name not in best or g.rps > best[name].rps:
                            best[name] = g
                        best_cpu[name] = min(best_cpu[name], cpu)
                assert best_direct is not None
                dp50, dp99 = percentile(best_direct.latencies, 50), percentile(best_direct.latencies, 99)
                for name, _ in targets:
                    g = best[name]
                    gp50, gp99 = percentile(g.latencies, 50), percentile(g.latencies, 99)
                    rows.append(
                        [
                            "stream" if stream else "non-stream",
                            conc,
                            n,
                            name,
                            f"{best_direct.rps:,.0f}",
                            f"{g.rps:,.0f}",
                            f"{g.rps / best_direct.rps:.2f}",
                            f"{dp50 * 1000:.2f} / {dp99 * 1000:.2f}",
                            f"{gp50 * 1000:.2f} / {gp99 * 1000:.2f}",
                            f"{(gp50 - dp50) * 1000:+.2f}",
                            f"{best_cpu[name]:.2f}",
                        ]
                    )
                    print(rows[-1], flush=True)
    headers = [
        "mode",
        "concurrency",
        "requests",
        "target",
        "direct req/s",
        "target req/s",
        "ratio",
        "direct p50 / p99 ms",
        "target p50 / p99 ms",
        "added p50 ms",
        "target CPU s / 1k req",
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
    parser.add_argument("--baseline", metavar="DIR", help="also run the gateway of this checkout")
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
