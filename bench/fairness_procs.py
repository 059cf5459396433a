"""The flood case through sockets: real ``serve`` and simulator processes, smg's priority scheduler beside.

    python -m bench.fairness_procs [--seconds 20] [--flood-concurrency 48] [--modes alone none fifo fair smg]
        [--max-prefill 256] [--before CHECKOUT] [--spread-tokens] [--dump FILE] [--write]

``bench.fairness`` measures the gateway's queue in model time; this runs the same case for real, one
short run per mode: ``python -m sim`` (2 replicas, ``--mode engine``: vLLM V1's scheduler in real
time, ``--max-num-seqs`` 10 = the slots 8 + the headroom 2), then a gateway (``bench.procs``) or smg
1.13.0 (PyPI, the side venv of ``bench.peers``) in front of it, then the load: five well-behaved
tenants (``calm0``..``calm4``), each Poisson at 1 request/s for ``--seconds``, streamed with the
real ``openai`` client, class ``interactive`` (``x-gateway-priority``, or ``x-smg-priority`` for smg);
one tenant (``flood``) in a closed loop of ``--flood-concurrency`` streams (``bench.loadgen``, 3 x the
fleet's 16 slots: a closed loop can only hold the queues full, not offer 10 x). Every prompt is its
tenant's 512-token system prompt and 128 tokens of its own, 64 output tokens (``--spread-tokens``:
each request's ``max_tokens`` drawn from 16-112, mean 64, as ``bench.fairness``'s, from a generator of
its own, so the arrivals are the same runs' arrivals; streams admitted together then end apart).

Modes: ``alone`` (the fair policy, no flood: the reference), ``none`` (no gateway limit: the engines'
FIFO), ``fifo`` (today: ``limits.max_concurrent_per_replica`` 8, its FIFO queue, 5 s), ``fair``
(``fairness.enabled``, 8 slots, ``headroom_slots`` 2), ``smg`` (``--priority-scheduler-enabled`` with ``SMG_PRIORITY`` below,
``--max-concurrent-requests`` 16 = the fleet's slots, queue 1024 with 5 s, every tenant allowed
``interactive``; tenants by ``x-smg-tenant-id`` with ``--trust-tenant-header``; ``cache_aware``).

``fair-prefill``: ``fair`` with ``max_queued_prefill_tokens`` ``--max-prefill``; ``fair-headroom3``: 7
slots and 3 headroom (the same engine batch of 10); ``fair-headroom3-prio``: that, with
``models[].engine_priority: vllm`` and the simulators at ``--scheduling-policy priority`` (vLLM's
semantics, ``sim.engine``); ``--before CHECKOUT``: ``fair`` again with that
checkout's gateway, right after this tree's (``fair@before``). The flood runs in a process of its own.

TTFT is the client's: request sent to the first streamed chunk. After each mode, where each
well-behaved request's TTFT went (``where``): the three processes' wall clocks (the client's, the
gateway's decision log with its ``fair_queue``, the simulator's ``/sim/generations``) split it into the
client-to-queue time, the gateway queue (and what released it), the hop, the engine and the relay back,
beside the load generator's loop lag. Throughput: requests answered in the window (64 tokens each, or
16-112 with ``--spread-tokens``). Each tenant's tail: every request it sent over the runs pooled (one
unanswered as no first token), p95 / p99 against its own alone with ``bench.tails``' intervals (round
6's "worst tenant" was a p99 of ~15 requests, a max). Bounded: at most 60 s a mode, 10,000 flood requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import multiprocessing
import random
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai
import yaml

from bench.fairness import SHARE_TOLERANCE, entitled_shares, tails_md, within_entitled
from bench.loadgen import LoadResult, run_load
from bench.peers import PEERS, start_peer
from bench.procs import running, start_gateway, start_sim
from bench.report import percentile, table, write_section

CALM = tuple(f"calm{i}" for i in range(5))
FLOOD = "flood"
MODEL = "sim-llama"
MAX_TOKENS = 64
# --spread-tokens: uniform, mean MAX_TOKENS (bench.fairness's)
SPREAD = (MAX_TOKENS // 4, MAX_TOKENS * 7 // 4)
SLOTS, HEADROOM = 8, 2
MODES = (
    "alone",
    "none",
    "fifo",
    "fair",
    "fair-prefill",
    "fair-headroom3",
    "fair-headroom3-prio",
    "fair-auto",
    "smg",
)
PRIO_MODES = ("fair-headroom3-prio",)  # the simulators run --scheduling-policy priority
OBJECTIVE_S = {"calm": 1.0, FLOOD: 3.0}  # TTFT objectives the attainment is counted against (at the client)
MAX_PREFILL = 256  # fair-prefill: fairness.max_queued_prefill_tokens
LAG_TICK_S = 0.005
ADMIN_TOKEN = "fairness-bench-admin-0123456789"


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


def policy(
    mode: str,
    urls: list[str],
    max_prefill: int = MAX_PREFILL,
    auto_quantile: float | None = None,
    auto_model: str | None = None,
) -> dict[str, Any]:
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
    if mode in ("fair", "fair-prefill", "fair-headroom3", "fair-headroom3-prio", "fair-auto", "alone"):
        out["fairness"] = {
            "enabled": True,
            "slots_per_replica": SLOTS,
            "headroom_slots": HEADROOM,
            "tenants": [{"id": t, "max_priority": "interactive"} for t in CALM]
            + [{"id": FLOOD, "max_priority": "standard"}],
        }
    if mode == "fair-prefill":
        out["fairness"]["max_queued_prefill_tokens"] = max_prefill
    if mode in (
        "fair-headroom3",
        "fair-headroom3-prio",
    ):  # the same engine batch of 10: one slot more kept for the interactive class
        out["fairness"].update(slots_per_replica=SLOTS - 1, headroom_slots=HEADROOM + 1)
    if mode in PRIO_MODES:  # the class as the engine's priority (the simulators run the priority policy)
        out["models"][0]["engine_priority"] = "vllm"
    if mode == "fair-auto":  # the same engine batch of 10, the headroom derived (router.fairness.headroom)
        out["fairness"].update(slots_per_replica=SLOTS + HEADROOM, headroom_slots=0, auto_headroom=True)
        if auto_quantile is not None:
            out["fairness"]["auto_headroom_quantile"] = auto_quantile
        if auto_model is not None:
            out["fairness"]["auto_headroom_model"] = auto_model
    return out


@contextlib.contextmanager
def serving(
    mode: str,
    urls: list[str],
    workdir: Path,
    log: Path,
    checkout: str | None = None,
    max_prefill: int = MAX_PREFILL,
    auto_quantile: float | None = None,
    auto_model: str | None = None,
) -> Iterator[tuple[str, str | None]]:
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
    path.write_text(yaml.safe_dump(policy(mode, urls, max_prefill, auto_quantile, auto_model)))
    gw = start_gateway(
        ["--config", str(path)],
        env={"PREFIX_GATEWAY_SECRET": "fairness-bench-0123456789", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
        log_path=str(log),
        checkout=checkout,
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


def derived_headroom(metrics_url: str | None) -> float:
    """The gateway's derived headroom gauge at the end of the mode (nan: none: auto_headroom off)."""
    if metrics_url is None:
        return float("nan")
    text = httpx.get(metrics_url + "/metrics", timeout=10).text
    got = re.findall(r"^prefix_gateway_fair_headroom_slots\{[^}]*\} (\S+)$", text, re.M)
    return float(got[0]) if got else float("nan")


