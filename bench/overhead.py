"""What a router costs: direct-to-upstream vs through prefix-gateway and its peers, side by side in one run.

    python -m bench.overhead [--requests 3000] [--rounds 3] [--peers smg sglang-router] [--baseline DIR]
                             [--workers N] [--write]

Upstreams are simulated vLLM replicas in their own process: one with no modelled latency (``--speed 0``:
what is measured is the router's own cost) and one that answers after 50 ms (a real model's latency:
what is measured is the tail the router adds). The routers, each its own process in front of the same
upstream: prefix-gateway as its quick start runs it (``prefix-gateway serve --replica URL --model M``:
default policy, response cache, billing ledger, metrics and access log all on), optionally the gateway
of another checkout (``--baseline DIR``: before and after in one run), and the peers users compare us
with, installed from PyPI into side venvs (``bench.peers``; never project dependencies), each with its
``cache_aware`` policy. The load generator (``bench.loadgen``, aiohttp) is this process.

Scenarios: non-stream and stream (8 chunks) at concurrency 32, non-stream at concurrency 1, and the
50 ms upstream at concurrency 32. Targets alternate within each round, ``--rounds`` times, each round
starting one router further along (the router measured right after direct ran slowest at
concurrency 1, whichever checkout it was: issue 30, round 5): the best
round's throughput is kept (noise on a shared machine only ever slows a run), latencies are pooled
over all rounds. CPU per request is the router process's (and its children's) user+system CPU over the
requests of a measurement (psutil), so a reader can size a deployment: 1 / CPU-per-request is the
requests per second one core sustains.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.loadgen import LoadResult, run_load
from bench.peers import PEERS, start_peer
from bench.procs import Proc, running, start_gateway, start_sim
from bench.report import percentile, table, write_section

MODEL = "sim-llama"
MAX_TOKENS = 8  # a streamed answer is 8 content chunks
ZERO = ["--mode", "simple", "--speed", "0"]
SLOW = [
    "--mode", "simple", "--speed", "1", "--overhead-s", "0.05",
    "--prefill-s-per-token", "0", "--decode-s-per-token", "0", "--max-num-seqs", "100000",
]  # fmt: skip


def body(i: int) -> dict:
    return {
        "model": MODEL,
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": f"request {i}: summarise the plot of a short story."}],
    }


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    upstream: str  # "zero" or "slow"
    concurrency: int
    stream: bool
    share: float  # of --requests


SCENARIOS = (
    Scenario("non-stream c=32", "zero", 32, False, 1.0),
    Scenario("stream (8 chunks) c=32", "zero", 32, True, 1.0),
    Scenario("non-stream c=1", "zero", 1, False, 0.15),
    Scenario("50 ms upstream c=32", "slow", 32, False, 0.7),
)


@dataclass
class Tally:
    best: LoadResult | None = None
    latencies: list[float] = field(default_factory=list)
    cpu_ms: float = float("inf")  # per request, the least of the rounds

    def add(self, r: LoadResult, cpu_ms: float) -> None:
        if self.best is None or r.rps > self.best.rps:
            self.best = r
        self.latencies.extend(r.latencies)
        self.cpu_ms = min(self.cpu_ms, cpu_ms)

    def p(self, q: float) -> float:
        return percentile(self.latencies, q)


def cpu_seconds(pid: int) -> float:
    proc = psutil.Process(pid)
    total = 0.0
    for p in (proc, *proc.children(recursive=True)):
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


async def measure(url: str, pid: int | None, n: int, sc: Scenario) -> tuple[LoadResult, float]:
    """Warm up, then ``n`` requests; the result and the CPU ms per request of process ``pid``."""
    warm = await run_load(url, body, requests=min(200, n), concurrency=sc.concurrency, stream=sc.stream)
    assert warm.errors == 0, (url, warm.statuses)
    before = cpu_seconds(pid) if pid else 0.0
    r = await run_load(url, body, requests=n, concurrency=sc.concurrency, stream=sc.stream)
    assert r.errors == 0, (url, r.statuses)
    cpu = (cpu_seconds(pid) - before) / max(1, r.ok) * 1000 if pid else float("nan")
    return r, cpu


def start_targets(upstream: str, args: argparse.Namespace, workdir: Path) -> list[tuple[str, Proc]]:
    flags = ["--replica", upstream, "--model", MODEL]
    if args.workers > 1:
        flags += ["--workers", str(args.workers)]
    out = [("prefix-gateway", start_gateway(flags, log_path=str(workdir / "gateway.log")))]
    if args.baseline:
        out.append(
            ("baseline", start_gateway(flags, checkout=args.baseline, log_path=str(workdir / "base.log")))
        )
    for name in args.peers:
        out.append((name, start_peer(PEERS[name], [upstream], str(workdir / f"{name}.log")).proc))
    return out


async def run_upstream(kind: str, scenarios: list[Scenario], args: argparse.Namespace, workdir: Path) -> list:
    sim, urls = start_sim(
        1, extra=ZERO if kind == "zero" else SLOW, log_path=str(workdir / f"sim-{kind}.log")
    )
    rows = []
    with running(sim):
        targets = start_targets(urls[0], args, workdir)
        with running(*(p for _, p in targets)):
            for sc in scenarios:
                n = max(200, int(args.requests * sc.share))
                tallies = {name: Tally() for name in ["direct", *(t for t, _ in targets)]}
                for k in range(args.rounds):
                    r, cpu = await measure(urls[0] + "/v1/chat/completions", sim.pid, n, sc)
                    tallies["direct"].add(r, cpu)
                    # Each round starts the routers one further along: the one measured right after
                    # direct had the worst c=1 CPU in three runs out of three, whichever tree it was.
                    for name, proc in targets[k % len(targets) :] + targets[: k % len(targets)]:
                        r, cpu = await measure(proc.url + "/v1/chat/completions", proc.pid, n, sc)
                        tallies[name].add(r, cpu)
                new = scenario_rows(sc, tallies)
                rows += new
                for row in new:
                    print(row, flush=True)
    return rows


def scenario_rows(sc: Scenario, tallies: dict[str, Tally]) -> list[list[str]]:
    direct = tallies["direct"]
    assert direct.best is not None
    rows = []
    for name, t in tallies.items():
        if name == "direct":
            continue
        assert t.best is not None
        added = " / ".join(f"{(t.p(q) - direct.p(q)) * 1000:+.2f}" for q in (50, 90, 99))
        rows.append(
            [
                sc.name,
                name,
                f"{t.best.rps:,.0f}",
                f"{t.best.rps / direct.best.rps:.2f}",
                f"{t.p(50) * 1000:.2f} / {t.p(99) * 1000:.2f}",
                added,
                f"{t.cpu_ms:.3f}",
                f"{1000 / t.cpu_ms:,.0f}" if t.cpu_ms > 0 else "-",
            ]
        )
    rows.append(
        [
            sc.name,
            "direct",
            f"{direct.best.rps:,.0f}",
            "1.00",
            f"{direct.p(50) * 1000:.2f} / {direct.p(99) * 1000:.2f}",
            "0",
            "",
            "",
        ]
    )
    return rows


async def main_async(args: argparse.Namespace) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="pgw-overhead-"))
    rows = []
    for kind in ("zero", "slow"):
        rows += await run_upstream(kind, [s for s in SCENARIOS if s.upstream == kind], args, workdir)
    headers = [
        "scenario",
        "router",
        "req/s",
        "share of direct",
        "p50 / p99 ms",
        "added p50 / p90 / p99 ms",
        "router CPU ms / req",
        "req/s per core",
    ]
    cmd = "python -m bench.overhead " + " ".join(sys.argv[1:])
    return (
        "## Gateway overhead\n\n"
        f"Command: `{cmd.strip()}` on {platform.machine()}, {psutil.cpu_count()} cores, Python "
        f"{platform.python_version()}. One simulated upstream with no modelled latency and one answering "
        "after 50 ms; prefix-gateway as its quick start runs it (default policy, response cache, billing, "
        "metrics and access log on), the peers from PyPI with `cache_aware`; load generator, upstream and "
        "router are separate processes sharing the cores. req/s: the best of "
        f"{args.rounds} alternating rounds; latencies pooled over them; CPU: the router process's, per "
        "request, least of the rounds.\n\n" + table(headers, rows)
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--requests", type=int, default=3000, help="requests per measurement at concurrency 32"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--peers", nargs="*", default=list(PEERS), choices=list(PEERS), help="peers to run (default: all)"
    )
    parser.add_argument("--baseline", metavar="DIR", help="also run the gateway of this checkout")
    parser.add_argument("--workers", type=int, default=1, help="prefix-gateway serve --workers N")
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
