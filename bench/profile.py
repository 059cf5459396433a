"""Where the gateway's CPU goes under load: py-spy samples of a real gateway process, by component.

    python -m bench.profile [--stream] [--concurrency 32] [--requests 4000] [--checkout DIR] [--raw F]
                            [--gil | --calls [--top 25] | --gc | --threads]

The quick start's gateway (``serve --replica URL --model M``: default policy, response cache, billing,
metrics and access log) in front of a zero-latency simulator, warmed up, then sampled by py-spy (500 Hz,
every thread, non-blocking) while the load generator sends ``--requests`` unique requests. Each sample's
stack is charged to the first component, from the top of the stack down, whose frames it contains (so
"upstream client" is the HTTP client's own work, aiohttp's or ``gateway.upstream.lean``'s, under the
dispatch stage, not the stage's). ``--checkout`` profiles another checkout's gateway (before/after).
py-spy comes with the ``bench`` extra.

py-spy's samples are wall-clock: on a machine with more runnable processes than cores a thread that
the kernel preempted stays "active" in the sample, so the lines that wake another thread or process
collect the time the gateway then waited for a core, not CPU. On this 2-core machine at a load average
of 7 to 17 ``SimpleQueue.put`` (waking the ledger thread) had 5-8 % of the samples and the socket sends
15-18 %, while the ledger's code is 7 of the ~1,000 Python calls of a request (``--calls``). Two modes
are less fooled, and one measures what no sample shows:

- ``--gil``: only the thread holding the GIL is sampled (py-spy ``--gil``): drops the ledger thread's
  waits, still charges a preempted GIL holder.
- ``--calls``: the gateway runs under cProfile (``python -m cProfile -m gateway serve ...``), once for
  the warm-up only and once for the warm-up plus ``--requests``; the difference is the Python function
  calls (and builtin calls) per request, charged to the components above by the called function's file
  (a builtin to its callers'); then the ``--top`` most called functions, of all and of the gateway's own
  packages (``gateway``, ``router``, ``cache``, ``config``). A count, not a time: the same on a quiet
  and on a busy machine, so a
  change's before/after is exact where CPU per request varies by a third between runs.
- ``--gc``: the gateway runs with a ``gc.callbacks`` probe; prints, per generation, the collections
  during ``--requests`` (after the warm-up) and their CPU (``time.thread_time``, so a wait for a core is
  not in it): the pauses every request in flight waits out.
- ``--threads``: no sampler at all; the CPU each thread of the gateway process spent during
  ``--requests`` (the kernel's per-thread accounting, ``/proc/PID/task/TID``: user and system ticks,
  and the scheduler's nanoseconds), per request: the event loop's thread (the main one) against the
  others (the billing ledger's writer, executor threads). CPU, not samples, so a preempted thread
  costs nothing here; ``--gil`` put the ledger thread at 17.5 % of the samples where this put it at
  6-9 % of the process's CPU (issue 30, round 5).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pstats
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.loadgen import run_load
from bench.overhead import MODEL, ZERO, body
from bench.procs import Proc, free_ports, running, start_gateway, start_sim, wait_http

WARMUP = 500

# (component, a substring of a frame's "function (file:line)"), the most specific first: a sample goes
# to the first component found walking its stack from the leaf.
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("billing ledger thread", "cache/billing/ledger_sqlite.py"),
    ("routing", "router/"),
    ("billing (pricing, settle)", "gateway/pipeline/billing.py"),
    ("billing (pricing, settle)", "gateway/pipeline/hooks/billing.py"),
    ("billing (pricing, settle)", "cache/billing/"),
    ("metrics (prometheus_client)", "prometheus_client/"),
    ("access log", "gateway/observability/logs.py"),
    ("metrics and access log hook", "gateway/pipeline/hooks/observe.py"),
    ("scrapes and health checks", "gateway/fleet/"),
    ("upstream client", "aiohttp/client"),
    ("upstream client", "aiohttp/connector.py"),
    ("upstream client", "gateway/upstream/client.py"),  # our deadlines around it, its reads
    ("upstream client", "gateway/upstream/lean.py"),  # the lean hop (round 6): httptools is C, no frames
    ("parse and validate", "gateway/pipeline/parse.py"),
    ("tenant, limits, cache key", "gateway/pipeline/tenant.py"),
    ("tenant, limits, cache key", "gateway/pipeline/limits.py"),
    ("tenant, limits, cache key", "gateway/pipeline/cache.py"),
    ("respond and relay", "gateway/pipeline/respond.py"),
    ("respond and relay", "gateway/pipeline/relay.py"),
    ("other gateway code", "gateway/"),
    ("aiohttp server", "aiohttp/"),
    ("event loop (uvloop, asyncio)", "asyncio/"),
)


# aiohttp modules both its server and its client run (body streams, the HTTP writer and parser, timers,
# flow control): a frame in one is charged to whoever called it, walking on towards the root, so the
# client's reads of an answer are not the server's. Before this (issue 30 up to round 4) they were all
# "aiohttp server", which put that at 40 % of the samples while the whole server layer costs 0.04 ms
# of a request's ~0.4 (``python -m bench.server_layer``).
SHARED = (
    "aiohttp/streams.py",
    "aiohttp/http_writer.py",
    "aiohttp/http_parser.py",
    "aiohttp/helpers.py",
    "aiohttp/base_protocol.py",
    "aiohttp/payload.py",
    "aiohttp/tcp_helpers.py",
)
SHARED_ONLY = "aiohttp (shared modules, caller not on the stack)"


def charge(frames: list[str]) -> str:
    shared = False
    for frame in reversed(frames):  # leaf first
        if any(needle in frame for needle in SHARED):
            shared = True
            continue
        for name, needle in COMPONENTS:
            if needle in frame:
                return name
    return SHARED_ONLY if shared else "other (interpreter, GC, libraries)"


def summarise(raw: Path) -> list[tuple[str, float]]:
    counts: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack:
            continue
        counts[charge(stack.split(";"))] += int(n)
        total += int(n)
    return [(name, n / total) for name, n in counts.most_common()]


Func = tuple[str, int, str]  # pstats' (file, line, function)


def _file_component(func: Func) -> str | None:
    """The component of a Python function by its file; None for a builtin (``~``) and for a function
    of aiohttp's shared modules (``SHARED``): their calls go to their callers'."""
    if func[0] == "~" or any(needle in func[0] for needle in SHARED):
        return None
    return charge([f"{func[2]} ({func[0]}:{func[1]})"])


def calls_by_component(stats: dict[Func, tuple], n: int) -> dict[str, float]:
    """Calls per request of each component in ``stats`` (pstats' raw table: ``(cc, nc, tt, ct,
    callers)`` per function, here a difference of two runs) over ``n`` requests. A builtin's calls, and
    a function's of aiohttp's shared modules, go to its callers' components in proportion to the calls
    each made (one level up: a shared function called by another shared one is ``SHARED_ONLY``)."""
    out: collections.Counter[str] = collections.Counter()
    for func, (_, nc, _, _, callers) in stats.items():
        own = _file_component(func)
        if own is not None:
            out[own] += nc
            continue
        counted = {c: v[1] if isinstance(v, tuple) else v for c, v in callers.items()}
        total = sum(counted.values())
        for caller, k in counted.items():
            fallback = "other (interpreter, GC, libraries)" if caller[0] == "~" else SHARED_ONLY
            out[_file_component(caller) or fallback] += nc * k / total if total else 0
    return {name: calls / n for name, calls in out.most_common()}


def _difference(after: dict[Func, tuple], before: dict[Func, tuple]) -> dict[Func, tuple]:
    zero: tuple = (0, 0, 0.0, 0.0, {})
    out = {}
    for func, (cc, nc, tt, ct, callers) in after.items():
        bcc, bnc, btt, bct, bcallers = before.get(func, zero)
        diff_callers = {}
        for c, v in callers.items():
            k = v[1] if isinstance(v, tuple) else v
            bv = bcallers.get(c, 0)
            k -= bv[1] if isinstance(bv, tuple) else bv
            if k > 0:
                diff_callers[c] = k
        if nc - bnc > 0:
            out[func] = (cc - bcc, nc - bnc, tt - btt, ct - bct, diff_callers)
    return out


async def _profiled_run(
    args: argparse.Namespace, upstream: str, requests: int, out: Path, *, gc_probe: bool = False
) -> float:
    """A gateway under cProfile (``out``), or with ``GC_PROBE`` writing its collections to ``out``:
    ``WARMUP`` requests, then ``requests`` more, then SIGTERM (the gateway drains and exits; the
    profile is written on the way out). Returns the monotonic time the ``requests`` began."""
    port, metrics_port = free_ports(2)
    env = {**os.environ, "PYTHONPATH": args.checkout or str(Path(__file__).resolve().parents[1])}
    workdir = tempfile.mkdtemp(prefix="pgw-cprofile-")
    if gc_probe:
        env["PGW_GC_OUT"] = str(out)
        cmd = [sys.executable, "-c", GC_PROBE, "serve", "--host", "127.0.0.1"]
    else:
        cmd = [
            sys.executable,
            "-m",
            "cProfile",
            "-o",
            str(out),
            "-m",
            "gateway",
            "serve",
            "--host",
            "127.0.0.1",
        ]
    cmd += ["--port", str(port), "--metrics-port", str(metrics_port), "--replica", upstream, "--model", MODEL]
    popen = subprocess.Popen(cmd, env=env, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    gw = Proc(popen, f"http://127.0.0.1:{port}", workdir=workdir)
    began = time.monotonic()
    with running(gw):
        wait_http(gw.url + "/health", proc=popen)
        url = gw.url + "/v1/chat/completions"
        for n in (WARMUP, requests):
            began = time.monotonic()
            if n:
                r = await run_load(url, body, requests=n, concurrency=args.concurrency, stream=args.stream)
                assert r.errors == 0, r.statuses
        popen.send_signal(signal.SIGTERM)
        popen.wait(60)
    assert out.exists(), "the profiled gateway wrote no profile"
    return began


# Run ``python -m gateway`` with every collection's generation, CPU time (``time.thread_time``: the
# collecting thread's, so a busy machine's waits for a core are not in it) and monotonic end time
# written to $PGW_GC_OUT at exit.
GC_PROBE = """
import atexit, gc, json, os, runpy, sys, time
seen, began = [], [0.0]
def probe(phase, info):
    if phase == "start":
        began[0] = time.thread_time()
    else:
        seen.append((info["generation"], time.thread_time() - began[0], time.monotonic()))