def hit_rates(sim_urls: list[str], calm_ids: set[str]) -> tuple[int, int, int, int]:
    """Prompt tokens the engines took from their prefix caches, of every generation the simulators
    started: (cached, prompt) for all, then for the well-behaved tenants' requests."""
    out = [0, 0, 0, 0]
    with httpx.Client(timeout=30) as http:
        for url in sim_urls:
            for g in http.get(url + "/sim/generations").json():
                c, p = g.get("cached_tokens") or 0, g.get("prompt_tokens") or 0
                out[0] += c
                out[1] += p
                if g.get("request_id") in calm_ids:
                    out[2] += c
                    out[3] += p
    return out[0], out[1], out[2], out[3]


def where(res: dict[str, Any], base: str, sim_urls: list[str], gateway: bool) -> list[dict[str, Any]]:
    """Where each answered well-behaved request's TTFT went, by wall clocks of the three processes (one
    machine, one clock): ``pre`` client send to the gateway's queue (the client, the socket, the
    gateway's stages before routing), ``queue`` the gateway's fair queue (``released_by``: the event that
    released it; the decision log's ``fair_queue``), ``hop`` the gateway's decision to the simulator's
    handler, ``engine`` the handler to its first chunk written (``engine_queue``/``engine_ttft``: the
    engine's own, planned step ends), ``back`` that chunk to the client's first parsed chunk (the
    gateway's relay, the client's parsing); ``lag``: the load generator's longest event-loop lag while
    it was open. The gateway's parts only where it is the router under test (``gateway``)."""
    gens: dict[str, dict[str, Any]] = {}
    with httpx.Client(timeout=30) as http:
        for i, url in enumerate(sim_urls):
            for g in http.get(url + "/sim/generations").json():
                if g.get("request_id"):
                    gens[g["request_id"]] = {**g, "replica": i}
        rows = []
        lags = res.get("lags", [])
        calm_ids = {t["id"] for c in res["calm"].values() for t in c["traced"] if t["id"]}
        for c in res["calm"].values():
            for t in c["traced"]:
                row: dict[str, Any] = {"tenant": t["tenant"], "ttft": t["ttft"]}
                window = [lag for at, lag in lags if t["sent_at"] <= at <= (t["first_at"] or at)]
                row["lag"] = max(window, default=0.0)
                g = gens.get(t["id"] or "")
                fq = None
                if gateway and t["id"]:
                    got = http.get(
                        base + "/admin/routing/explain",
                        params={"request_id": t["id"]},
                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"},
                    )
                    if got.status_code == 200:
                        rec = got.json()["decisions"][0]
                        fq = rec["attempts"][-1].get("fair_queue")
                        row["replica"] = rec["replica"]
                        if fq is not None:
                            row["queue"], row["released_by"] = fq["waited_s"], fq["released_by"]
                            row["pre"] = rec["at"] - fq["waited_s"] - t["sent_at"]
                            if g is not None:
                                row["hop"] = g["received_at"] - rec["at"]
                if g is not None and "first_write_at" in g:
                    row["engine"] = g["first_write_at"] - g["received_at"]
                    row["engine_queue"] = g.get("engine_queue_s")
                    row["engine_ttft"] = g.get("engine_ttft_s")
                    if t["first_at"] is not None:
                        row["back"] = t["first_at"] - g["first_write_at"]
                    if "finished_at" in g:
                        row["held"] = g["finished_at"] - g["received_at"]  # its stream open at the replica
                    if fq is None:
                        row["pre"] = g["received_at"] - t["sent_at"]  # client to the replica, all of it
                if "queue" in row and row["queue"] > 0.01:
                    row["busy"] = _busy_at(gens, rec["at"] - row["queue"], calm_ids)
                rows.append(row)
    res["generations"] = [
        {k: g.get(k) for k in ("replica", "received_at", "first_write_at", "finished_at")}
        | {"calm": i in calm_ids}
        for i, g in gens.items()
    ]
    return rows


