"""The flood case through sockets: real ``serve`` and simulator processes, smg's priority scheduler beside.

    python -m bench.fairness_procs [--seconds 20] [--flood-concurrency 48] [--modes alone none fifo fair smg]
        [--write]

``bench.fairness`` measures the gateway's queue in model time; this runs the same case for real, one
short run per mode: ``python -m sim`` (2 replicas, ``--mode engine``: vLLM V1's scheduler in real
time, ``--max-num-seqs`` 10 = the slots 8 + the headroom 2), then a gateway (``bench.procs``) or smg
1.13.0 (PyPI, the side venv of ``bench.peers``) in front of it, then the load: five well-behaved
tenants (``calm0``..``calm4``), each Poisson at 1 request/s for ``--seconds``, streamed with the
real ``openai`` client, class ``interactive`` (``x-gateway-priority``, or ``x-smg-priority`` for smg);
one tenant (``flood``) in a closed loop of ``--flood-concurrency`` streams (``bench.loadgen``, 3 x the
fleet's 16 slots: a closed loop can only hold the queues full, not offer 10 x). Every prompt is its
tenant's 512-token system prompt and 128 tokens of its own, 64 output tokens.

Modes: ``alone`` (the fair policy, no flood: the reference), ``none`` (no gateway limit: the engines'
FIFO), ``fifo`` (today: ``limits.max_concurrent_per_replica`` 8, its FIFO queue, 5 s), ``fair``
(``fairness.enabled``, 8 slots, ``headroom_slots`` 2), ``smg`` (``--priority-scheduler-enabled`` with ``SMG_PRIORITY`` below,
``--max-concurrent-requests`` 16 = the fleet's slots, queue 1024 with 5 s, every tenant allowed
``interactive``; tenants by ``x-smg-tenant-id`` with ``--trust-tenant-header``; ``cache_aware``).

TTFT is the client's: request sent to the first streamed chunk. Throughput: requests answered in the
window (all of 64 tokens). Bounded: at most 60 s a mode, 10,000 flood requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from bench.loadgen import run_load
from bench.peers import PEERS, start_peer
from bench.procs import running, start_gateway, start_sim
from bench.report import percentile, table, write_section

CALM = tuple(f"calm{i}" for i in range(5))
FLOOD = "flood"
MODEL = "sim-llama"
MAX_TOKENS = 64
SLOTS, HEADROOM = 8, 2
MODES = ("alone", "none", "fifo", "fair", "smg")


# smg's built-in classes reserve 34 slots in all: with a capacity of 16 its scheduler does not start
# ("priority scheduler failed to start; falling back to legacy admission error=sum of class
# reservations (34) exceeds capacity (16)", its log), so the run gives it classes of its own YAML
# schema: the interactive class reserves 4 (the gateway's headroom, 2 a replica) and may preempt a
# queued lower class; nothing else reserved; queues as the gateway's (1024, 5 s).
_SMG_CLASS = {"reserved_floor": 0, "reserved_per_slot": 0, "queue_size": 1024, "queue_timeout_secs": 5}
SMG_PRIORITY = {
    "classes": {
        "system": {**_SMG_CLASS, "starvation_threshold_secs": 10, "can_preempt": True},
        "interactive": {
            **_SMG_CLASS,
            "reserved_floor": 2 * HEADROOM,
            "starvation_threshold_secs": 10,
            "can_preempt": True,
        },
        "default": {**_SMG_CLASS, "starvation_threshold_secs": 10, "can_preempt": False},
        "bulk": {**_SMG_CLASS, "starvation_threshold_secs": 30, "can_preempt": False},
    }
}


def _key(tenant: str) -> str:
    return f"sk-{tenant}-fairness-bench"


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(100_000)}" for _ in range(n))


def policy(mode: str, urls: list[str]) -> dict[str, Any]:
    tenants = [*CALM, FLOOD]
    out: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [{"name": MODEL, "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)]}],
        "tenancy": {
            "allow_anonymous": False,
            "tenants": [
                {"id": t, "api_key_sha256": [hashlib.sha256(_key(t).encode()).hexdigest()]} for t in tenants
            ],
        },
        "limits": {"max_concurrent_requests": 4096},
    }
    if mode == "fifo":
        out["limits"].update(max_concurrent_per_replica=SLOTS, queue_timeout_s=5.0, max_queued_requests=1024)
    if mode in ("fair", "alone"):
        out["fairness"] = {
            "enabled": True,
            "slots_per_replica": SLOTS,
            "headroom_slots": HEADROOM,
            "tenants": [{"id": t, "max_priority": "interactive"} for t in CALM]
            + [{"id": FLOOD, "max_priority": "standard"}],
        }
    return out


@contextlib.contextmanager
def serving(mode: str, urls: list[str], workdir: Path, log: Path) -> Iterator[tuple[str, str | None]]:
    """The base URL of the router under test (``/v1`` below it), and the gateway's metrics URL."""
    if mode == "smg":
        prio = workdir / "smg-priority.yaml"
        prio.write_text(yaml.safe_dump(SMG_PRIORITY))
        peer = dataclasses.replace(
            PEERS["smg"],
            extra=(
                *PEERS["smg"].extra,
                "--priority-scheduler-enabled", "--priority-scheduler-default-max-class", "interactive",
                "--max-concurrent-requests", str(SLOTS * len(urls)), "--queue-size", "1024",
                "--queue-timeout-secs", "5", "--trust-tenant-header", "--priority-scheduler-config", str(prio),
            ),
        )  # fmt: skip
        p = start_peer(peer, urls, log_path=str(log))
        with running(p.proc):
            yield p.proc.url, p.metrics_url
        return
    path = workdir / f"policy-{mode}.yaml"
    path.write_text(yaml.safe_dump(policy(mode, urls)))
    gw = start_gateway(
        ["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "fairness-bench-0123456789"}, log_path=str(log)
    )
    with running(gw):
        yield gw.url, gw.metrics_url


def smg_admitted(metrics_url: str | None) -> str:
    """smg's own count of its priority scheduler's admissions, by class and outcome."""
    if metrics_url is None:
        return ""
    text = httpx.get(metrics_url, timeout=10).text
    lines = [
        ln
        for ln in text.splitlines()
        if ln.startswith(("smg_scheduler_admit_total", "smg_scheduler_preemption_total"))
    ]
    return "; ".join(f"`{ln}`" for ln in lines) or "no smg_scheduler_* series"


def interactive_wait(metrics_url: str | None) -> float:
    """Mean seconds the interactive class waited in the gateway's fair queue (nan: none measured)."""
    if metrics_url is None:
        return float("nan")
    text = httpx.get(metrics_url + "/metrics", timeout=10).text
    pat = r'^prefix_gateway_fair_queue_wait_seconds_(sum|count)\{[^}]*priority="interactive"[^}]*\} (\S+)$'
    got = {"sum": 0.0, "count": 0.0}
    for kind, value in re.findall(pat, text, re.M):
        got[kind] += float(value)
    return got["sum"] / got["count"] if got["count"] else float("nan")


def _headers(mode: str, tenant: str, interactive: bool) -> dict[str, str]:
    if mode == "smg":
        h = {"x-smg-tenant-id": tenant}
        if interactive:
            h["x-smg-priority"] = "interactive"
        return h
    return {"x-gateway-priority": "interactive"} if interactive else {}


async def _calm(base: str, mode: str, tenant: str, system: str, seconds: float, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key=_key(tenant), max_retries=0, timeout=60.0)
    ttfts: list[float] = []
    errors: dict[str, int] = {}
    tasks = []

    async def one(text: str) -> None:
        t0 = time.perf_counter()
        try:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
                max_tokens=MAX_TOKENS, stream=True, extra_headers=_headers(mode, tenant, True),
            )  # fmt: skip
            first = None
            async for _ in stream:
                if first is None:
                    first = time.perf_counter()
            ttfts.append((first or time.perf_counter()) - t0)
        except openai.APIStatusError as e:
            errors[str(e.status_code)] = errors.get(str(e.status_code), 0) + 1
        except openai.APIError as e:
            errors[type(e).__name__] = errors.get(type(e).__name__, 0) + 1

    start = time.perf_counter()
    at = rng.expovariate(1.0)
    while at < seconds:
        delay = start + at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(_words(rng, 100))))
        at += rng.expovariate(1.0)
    await asyncio.gather(*tasks)
    await client.close()
    return {"ttfts": ttfts, "errors": errors, "sent": len(tasks)}