gc.callbacks.append(probe)
atexit.register(lambda: open(os.environ["PGW_GC_OUT"], "w").write(json.dumps(seen)))
sys.argv = ["gateway", *sys.argv[1:]]
runpy.run_module("gateway", run_name="__main__", alter_sys=True)
"""


def gc_summary(seen: list[tuple[int, float, float]], since: float, n: int) -> list[str]:
    """Per generation, the collections that ended after ``since``: count, CPU per collection (p50,
    p99, max) and in all per request over ``n`` requests."""
    lines = []
    for gen in (0, 1, 2):
        cpu = sorted(c for g, c, t in seen if g == gen and t >= since)
        if not cpu:
            lines.append(f"generation {gen}: no collection")
            continue
        p99 = cpu[min(len(cpu) - 1, int(len(cpu) * 0.99))]
        lines.append(
            f"generation {gen}: {len(cpu)} collections, CPU p50 {cpu[len(cpu) // 2] * 1e3:.2f} / p99 "
            f"{p99 * 1e3:.2f} / max {cpu[-1] * 1e3:.2f} ms, {sum(cpu) / n * 1e6:.1f} us a request"
        )
    return lines


async def gc_main(args: argparse.Namespace) -> None:
    out = Path(tempfile.mkdtemp(prefix="pgw-gc-")) / "collections.json"
    sim, urls = start_sim(1, extra=ZERO)
    with running(sim):
        since = await _profiled_run(args, urls[0], args.requests, out, gc_probe=True)
    mode = "stream" if args.stream else "non-stream"
    print(f"{mode}, concurrency {args.concurrency}, {args.requests} requests after the warm-up:")
    for line in gc_summary([tuple(x) for x in json.loads(out.read_text())], since, args.requests):
        print(line)


async def calls_main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pgw-cprofile-"))
    sim, urls = start_sim(1, extra=ZERO)
    with running(sim):
        await _profiled_run(args, urls[0], 0, tmp / "warmup.prof")
        await _profiled_run(args, urls[0], args.requests, tmp / "load.prof")
    load, warmup = pstats.Stats(str(tmp / "load.prof")), pstats.Stats(str(tmp / "warmup.prof"))
    diff = _difference(load.stats, warmup.stats)  # type: ignore[attr-defined]
    shares = calls_by_component(diff, args.requests)
    mode = "stream" if args.stream else "non-stream"
    total = sum(shares.values())
    print(
        f"{mode}, concurrency {args.concurrency}: {total:,.0f} calls a request (cProfile; profiles in {tmp})"
    )
    for name, calls in shares.items():
        print(f"{calls:7.1f}  {name}")
    ranked = sorted(diff.items(), key=lambda kv: -kv[1][1])
    own = [kv for kv in ranked if _own_code(kv[0])]
    for title, rows in (("most called:", ranked), ("most called of the gateway's own code:", own)):
        print(title)
        for (file, line, fn), v in rows[: args.top]:
            print(f"{v[1] / args.requests:7.1f}  {fn} ({file.split('site-packages/')[-1]}:{line})")


def _own_code(func: Func) -> bool:
    """A function of the gateway's own packages (a checkout's, not a library's in site-packages)."""
    file = func[0]
    return "site-packages" not in file and any(f"/{pkg}/" in file for pkg in OWN_PACKAGES)