def _busy_at(gens: dict[str, dict[str, Any]], at: float, calm_ids: set[str]) -> str:
    """Streams each replica's simulator had open at ``at`` (received, not ended): all / well-behaved."""
    per: dict[int, list[int]] = {}
    for rid, g in gens.items():
        if g["received_at"] <= at < g.get("finished_at", float("inf")):
            n = per.setdefault(g.get("replica", 0), [0, 0])
            n[0] += 1
            n[1] += rid in calm_ids
    return " ".join(f"{k}:{a}/{c}" for k, (a, c) in sorted(per.items()))


PARTS = ("pre", "queue", "hop", "engine", "engine_queue", "engine_ttft", "back", "lag", "held")


def where_lines(mode: str, rows: list[dict[str, Any]], slowest: int = 3) -> list[str]:
    """The p50 / p99 of each part, and the slowest requests part by part."""
    out = [
        f"{mode}: where the well-behaved TTFT went (s), p50 / p95 / p99 of each part over {len(rows)} requests:"
    ]
    for part in ("ttft", *PARTS):
        xs = [r[part] for r in rows if r.get(part) is not None]
        if xs:
            ps = " / ".join(f"{percentile(xs, q):.4f}" for q in (50, 95, 99))
            out.append(f"  {part}: {ps} (max {max(xs):.4f})")
    reasons: dict[str, int] = {}
    for r in rows:
        if "released_by" in r:
            reasons[r["released_by"]] = reasons.get(r["released_by"], 0) + 1
    if reasons:
        out.append(f"  released by: {reasons}")
    for r in sorted(rows, key=lambda r: -r["ttft"])[:slowest]:
        parts = ", ".join(
            f"{k} {r[k]:.4f}" if isinstance(r.get(k), float) else f"{k} {r.get(k)}"
            for k in ("ttft", *PARTS, "released_by", "replica", "busy")
            if r.get(k) is not None
        )
        out.append(f"  slow: {r['tenant']}: {parts}")
    return out


