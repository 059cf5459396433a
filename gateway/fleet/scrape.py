"""Scrape each replica's /metrics for its own view of its load.

One gateway pod only sees its own share of the traffic; the replica's ``num_requests_running`` and
``num_requests_waiting`` include every pod's. The router ignores a report older than a few seconds, so a
replica whose scrape fails falls back to the gateway's own in-flight count.

The same scrape reads the replica's token counters (``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``, SGLang's names) into the process's ``CounterLog``
(``gateway.fleet.counters``), which keeps them at window edges for usage reconciliation. The loop receives the current pools and
upstream session (getters: a reload swaps both) and that log, not the process.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from gateway.fleet.counters import CounterLog
from gateway.fleet.pools import CurrentPools, CurrentSession
from gateway.fleet.vllm_info import INFO, cache_info_of, is_cache_config
from gateway.upstream.coding import UnreadableCoding, coding_of, decode_whole
from router.pool import PoolRouter
from router.replica import ReplicaState

log = logging.getLogger("prefix_gateway")

# Our name → the replica metrics that carry it (vLLM's current and older names, SGLang's).
RUNNING = ("vllm:num_requests_running", "sglang:num_running_reqs")
WAITING = ("vllm:num_requests_waiting", "sglang:num_queue_reqs")
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage")


SGLANG_CAPACITY = "sglang:max_total_num_tokens"
# The replica's own token counters (cumulative since it started), for usage reconciliation.
PROMPT_TOTAL = ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total")
GENERATION_TOTAL = ("vllm:generation_tokens_total", "sglang:generation_tokens_total")
# Its prefix-cache hits in tokens (cumulative): what router.capacity learns from when answers carry no
# cached_tokens (vLLM without --enable-prompt-tokens-details).
PREFIX_HITS_TOTAL = ("vllm:prefix_cache_hits_total",)


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    running: float | None
    waiting: float | None
    kv_usage: float | None
    kv_capacity_tokens: int | None = None  # what its KV cache holds, when the replica says
    prompt_tokens_total: float | None = None  # its counters, summed over label sets (models, engines)
    generation_tokens_total: float | None = None
    prefix_cache_hits_total: float | None = None


_WANTED = frozenset(
    RUNNING + WAITING + KV_USAGE + PROMPT_TOTAL + GENERATION_TOTAL + PREFIX_HITS_TOTAL + (SGLANG_CAPACITY,)
)
# The sample lines the gateway reads, found by one C-speed regex scan first: a vLLM /metrics page is
# a thousand lines and more (histograms per model and bucket), and prometheus_client's pure-Python parser
# held the event loop 79 ms per replica and scrape on a 1,434-line page built like vLLM's, against 2.1 ms
# with the filter (python -m bench.scrape_parse, on the loaded 2-core machine): a stall every request in
# flight waited out, once a second per replica.
_NAMES = "|".join(re.escape(n) for n in sorted(_WANTED | {INFO, INFO.removesuffix("_info")}))
_LINES = re.compile(r"^(?:" + _NAMES + r")(?:\{[^\n]*\})?[ \t][^\n]*$", re.MULTILINE)


def parse_load(text: str) -> ReplicaLoad:
    """Sum each gauge and counter over its label sets (several engines or models behind one
    endpoint), and read the KV capacity (vLLM's ``cache_config_info`` labels, SGLang's
    ``max_total_num_tokens``). A counter is read by its ``_total`` sample, whether its ``# TYPE``
    line (which the filter drops) named the family without the suffix or not."""
    totals: dict[str, float] = {}
    capacity: int | None = None
    wanted = _WANTED
    for family in text_string_to_metric_families("\n".join(_LINES.findall(text)) + "\n"):
        if is_cache_config(family.name):
            info = cache_info_of(family)
            if info is not None:
                capacity = info.num_blocks * info.block_size
            continue
        if family.name not in wanted and family.name + "_total" not in wanted:
            continue
        for sample in family.samples:
            if sample.name in wanted:  # a gauge's own name, a counter's ``_total`` sample
                totals[sample.name] = totals.get(sample.name, 0.0) + sample.value

    def first(names: tuple[str, ...]) -> float | None:
        return next((totals[n] for n in names if n in totals), None)

    if capacity is None and SGLANG_CAPACITY in totals:
        capacity = int(totals[SGLANG_CAPACITY])
    return ReplicaLoad(
        first(RUNNING),
        first(WAITING),
        first(KV_USAGE),
        capacity,
        first(PROMPT_TOTAL),
        first(GENERATION_TOTAL),
        first(PREFIX_HITS_TOTAL),
    )


async def scrape_one(session: aiohttp.ClientSession, url: str, timeout_s: float) -> ReplicaLoad | None:
    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                return None
            # Asked for no coding (make_session); a replica that compresses anyway is decoded here.
            body = decode_whole(await resp.read(), coding_of(resp.headers.get("Content-Encoding")))
            text = body.decode(resp.get_encoding())
    except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError, LookupError, UnreadableCoding):
        return None
    try:
        return parse_load(text)
    except ValueError:
        return None


def learn_capacity(router: PoolRouter, replica: ReplicaState, tokens: int | None, learned: set[str]) -> None:
    """Bound the replica's index by its real KV capacity, unless the policy gave one."""
    if not tokens or (replica.kv_capacity_blocks is not None and replica.id not in learned):
        return
    blocks = max(1, tokens // router.cfg.block_size)
    if replica.kv_capacity_blocks != blocks:
        router.set_capacity(replica.id, blocks)
        learned.add(replica.id)
        log.info(
            "replica KV capacity learnt",
            extra={"event": "kv_capacity", "replica": replica.id, "blocks": blocks},
        )


async def scrape_loop(
    pools: CurrentPools, session: CurrentSession, counters: CounterLog, interval_s: float, timeout_s: float
) -> None:
    learned: set[str] = set()  # replicas whose index bound came from their own metrics, not the policy
    while True:
        targets = [
            (name, pool.router, r)
            for name, pool in pools().items()
            for r in pool.router.replicas
            if r.healthy
        ]
        # One time for the round, taken before any replica is read: every replica's counters of a
        # round share it, so a reconciliation window is one ledger period for all of them.
        ts_ms = int(time.time() * 1000)
        client = session()
        loads = await asyncio.gather(
            *(scrape_one(client, r.url, timeout_s) for _, _, r in targets),
            return_exceptions=True,
        )
        for (model, router, replica), load in zip(targets, loads, strict=True):
            if isinstance(load, ReplicaLoad):
                router.update_reported(replica.id, load.running, load.waiting, load.kv_usage)
                learn_capacity(router, replica, load.kv_capacity_tokens, learned)
                if load.prefix_cache_hits_total is not None:
                    router.observe_hit_counter(replica.id, load.prefix_cache_hits_total)
                if load.prompt_tokens_total is not None and load.generation_tokens_total is not None:
                    counters.observe(
                        model,
                        replica.id,
                        ts_ms,
                        int(load.prompt_tokens_total),
                        int(load.generation_tokens_total),
                    )
        await asyncio.sleep(interval_s)