async def load(base: str, mode: str, seconds: float, flood_concurrency: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    systems = {t: _words(rng, 400) for t in (*CALM, FLOOD)}
    flood_texts = [_words(rng, 100) for _ in range(256)]

    def flood_body(i: int) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": systems[FLOOD]},
                {"role": "user", "content": flood_texts[i % 256]},
            ],
            "max_tokens": MAX_TOKENS,
        }

    flood_headers = {"Authorization": f"Bearer {_key(FLOOD)}", **_headers(mode, FLOOD, False)}
    t0 = time.perf_counter()
    jobs = [_calm(base, mode, t, systems[t], seconds, seed + 1 + k) for k, t in enumerate(CALM)]
    if mode != "alone":
        flood = run_load(
            base + "/v1/chat/completions", flood_body, requests=10_000, concurrency=flood_concurrency,
            stream=True, headers=flood_headers, max_seconds=seconds,
        )  # fmt: skip
        *calm, fl = await asyncio.gather(*jobs, flood)
    else:
        calm, fl = await asyncio.gather(*jobs), None
    wall = time.perf_counter() - t0
    return {"calm": dict(zip(CALM, calm, strict=True)), "flood": fl, "wall": wall}


def summarize(res: dict[str, Any], seconds: float) -> dict[str, Any]:
    pooled = [x for c in res["calm"].values() for x in c["ttfts"]]
    calm_ok = len(pooled)
    flood_ok = res["flood"].ok if res["flood"] is not None else 0
    errors: dict[str, int] = {}
    for c in res["calm"].values():
        for k, v in c["errors"].items():
            errors[k] = errors.get(k, 0) + v
    flood_errors = dict(res["flood"].statuses) if res["flood"] is not None else {}
    flood_errors.pop(200, None)
    return {
        "p50": percentile(pooled, 50) if pooled else float("nan"),
        "p99": percentile(pooled, 99) if pooled else float("nan"),
        "per": {
            t: (percentile(c["ttfts"], 50), percentile(c["ttfts"], 99)) if c["ttfts"] else (float("nan"),) * 2
            for t, c in res["calm"].items()
        },
        "calm_sent": sum(c["sent"] for c in res["calm"].values()),
        "calm_ok": calm_ok,
        "calm_errors": errors,
        "flood_ok": flood_ok,
        "flood_errors": flood_errors,
        "req_s": (calm_ok + flood_ok) / res["wall"],
        "gateway_wait": res.get("gateway_wait", float("nan")),
        "flood_share": flood_ok / (calm_ok + flood_ok) if calm_ok + flood_ok else 0.0,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness_procs", description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--flood-concurrency", type=int, default=48)
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    if not (1 <= args.seconds <= 60 and 1 <= args.flood_concurrency <= 256):
        ap.error("bounded: at most 60 s a mode, 256 flood streams")
    results: dict[str, dict[str, Any]] = {}
    loads: dict[str, str] = {}
    smg_admits: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="fairp-") as tmp:
        workdir = Path(tmp)
        for mode in args.modes:
            sim, urls = start_sim(
                2,
                extra=["--mode", "engine", "--max-num-seqs", str(SLOTS + HEADROOM)],
                log_path=str(workdir / "sim.log"),
            )
            with running(sim), serving(mode, urls, workdir, workdir / f"{mode}.log") as (base, metrics):
                res = asyncio.run(load(base, mode, args.seconds, args.flood_concurrency, args.seed))
                if mode == "smg":
                    smg_admits[mode] = smg_admitted(metrics)
                else:
                    res["gateway_wait"] = interactive_wait(metrics)
            with open("/proc/loadavg") as f:
                loads[mode] = f.read().split()[0]
            results[mode] = summarize(res, args.seconds)
            s = results[mode]
            print(f"{mode}: p50 {s['p50']:.3f} p99 {s['p99']:.3f} calm {s['calm_ok']}/{s['calm_sent']} {s['calm_errors']} flood {s['flood_ok']} {s['flood_errors']} load {loads[mode]}", flush=True)  # fmt: skip
    alone = results.get("alone", {}).get("p99")
    base_rps = results.get("fifo", {}).get("req_s")
    headers = ["mode", "p50 TTFT", "p99 TTFT", "p99 x alone", "mean fair-queue wait (interactive)", "answered / sent (well-behaved)", "errors (well-behaved)",
               "flood answered", "flood errors", "flood share", "req/s", "x today", "load"]  # fmt: skip
    rows = []
    for mode, s in results.items():
        rows.append([
            mode, f"{s['p50']:.3f}", f"{s['p99']:.3f}", f"{s['p99'] / alone:.2f}" if alone else "-",
            "-" if s["gateway_wait"] != s["gateway_wait"] else f"{s['gateway_wait']:.4f}",
            f"{s['calm_ok']} / {s['calm_sent']}", ", ".join(f"{k}: {v}" for k, v in s["calm_errors"].items()) or "0",
            s["flood_ok"], ", ".join(f"{k}: {v}" for k, v in s["flood_errors"].items()) or "0",
            f"{s['flood_share']:.3f}", f"{s['req_s']:.1f}", f"{s['req_s'] / base_rps:.3f}" if base_rps else "-", loads[mode],
        ])  # fmt: skip
    given = argv if argv is not None else sys.argv[1:]
    cmd = "python -m bench.fairness_procs" + "".join(f" {a}" for a in given if a != "--write")
    md = "\n".join(
        [
            "### The same through sockets: `serve` and simulator processes, smg 1.13.0's priority scheduler",
            "",
            f"`{cmd}` (2 simulated replicas, `--mode engine --max-num-seqs {SLOTS + HEADROOM}`, real time; five "
            f"tenants Poisson at 1/s each for {args.seconds:g} s, streamed with the openai client, interactive; "
            f"the flood a closed loop of {args.flood_concurrency} streams; one run a mode, one after another; "
            "load: the machine's 1-minute load average after the mode, 2 cores shared with other work). "
            "TTFT in seconds at the client; req/s: answers over the mode's wall time.",
            "",
            table(headers, rows),
            *(
                ["", f"smg's scheduler counters after its run: {smg_admits['smg']}"]
                if "smg" in smg_admits
                else []
            ),
        ]
    )
    print(md)
    if args.write:
        write_section("fairness-procs", md)


if __name__ == "__main__":
    main()
