"""Scrape each replica's /metrics for its own view of its load.

One gateway pod only sees its own share of the traffic; the replica's ``num_requests_running`` and
``num_requests_waiting`` include every pod's. The router ignores a report older than a few seconds, so a
replica whose scrape fails falls back to the gateway's own in-flight count.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import aiohttp
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from gateway.state import GatewayState, current_state

log = logging.getLogger("prefix_gateway")

# Our name → the replica metrics that carry it (vLLM's current and older names, SGLang's).
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    running: float | None
    waiting: float | None
    kv_usage: float | None


def parse_load(text: str) -> ReplicaLoad:
    """Sum each gauge over its label sets (several engines or models behind one endpoint)."""
    totals: dict[str, float] = {}
    wanted = set(RUNNING + WAITING + KV_USAGE)
    for family in text_string_to_metric_families(text):
        if family.name not in wanted:
            continue
        for sample in family.samples:
            if sample.name == family.name:
                totals[family.name] = totals.get(family.name, 0.0) + sample.value

    def first(names: tuple[str, ...]) -> float | None:
        return next((totals[n] for n in names if n in totals), None)

    return ReplicaLoad(first(RUNNING), first(WAITING), first(KV_USAGE))


async def scrape_one(session: aiohttp.ClientSession, url: str, timeout_s: float) -> ReplicaLoad | None:
    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            text = await resp.text()
    except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError):
        return None
    try:
        return parse_load(text)
    except ValueError:
        return None


async def scrape_loop(app: web.Application, interval_s: float, timeout_s: float) -> None:
    while True:
        state: GatewayState = current_state(app)
        targets = [
            (pool.router, r) for pool in state.pools.values() for r in pool.router.replicas if r.healthy
        ]
        loads = await asyncio.gather(
            *(scrape_one(state.upstream.session, r.url, timeout_s) for _, r in targets),
            return_exceptions=True,
        )
        for (router, replica), load in zip(targets, loads, strict=True):
            if isinstance(load, ReplicaLoad):
                router.update_reported(replica.id, load.running, load.waiting, load.kv_usage)
        await asyncio.sleep(interval_s)