def _headers(mode: str, tenant: str, interactive: bool) -> dict[str, str]:
    if mode == "smg":
        h = {"x-smg-tenant-id": tenant}
        if interactive:
            h["x-smg-priority"] = "interactive"
        return h
    return {"x-gateway-priority": "interactive"} if interactive else {}


def output_tokens(spread: bool, *key: object) -> int:
    """A request's ``max_tokens``: ``MAX_TOKENS``, or with ``spread`` uniform over ``SPREAD`` from a
    generator seeded by ``key`` alone (the arrivals' generators draw nothing for it)."""
    return random.Random("tokens:" + ":".join(map(str, key))).randint(*SPREAD) if spread else MAX_TOKENS


async def _calm(
    base: str, mode: str, tenant: str, system: str, seconds: float, seed: int, spread: bool = False
) -> dict[str, Any]:
    rng = random.Random(seed)
    client = openai.AsyncOpenAI(base_url=base + "/v1", api_key=_key(tenant), max_retries=0, timeout=60.0)
    ttfts: list[float] = []
    errors: dict[str, int] = {}
    traced: list[dict[str, Any]] = []  # per answered request: wall clock sent / first chunk, the gateway's id
    tasks: list[asyncio.Task[None]] = []

    async def one(text: str, max_tokens: int) -> None:
        t0 = time.perf_counter()
        sent_at = time.time()
        try:
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": text}],
                max_tokens=max_tokens, stream=True, extra_headers=_headers(mode, tenant, True),
            )  # fmt: skip
            first = first_at = None
            async for _ in stream:
                if first is None:
                    first, first_at = time.perf_counter(), time.time()
            ttfts.append((first or time.perf_counter()) - t0)
            traced.append({
                "tenant": tenant, "ttft": ttfts[-1], "sent_at": sent_at, "first_at": first_at,
                "id": stream.response.headers.get("x-gateway-request-id"),
            })  # fmt: skip
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
        tasks.append(asyncio.create_task(one(_words(rng, 100), output_tokens(spread, seed, len(tasks)))))
        at += rng.expovariate(1.0)
    await asyncio.gather(*tasks)
    await client.close()
    return {"ttfts": ttfts, "errors": errors, "sent": len(tasks), "traced": traced}


async def _lag_monitor(lags: list[tuple[float, float]], stop: asyncio.Event) -> None:
    """The load generator's own event-loop lag: how late each 5 ms sleep woke (wall clock, seconds late)."""
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        t = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        lags.append((time.time(), loop.time() - t - LAG_TICK_S))