OWN_PACKAGES = ("gateway", "router", "cache", "config")


Threads = dict[int, tuple[float, ...]]


def thread_cpu(pid: int) -> Threads:
    """Per thread of ``pid``: (user s, system s, on-CPU s by the scheduler's ns, voluntary and
    involuntary context switches)."""
    out: Threads = {}
    tick = os.sysconf("SC_CLK_TCK")
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                ns = int(f.read().split()[0])
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:  # the thread ended
            continue
        switches = (int(status["voluntary_ctxt_switches"]), int(status["nonvoluntary_ctxt_switches"]))
        out[int(tid)] = (int(fields[11]) / tick, int(fields[12]) / tick, ns / 1e9, *switches)
    return out


ThreadRow = tuple[str, float, float, float, float, float]


def thread_rows(pid: int, before: Threads, after: Threads, n: int) -> list[ThreadRow]:
    """(thread, user, system, CPU ms, voluntary, involuntary switches) a request over ``n`` requests:
    the main thread, then the others that ran, busiest first."""
    rows: list[ThreadRow] = []
    for tid, now in after.items():
        then = before.get(tid, (0.0,) * len(now))
        if now[2] - then[2] <= 0:
            continue
        name = "event loop (main thread)" if tid == pid else f"thread {tid}"
        d = [(a - b) / n for a, b in zip(now, then, strict=True)]
        rows.append((name, d[0] * 1e3, d[1] * 1e3, d[2] * 1e3, d[3], d[4]))
    rows.sort(key=lambda r: (r[0] != "event loop (main thread)", -r[3]))
    return rows


