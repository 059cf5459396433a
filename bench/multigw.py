"""What the shared index costs a decision: latency from a decision's planned start to its end.

    python -m bench.multigw [--trace PATH] [--decisions 3000] [--rate 300] [--others 3] [--write]

One gateway process's router (``router.pool.PoolRouter``, 4 replicas) decides the trace's requests on
one asyncio loop, each at its planned time (``--rate`` a second), with the shared index as a gateway
process runs it (``gateway.fleet.sharing``: the ``first_byte`` append, the writer's batches, the
reader applying what the others sent) against a real redis-server, while ``--others`` more gateway
processes' placements (as many decisions a second each, sent by one feeder process as their writers
would) arrive through the same stream, in every row. A decision's latency counts the time the loop was busy elsewhere (the reader applying
batches, the writer encoding them) before it could start, so it is the cost a request sees. Rows:
sharing off; on, Redis up; on, Redis stopped (SIGSTOP: the writer and reader wait on their socket
timeouts while decisions go on). The target (issue 13): at most 1 ms added at p99.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import signal
import sys
import time
from typing import Any

from bench import traces, workloads
from bench.redis_server import RedisServer
from bench.report import percentile
from config.policy import Policy
from config.routing import RoutingConfig
from gateway.fleet.sharing import SharedIndex, open_shared_index
from gateway.observability.metrics import GatewayMetrics
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import RouteRequest

MODEL = workloads.MODEL


def bodies(trace: str | None, n: int) -> list[dict[str, Any]]:
    if trace:
        scale = traces.Scale(traces.MOONCAKE, 8.0)
        recs = traces.read_trace(trace, traces.MOONCAKE, n)
        return [r.body for r in traces.trace_workload(recs, scale, "trace", "trace").requests]
    return [r.body for r in workloads.make("multi_turn").requests][:n]


def make_router() -> PoolRouter:
    replicas = [ReplicaState(id=f"r{i}", url=f"http://r{i}", kv_capacity_blocks=8192) for i in range(4)]
    return PoolRouter(replicas, RoutingConfig(policy="prefix_affinity"))


def policy(redis_url: str) -> Policy:
    return Policy.model_validate(
        {
            "models": [{"name": MODEL, "replicas": [{"url": "http://127.0.0.1:1"}]}],
            "redis": {"url": redis_url, "socket_timeout_s": 0.5},
            "shared_index": {"enabled": True},
        }
    )


def others(redis_url: str, trace: str | None, n: int, rate: float, count: int, stop_at: float) -> None:
    """``count`` other gateway processes' placements, as their writers send them: one batch each every
    ``flush_interval_s``, ``rate`` decisions a second each. One light feeder process (the placements
    are computed before the clock starts), so that the row measures this process, not CPU contention
    with four Python routers on a shared machine."""
    import redis as sync_redis

    from gateway.fleet.sharing.redis_stream import stream_key
    from router.placements import Placement, encode

    cfg = policy(redis_url)
    router = make_router()
    placements = []
    for body in bodies(trace, n):
        d = router.route(RouteRequest("chat", MODEL, body))
        router.release(d)
        placements.append(Placement(MODEL, d.replica.id, d.block_hashes[: cfg.shared_index.max_blocks]))
    client = sync_redis.Redis.from_url(redis_url, socket_timeout=0.5)
    key, every = stream_key(cfg.redis.key_prefix), cfg.shared_index.flush_interval_s
    per_batch = max(1, round(rate * every))
    origins = [os.urandom(8) for _ in range(count)]
    k, tick = 0, time.time()
    while time.time() < stop_at:
        for origin in origins:
            chunk = [placements[(k + j) % len(placements)] for j in range(per_batch)]
            k += per_batch
            for batch in encode(origin, chunk, cfg.shared_index.max_batch_bytes):
                with contextlib.suppress(sync_redis.RedisError):  # stopped on purpose: theirs drop too
                    client.xadd(key, {b"b": batch}, maxlen=cfg.shared_index.stream_max_len, approximate=True)
        tick += every
        time.sleep(max(0.0, tick - time.time()))


def timed(fn: Any, out: list[float]) -> Any:
    def wrapper(*args: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args)
        finally:
            out.append(time.perf_counter() - t0)

    return wrapper


async def decide(reqs: list[dict[str, Any]], rate: float, shared: SharedIndex | None) -> list[float]:
    """Each decision at its planned time; returns end - planned for each (seconds)."""
    router = make_router()
    if shared is not None:
        shared.routers = {MODEL: router}.get
    out: list[float] = []
    t0 = time.perf_counter() + 0.2
    for i, body in enumerate(reqs):
        planned = t0 + i / rate
        delay = planned - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        start = max(planned, 0.0)
        d = router.route(RouteRequest("chat", MODEL, body))
        if shared is not None:
            shared.offer(MODEL, d.replica.id, d.block_hashes)  # what the first_byte hook does
        router.release(d)
        out.append(time.perf_counter() - start)
    return out


async def main_async(args: argparse.Namespace) -> list[list[str]]:
    reqs = bodies(args.trace, args.decisions)
    server = RedisServer()
    server.start()
    rows: list[list[str]] = []
    try:
        variants = [("off", False, False), ("on, Redis up", True, False), ("on, Redis stopped", True, True)]
        for label, sharing, stall in variants * args.rounds:
            server.flushall()
            span = len(reqs) / args.rate + 2.0
            feeder = multiprocessing.Process(
                target=others,
                args=(server.url, args.trace, args.decisions, args.rate, args.others, time.time() + span + 5),
            )
            feeder.start()
            await asyncio.sleep(5.0)  # the feeder computes its placements and starts writing
            shared = None
            holds: list[float] = []  # how long each slice of the reader held the loop
            if sharing:
                shared = await open_shared_index(policy(server.url), GatewayMetrics(), lambda _p: None)
                assert shared is not None
                shared.learn = timed(shared.learn, holds)  # type: ignore[method-assign]
            if stall:
                assert server.proc is not None
                os.kill(server.proc.pid, signal.SIGSTOP)
            try:
                lat = await decide(reqs, args.rate, shared)
            finally:
                if stall and server.proc is not None:
                    os.kill(server.proc.pid, signal.SIGCONT)
            applied = 0.0
            if shared is not None:
                applied = shared.metrics.shared_placements.labels("applied")._value.get()
                await shared.close()
            feeder.join(timeout=span + 20)
            ms = [x * 1000 for x in lat]
            held = [x * 1000 for x in holds] or [0.0]
            rows.append([label, str(len(ms)), f"{percentile(ms, 50):.3f}", f"{percentile(ms, 99):.3f}",
                         f"{max(ms):.2f}", f"{applied:.0f}", f"{percentile(held, 99):.3f}",
                         f"{max(held):.2f}"])  # fmt: skip
            print(" | ".join(rows[-1]), flush=True)
    finally:
        server.stop()
    return rows


def main(argv: list[str] | None = None) -> None:
    from bench.report import table, write_section

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", help="Mooncake conversation_trace.jsonl (default: the multi_turn workload)")
    p.add_argument("--decisions", type=int, default=3000)
    p.add_argument("--rate", type=float, default=300.0, help="decisions a second (each process)")
    p.add_argument("--others", type=int, default=3, help="other gateway processes sharing the stream")
    p.add_argument("--rounds", type=int, default=2, help="the rows again, interleaved (a noisy machine)")
    p.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = p.parse_args(argv)
    rows = asyncio.run(main_async(args))
    headers = ["shared index", "decisions", "p50 ms", "p99 ms", "max ms", "others' placements applied",
               "slice hold p99 ms", "slice hold max ms"]  # fmt: skip
    cmd = "python -m bench.multigw " + " ".join(sys.argv[1:] if argv is None else argv)
    md = "\n".join([
        "### What the shared index costs a decision", "",
        f"Command: `{cmd}`. Latency from a decision's planned start to its end on the process's one loop "
        f"(route + the first-byte append), {args.rate:g} decisions a second, while {args.others} other "
        "processes' placements arrive through the same real Redis stream; the rows interleaved "
        f"{args.rounds} times.", "",
        table(headers, rows),
    ])  # fmt: skip
    print(md)
    if args.write:
        write_section("multigw-decision", md)


if __name__ == "__main__":
    main()