def _texts(seed: int) -> tuple[dict[str, str], list[str]]:
    rng = random.Random(seed)
    systems = {t: _words(rng, 400) for t in (*CALM, FLOOD)}
    return systems, [_words(rng, 100) for _ in range(256)]


def _flood(
    base: str, mode: str, seconds: float, flood_concurrency: int, seed: int, spread: bool = False
) -> LoadResult:
    """The flood's closed loop, in a process of its own (``load``)."""
    systems, flood_texts = _texts(seed)

    def flood_body(i: int) -> dict[str, Any]:
        return {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": systems[FLOOD]},
                {"role": "user", "content": flood_texts[i % 256]},
            ],
            "max_tokens": output_tokens(spread, FLOOD, seed, i),
        }

    flood_headers = {"Authorization": f"Bearer {_key(FLOOD)}", **_headers(mode, FLOOD, False)}
    url = base + "/v1/chat/completions"
    run = run_load(
        url, flood_body, requests=10_000, concurrency=flood_concurrency, stream=True, headers=flood_headers,
        max_seconds=seconds,
    )  # fmt: skip
    return asyncio.run(run)


def _ready() -> None:
    """A first call, so that the flood's process exists before the clock starts."""


async def load(
    base: str, mode: str, seconds: float, flood_concurrency: int, seed: int, spread: bool = False
) -> dict[str, Any]:
    """The well-behaved tenants on this process's loop; the flood on another process's (its 48 streams
    on the same loop lagged it by up to 0.4 s at load 11, time every well-behaved TTFT counted)."""
    systems, _ = _texts(seed)
    lags: list[tuple[float, float]] = []
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        await loop.run_in_executor(pool, _ready)
        monitor = asyncio.create_task(_lag_monitor(lags, stop))
        t0 = time.perf_counter()
        jobs = [_calm(base, mode, t, systems[t], seconds, seed + 1 + k, spread) for k, t in enumerate(CALM)]
        if mode != "alone":
            flood = loop.run_in_executor(pool, _flood, base, mode, seconds, flood_concurrency, seed, spread)
            *calm, fl = await asyncio.gather(*jobs, flood)
        else:
            calm, fl = await asyncio.gather(*jobs), None
    wall = time.perf_counter() - t0
    stop.set()
    await monitor
    return {"calm": dict(zip(CALM, calm, strict=True)), "flood": fl, "wall": wall, "lags": lags}


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
    flood_ttfts = list(res["flood"].ttfts) if res["flood"] is not None else []
    flood_sent = flood_ok + sum(flood_errors.values())
    calm_sent = sum(c["sent"] for c in res["calm"].values())
    calm_met = sum(1 for x in pooled if x <= OBJECTIVE_S["calm"])
    flood_met = sum(1 for x in flood_ttfts if x <= OBJECTIVE_S[FLOOD])
    return {
        "pooled": pooled,
        "per_ttfts": {t: list(c["ttfts"]) for t, c in res["calm"].items()},
        "per_sent": {t: c["sent"] for t, c in res["calm"].items()},
        # every request sent: one not answered (an error) as no first token (inf), for bench.tails
        "per_tail": {
            t: [*c["ttfts"], *[math.inf] * (c["sent"] - len(c["ttfts"]))] for t, c in res["calm"].items()
        },
        "calm_met": calm_met,
        "flood_met": flood_met,
        "flood_sent": flood_sent,
        "wall": res["wall"],
        "hits": res.get("hits", (0, 0, 0, 0)),
        "derived": res.get("derived", float("nan")),
        "p50": percentile(pooled, 50) if pooled else float("nan"),
        "p95": percentile(pooled, 95) if pooled else float("nan"),
        "p99": percentile(pooled, 99) if pooled else float("nan"),
        "per": {
            t: (percentile(c["ttfts"], 50), percentile(c["ttfts"], 99)) if c["ttfts"] else (float("nan"),) * 2
            for t, c in res["calm"].items()
        },
        "calm_sent": calm_sent,
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
    ap.add_argument("--max-prefill", type=int, default=MAX_PREFILL, help="fair-prefill's bound (tokens)")
    ap.add_argument(
        "--auto-quantile", type=float, help="fair-auto's fairness.auto_headroom_quantile (else the default)"
    )
    ap.add_argument(
        "--auto-model",
        choices=("poisson", "observed"),
        help="fair-auto's fairness.auto_headroom_model (else the default)",
    )
    ap.add_argument(
        "--before",
        metavar="CHECKOUT",
        help="also run the fair mode with this checkout's gateway (a worktree of an earlier commit) right "
        "after this tree's: mode fair@before",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--spread-tokens",
        action="store_true",
        help="each request's max_tokens uniform over 16-112 (mean 64) instead of 64; the same arrivals",
    )
    ap.add_argument("--runs", type=int, default=1, help="runs of every mode, one after another (pooled)")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--dump", help="write every request's parts (where) and the results as JSON here")
    args = ap.parse_args(argv)
    if not (1 <= args.seconds <= 60 and 1 <= args.flood_concurrency <= 256 and 1 <= args.runs <= 20):
        ap.error("bounded: at most 60 s a mode, 256 flood streams, 20 runs")
    per_run: list[dict[str, dict[str, Any]]] = []  # each run's summary of each mode
    loads: list[dict[str, str]] = []
    smg_admits: dict[str, str] = {}
    wheres: dict[str, list[dict[str, Any]]] = {}
    generations: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="fairp-") as tmp:
        workdir = Path(tmp)
        runs = [(m, m, None) for m in args.modes]
        if args.before:
            runs = [r for m in args.modes for r in [(m, m, None)] + ([(f"{m}@before", m, args.before)] if m == "fair" else [])]  # fmt: skip
        for n in range(args.runs):
            per_run.append({})
            loads.append({})
            for label, mode, checkout in runs:
                sim, urls = start_sim(
                    2,
                    extra=[
                        "--mode",
                        "engine",
                        "--max-num-seqs",
                        str(SLOTS + HEADROOM),
                        *(["--scheduling-policy", "priority"] if mode in PRIO_MODES else []),
                    ],
                    log_path=str(workdir / "sim.log"),
                )
                serve = serving(
                    mode,
                    urls,
                    workdir,
                    workdir / f"{mode}.log",
                    checkout,
                    args.max_prefill,
                    args.auto_quantile,
                    args.auto_model,
                )
                with running(sim), serve as (base, metrics):
                    res = asyncio.run(
                        load(
                            base,
                            mode,
                            args.seconds,
                            args.flood_concurrency,
                            args.seed + 1000 * n,
                            args.spread_tokens,
                        )
                    )
                    if mode == "smg":
                        smg_admits[mode] = smg_admitted(metrics)
                    else:
                        res["gateway_wait"] = interactive_wait(metrics)
                        res["derived"] = derived_headroom(metrics)
                    rows = where(res, base, urls, gateway=mode != "smg")
                    calm_ids = {t["id"] for c in res["calm"].values() for t in c["traced"] if t["id"]}
                    res["hits"] = hit_rates(urls, calm_ids)
                    wheres[f"{n}:{label}"] = rows
                    generations[f"{n}:{label}"] = res["generations"]
                    print("\n".join(where_lines(label, rows)), flush=True)
                with open("/proc/loadavg") as f:
                    loads[n][label] = f.read().split()[0]
                s = per_run[n][label] = summarize(res, args.seconds)
                print(f"run {n + 1} {label}: p50 {s['p50']:.3f} p95 {s['p95']:.3f} p99 {s['p99']:.3f} calm {s['calm_ok']}/{s['calm_sent']} {s['calm_errors']} flood {s['flood_ok']} {s['flood_errors']} load {loads[n][label]}", flush=True)  # fmt: skip
            if args.dump:  # after each run: a run cut short keeps the ones before
                Path(args.dump).write_text(
                    json.dumps(
                        {"runs": per_run, "where": wheres, "generations": generations, "loads": loads},
                        default=str,
                    )
                )
    given = argv if argv is not None else sys.argv[1:]
    cmd = "python -m bench.fairness_procs" + "".join(f" {a}" for a in given if a != "--write")
    md = report(per_run, loads, cmd, args)
    if "smg" in smg_admits:
        md += f"\n\nsmg's scheduler counters after its last run: {smg_admits['smg']}"
    print(md)
    if args.write:
        write_section("fairness-procs", md)