async def threads_main(args: argparse.Namespace) -> None:
    sim, urls = start_sim(1, extra=ZERO)
    gw = start_gateway(["--replica", urls[0], "--model", MODEL], checkout=args.checkout)
    url = gw.url + "/v1/chat/completions"
    with running(gw, sim):
        await run_load(url, body, requests=WARMUP, concurrency=args.concurrency, stream=args.stream)
        before = thread_cpu(gw.pid)
        r = await run_load(
            url, body, requests=args.requests, concurrency=args.concurrency, stream=args.stream
        )
        after = thread_cpu(gw.pid)
    assert r.errors == 0, r.statuses
    rows = thread_rows(gw.pid, before, after, r.ok)
    total = sum(r[3] for r in rows)
    mode = "stream" if args.stream else "non-stream"
    print(f"{mode}, concurrency {args.concurrency}: {r.rps:,.0f} req/s, {total:.3f} ms CPU a request")
    for name, u, s, c, vol, invol in rows:
        print(
            f"{c:.3f} ms ({c / total * 100:4.1f} %; user {u:.3f}, system {s:.3f}; switches a request "
            f"{vol:.2f} voluntary, {invol:.2f} involuntary)  {name}"
        )


async def main_async(args: argparse.Namespace) -> None:
    if args.threads:
        await threads_main(args)
        return
    if args.calls:
        await calls_main(args)
        return
    if args.gc:
        await gc_main(args)
        return
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    raw = Path(args.raw) if args.raw else Path(tempfile.mkdtemp(prefix="pgw-profile-")) / "stacks.txt"
    sim, urls = start_sim(1, extra=ZERO)
    gw = start_gateway(["--replica", urls[0], "--model", MODEL], checkout=args.checkout)
    url = gw.url + "/v1/chat/completions"
    with running(gw, sim):
        await run_load(url, body, requests=500, concurrency=args.concurrency, stream=args.stream)
        cmd = [spy, "record", "--pid", str(gw.pid), "--format", "raw", "-o", str(raw), "--rate", "500"]
        cmd += ["--gil"] if args.gil else []
        sampler = subprocess.Popen(
            [*cmd, "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(1.0)
        r = await run_load(
            url, body, requests=args.requests, concurrency=args.concurrency, stream=args.stream
        )
        sampler.send_signal(2)
        sampler.wait(30)
    assert r.errors == 0, r.statuses
    mode = "stream" if args.stream else "non-stream"
    print(f"{mode}, concurrency {args.concurrency}: {r.rps:,.0f} req/s while sampled; stacks in {raw}")
    for name, share in summarise(raw):
        print(f"{share * 100:5.1f} %  {name}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--requests", type=int, default=4000)
    parser.add_argument("--checkout", metavar="DIR", help="profile the gateway of this checkout")
    parser.add_argument("--raw", metavar="FILE", help="keep py-spy's collapsed stacks here")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--gil", action="store_true", help="sample only the thread holding the GIL")
    mode.add_argument("--calls", action="store_true", help="function calls per request (cProfile)")
    parser.add_argument("--top", type=int, default=25, help="--calls: how many functions to list")
    mode.add_argument("--gc", action="store_true", help="the collector's pauses (CPU) under the load")
    mode.add_argument("--threads", action="store_true", help="CPU per request of each thread (no sampler)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
