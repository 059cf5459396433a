"""Where the gateway's CPU goes under load: py-spy samples of a real gateway process, by component.

    python -m bench.profile [--stream] [--concurrency 32] [--requests 4000] [--checkout DIR] [--raw F]

The quick start's gateway (``serve --replica URL --model M``: default policy, response cache, billing,
metrics and access log) in front of a zero-latency simulator, warmed up, then sampled by py-spy (500 Hz,
every thread, non-blocking) while the load generator sends ``--requests`` unique requests. Each sample's
stack is charged to the first component, from the top of the stack down, whose frames it contains (so
"aiohttp client" is the HTTP client's own work under the dispatch stage, not the stage's). ``--checkout``
profiles another checkout's gateway (before/after). py-spy comes with the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.loadgen import run_load
from bench.overhead import MODEL, ZERO, body
from bench.procs import running, start_gateway, start_sim

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
    ("aiohttp client", "aiohttp/client"),
    ("aiohttp client", "aiohttp/connector.py"),
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


def charge(frames: list[str]) -> str:
    for frame in reversed(frames):  # leaf first
        for name, needle in COMPONENTS:
            if needle in frame:
                return name
    return "other (interpreter, GC, libraries)"


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


async def main_async(args: argparse.Namespace) -> None:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    raw = Path(args.raw) if args.raw else Path(tempfile.mkdtemp(prefix="pgw-profile-")) / "stacks.txt"
    sim, urls = start_sim(1, extra=ZERO)
    gw = start_gateway(["--replica", urls[0], "--model", MODEL], checkout=args.checkout)
    url = gw.url + "/v1/chat/completions"
    with running(gw, sim):
        await run_load(url, body, requests=500, concurrency=args.concurrency, stream=args.stream)
        cmd = [spy, "record", "--pid", str(gw.pid), "--format", "raw", "-o", str(raw), "--rate", "500"]
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
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