def _flood_entitled(runs: list[dict[str, Any]], answered: int) -> float:
    """The flood's weighted max-min share of the answers (weights 1, as the policies): each well-behaved
    tenant offers what it sent, the flood's closed loop is always backlogged (nan: no flood)."""
    if not any(r["flood_sent"] for r in runs):
        return float("nan")
    offered = {t: float(sum(r.get("per_sent", {}).get(t, 0) for r in runs)) for t in CALM}
    offered[FLOOD] = math.inf
    return entitled_shares(offered, float(answered))[FLOOD]


def pooled(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's runs as one: the TTFTs pooled, the counts summed."""
    ttfts = [x for r in runs for x in r["pooled"]]
    per = {t: [x for r in runs for x in r["per_ttfts"][t]] for t in CALM}
    calm_ok = sum(r["calm_ok"] for r in runs)
    flood_ok = sum(r["flood_ok"] for r in runs)
    hits = [sum(r["hits"][i] for r in runs) for i in range(4)]
    derived = [r["derived"] for r in runs if r["derived"] == r["derived"]]
    calm_errors = sum(sum(r["calm_errors"].values()) for r in runs)
    return {
        "n": len(ttfts),
        "p50": percentile(ttfts, 50) if ttfts else float("nan"),
        "p99": percentile(ttfts, 99) if ttfts else float("nan"),
        "per": {
            t: (percentile(x, 50), percentile(x, 99)) if x else (float("nan"),) * 2 for t, x in per.items()
        },
        "calm_ok": calm_ok,
        "calm_sent": sum(r["calm_sent"] for r in runs),
        "calm_errors": calm_errors,
        "flood_ok": flood_ok,
        "flood_sent": sum(r["flood_sent"] for r in runs),
        "flood_share": flood_ok / (calm_ok + flood_ok) if calm_ok + flood_ok else 0.0,
        "flood_entitled": _flood_entitled(runs, calm_ok + flood_ok),
        "req_s": (calm_ok + flood_ok) / sum(r["wall"] for r in runs),
        "calm_attain": sum(r["calm_met"] for r in runs) / max(1, sum(r["calm_sent"] for r in runs)),
        "attain": sum(r["calm_met"] + r["flood_met"] for r in runs)
        / max(1, sum(r["calm_sent"] + r["flood_sent"] for r in runs)),
        "hit": hits[0] / hits[1] if hits[1] else float("nan"),
        "calm_hit": hits[2] / hits[3] if hits[3] else float("nan"),
        "derived": sum(derived) / len(derived) if derived else float("nan"),
    }


def report(
    per_run: list[dict[str, dict[str, Any]]], loads: list[dict[str, str]], cmd: str, args: argparse.Namespace
) -> str:
    """Per run: each mode's p99 x that run's alone; pooled over the runs: every metric of issue 28."""
    labels = list(per_run[0])
    by_label = {lab: [r[lab] for r in per_run if lab in r] for lab in labels}
    pool = {lab: pooled(rs) for lab, rs in by_label.items()}
    alone = pool.get("alone", {}).get("p99")
    fifo_rps = pool.get("fifo", {}).get("req_s")
    run_rows = []
    for n, r in enumerate(per_run):
        a = r.get("alone", {}).get("p99")
        cells = [f"{r[lab]['p99'] / a:.2f}" if a and lab in r else "-" for lab in labels if lab != "alone"]
        lo = [float(x) for x in loads[n].values()]
        run_rows.append([n + 1, f"{a:.3f}" if a else "-", *cells, f"{min(lo):.1f}-{max(lo):.1f}"])
    run_table = table(
        ["run", "alone p99 s", *(f"{lab}: p99 x alone" for lab in labels if lab != "alone"), "load"], run_rows
    )
    f = lambda x, d=3: "-" if x != x else f"{x:.{d}f}"  # noqa: E731
    rows = []
    for lab, s in pool.items():
        worst = max((s["per"][t][1] for t in CALM if s["per"][t][1] == s["per"][t][1]), default=float("nan"))
        rows.append([
            lab, s["n"], f(s["p50"]), f(s["p99"]), f(s["p99"] / alone, 2) if alone else "-", f(worst / alone, 2) if alone else "-",
            f"{s['calm_ok']} / {s['calm_sent']} ({s['calm_errors']})", f"{s['flood_ok']} / {s['flood_sent']}",
            f(s["flood_share"]), f(s["flood_entitled"]), within_entitled(s["flood_share"], s["flood_entitled"]),
            f(s["req_s"], 1), f(s["req_s"] / fifo_rps) if fifo_rps else "-",
            f(s["calm_attain"]), f(s["attain"]), f(s["hit"]), f(s["calm_hit"]), f(s["derived"], 2),
        ])  # fmt: skip
    headers = ["mode", "well-behaved answered (pooled)", "p50 TTFT", "p99 TTFT", "p99 x alone", "worst tenant's p99 x alone",
               "well-behaved answered / sent (errors)", "flood answered / sent", "flood share (weight share 0.167)",
               "flood entitled (max-min)", f"flood within entitled + {SHARE_TOLERANCE:g}", "req/s", "x FIFO", "objective (well-behaved, 1 s)", "objective (all; flood 3 s)", "hit rate",
               "hit rate (well-behaved)", "derived headroom (end)"]  # fmt: skip
    per_rows = [
        [t, *(f"{f(pool[lab]['per'][t][0])} / {f(pool[lab]['per'][t][1])}" for lab in labels)] for t in CALM
    ]
    return "\n".join(
        [
            "### The same through sockets: `serve` and simulator processes, smg 1.13.0's priority scheduler",
            "",
            f"`{cmd}` (2 simulated replicas, `--mode engine --max-num-seqs {SLOTS + HEADROOM}`, real time; five "
            f"tenants Poisson at 1/s each for {args.seconds:g} s, streamed with the openai client, interactive; "
            f"the flood a closed loop of {args.flood_concurrency} streams; "
            f"{'max_tokens 16-112, mean 64' if args.spread_tokens else 'max_tokens 64'}; {args.runs} run(s) of every mode, one "
            "mode after another; load: the machine's 1-minute load average after each mode, 2 cores shared with "
            "other work). TTFT in seconds at the client; req/s: answers over the modes' wall time; x FIFO: "
            "against `fifo` (today's slot queue); flood entitled: its weighted max-min fair share of the answers "
            "(weights 1) given what each well-behaved tenant sent and a flood always backlogged; objective: share of the requests sent whose first token "
            "came within it (an error missed it); hit rate: prompt tokens the engines took from their prefix "
            "caches, of every generation they started.",
            "",
            "Each run, p99 x that run's alone:",
            "",
            run_table,
            "",
            "Pooled over the runs (x alone: against the pooled alone):",
            "",
            table(headers, rows),
            "",
            "Each well-behaved tenant, pooled, p50 / p99 TTFT (s):",
            "",
            table(["tenant", *labels], per_rows),
            "",
            tails_md(
                {
                    lab: {t: [x for r in rs for x in r["per_tail"][t]] for t in CALM}
                    for lab, rs in by_label.items()
                },
                "alone",
                f"{len(per_run)} run(s) of {args.seconds:g} s",
            )
            if "alone" in by_label
            else "",
        ]
    )


if __name__ == "__main__":
    main()
