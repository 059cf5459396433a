"""A saturated fleet shared by tenants, in model time: no gateway queue, today's slot queue, the fair queue.

    python -m bench.fairness [--replicas 2] [--slots 8] [--seconds 30] [--calm-rate 1.0] [--flood-x 10]
        [--batch-lines 200] [--seed 0] [--tail-seeds 1 2 ...] [--write]

No processes and no sockets, as ``bench.routing_offline``: ``router.pool.PoolRouter`` decides,
``sim.engine.Engine`` replicas (vLLM V1's scheduler, Llama-3-8B on an A100 step costs) serve,
one event queue orders arrivals, engine steps and metric scrapes. The gateway's queueing is the code
the gateway runs: ``router.fairness`` (the queue, ``release``, the TTFT prediction); only the asyncio
around it (``gateway.process.fair_admission``) is replaced by the event loop. Deterministic for a seed.

The workload: five well-behaved tenants (``calm0``..``calm4``), each Poisson at ``--calm-rate``
requests a second, class ``interactive`` with a TTFT objective of 1 s; one tenant (``flood``) Poisson
at ``--flood-x`` times the fleet's measured capacity, class ``standard`` (its ceiling) with an
objective of 3 s; ``--batch-lines`` offline batch lines offered at 0 (the batch band). Every tenant's
prompts share its own 512-token system prompt, then 128 tokens of their own, 64 output tokens.

Modes:

- ``none``: no gateway queue; every request goes to a replica at once (prefix affinity), and the
  engines run their queues first come first served (``max_num_seqs`` = ``--slots``).
- ``fifo``: today's gateway: ``limits.max_concurrent_per_replica`` = ``--slots``, a FIFO queue of
  1024 with ``queue_timeout_s`` 5 s (503 past either); batch lines wait in the same queue.
- ``fair``: ``fairness.enabled``, the same slots; classes interactive / standard / background,
  ``max_queued_per_tenant`` 256, objectives enforced at arrival (429 when predicted unattainable).
- ``alone``: the five well-behaved tenants without the flood or the batch (fair settings), the
  reference for their TTFT.
- ``--headroom N`` (default 2): the fair queue with ``fairness.headroom_slots`` N, the engines' batch
  ``--slots`` + N, beside a slot FIFO at ``--slots`` + N slots: the same engines, everyone on them.
- ``--max-prefill N``: the fair queue with each headroom and ``fairness.max_queued_prefill_tokens`` N:
  below the interactive class, a replica with more than N prefill tokens queued takes nothing more.
- ``--scraped``: the fair queue bounded by the engines' scraped waiting count (``max_engine_waiting``
  0, scrapes every second) instead of slots (8 x ``--slots``; the engines' batch ``--slots``).

``p99 wait: gateway / engine``: where the well-behaved requests' time to first token went, at the
99th percentile of each: held at the gateway (arrival to routing), and in the engine (routing to
the first token: its queue, then the prefill).

``--tail-seeds``: every mode again with these seeds, and each well-behaved tenant's p95 / p99 pooled
over them against its own alone, with the order-statistic intervals of ``bench.tails`` (one 30 s seed
gives a tenant ~30 requests: its "p99" is its max; a p99 bounded from above needs 368).

Arrivals stop at ``--seconds``; throughput and shares count completions before it. The run goes on
until every well-behaved request had its first token (a request left in an engine's queue at the end
is served late, not dropped, so its TTFT is counted) or a horizon of 20 x ``--seconds``.
"""

from __future__ import annotations

import argparse
import heapq
import random
import sys
import time
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

from bench.report import percentile, table, write_section
from bench.tails import ratio_cell, ratio_ci, tenant_tails
from config.routing import RoutingConfig
from router.fairness.classes import ClassSpec
from router.fairness.classes import engine_priority as engine_prio
from router.fairness.headroom import DERIVE_EVERY_S, MODELS, AutoHeadroom, TopConcurrency, derived_slots
from router.fairness.queue import FairQueue, QueueFull, Waiter
from router.fairness.release import not_to, queues_for_home, release, with_room
from router.fairness.saturation import SaturationLimits, full_for, pool_saturation
from router.fairness.ttft import ServiceTime, predict_on_pool
from router.fairness.work import predicted_work
from router.pool import PoolRouter
from router.replica import ReplicaState
from router.types import Decision, NoReplicaAvailable, ReplicasBusy, RouteRequest
from sim.engine import Engine, EngineConfig, EngineCosts, EngineRequest
from sim.kvcache import block_hashes, count_tokens
from sim.prompt import render_chat

_ARRIVE, _STEP, _SCRAPE = 0, 1, 2
CALM = tuple(f"calm{i}" for i in range(5))
FLOOD = "flood"
MAX_TOKENS = 64
CLASSES = (
    ClassSpec("interactive", 0, 2.0, 1.0),
    ClassSpec("standard", 1, 10.0, 3.0),
    ClassSpec("background", 2, 30.0, None),
)
BATCH = ClassSpec("batch", 3, 60.0, None)
FIFO_QUEUE, FIFO_TIMEOUT_S = 1024, 5.0
FAIR_QUEUE, FAIR_PER_TENANT, FAIR_TIMEOUT_S = 1024, 256, 30.0
TAIL_TARGET = 1.25  # issue 28: each well-behaved tenant's p99 within 1.25 x its p99 alone
DECODE_WEIGHT, LOOKAHEAD, OVERHEAD_S, SERVICE_S = 5.0, 8, 0.0097, 2.0


def _words(rng: random.Random, n: int) -> str:
    return " ".join(f"w{rng.randrange(100_000)}" for _ in range(n))


@dataclass
class Req:
    i: int
    tenant: str | None  # None: a batch line
    spec: ClassSpec
    at: float
    body: dict[str, Any]
    first: float | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    done: float | None = None
    shed: str | None = None
    decision: Decision | None = None
    best: int = 0  # the longest prefix match anywhere at its arrival (tokens, the router's index)
    home: str | None = None  # the replica holding it
    scheduled: float | None = None  # the start of the engine step that first scheduled it

    @property
    def objective(self) -> float | None:
        return self.spec.ttft_s


def workload(seconds: float, calm_rate: float, flood_rate: float, batch_lines: int, seed: int) -> list[Req]:
    rng = random.Random(seed)
    system = {t: _words(rng, 400) for t in (*CALM, FLOOD, "batch")}  # ~512 tokens (4 bytes a token)
    out: list[Req] = []

    def body(who: str) -> dict[str, Any]:
        return {
            "model": "m",
            "messages": [
                {"role": "system", "content": system[who]},
                {"role": "user", "content": _words(rng, 100)},
            ],
            "max_tokens": rng.randint(MAX_TOKENS // 4, MAX_TOKENS * 7 // 4),  # mean MAX_TOKENS
        }

    for tenant, rate, spec in [(t, calm_rate, CLASSES[0]) for t in CALM] + [(FLOOD, flood_rate, CLASSES[1])]:
        if rate <= 0:
            continue
        t = rng.expovariate(rate)
        while t < seconds:
            out.append(Req(0, tenant, spec, t, body(tenant)))
            t += rng.expovariate(rate)
    out += [Req(0, None, BATCH, 0.0, body("batch")) for _ in range(batch_lines)]
    out.sort(key=lambda r: r.at)
    for i, r in enumerate(out):
        r.i = i
    return out


@dataclass
class _Held:
    req: Req
    request: RouteRequest
    home: str | None
    clock: list[float]
    matched: dict[str, int] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()

    @property
    def gone(self) -> bool:  # gave up: the gateway answered it 503 at its deadline
        return self.clock[0] - self.req.at > FAIR_TIMEOUT_S


@dataclass
class Run:
    mode: str
    reqs: list[Req]
    seconds: float
    hits: int = 0
    queries: int = 0
    extra: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)  # the fair queue's (1 when absent)


def simulate(
    mode: str,
    reqs: list[Req],
    replicas: int,
    slots: int,
    seconds: float,
    reserved: int = 0,
    lookahead: int = LOOKAHEAD,
    kv_blocks: int = 2048,
    headroom: int = 0,
    engine_batch: int | None = None,
    max_waiting: float | None = None,
    kv_usage: float | None = None,
    max_prefill: int | None = None,
    weights: dict[str, float] | None = None,
    watch: frozenset[str] = frozenset(CALM),
    costs: EngineCosts | None = None,
    fifo_timeout_s: float = FIFO_TIMEOUT_S,
    auto: AutoHeadroom | None = None,
    engine_priority: bool = False,
    max_batched_tokens: int = 8192,
    long_prefill: int = 0,
) -> Run:
    """One run; ``engine_batch`` (the engines' ``max_num_seqs``) defaults to ``slots + headroom``.
    ``weights``: the fair queue's per tenant (1 when absent); the run goes on until every request of
    the ``watch`` tenants had its first token (or the horizon); ``costs``: the engines' step costs;
    ``auto``: the highest class's headroom derived from its concurrency (``router.fairness.headroom``),
    kept inside the ``slots`` (as the gateway's ``auto_headroom``); ``engine_priority``: the engines
    run vLLM's ``--scheduling-policy priority`` and each request carries its band's ``priority``
    (``router.fairness.classes.engine_priority``, ``vllm``; the batch band latest);
    ``max_batched_tokens`` / ``long_prefill``: the engines' ``--max-num-batched-tokens`` and
    ``--long-prefill-token-threshold`` (vLLM's defaults 8192 and 0: no cap)."""
    clock = [0.0]
    batch = engine_batch if engine_batch is not None else slots + headroom
    states = [
        ReplicaState(id=f"r{k}", url=f"sim://{k}", kv_capacity_blocks=kv_blocks) for k in range(replicas)
    ]
    routing = RoutingConfig(policy="prefix_affinity")
    router = PoolRouter(
        states, routing, clock=lambda: clock[0], slot_limit=0 if mode == "none" else slots + headroom
    )
    engine_cfg = EngineConfig(
        num_gpu_blocks=kv_blocks, max_num_seqs=batch, costs=costs or EngineCosts(),
        scheduling_policy="priority" if engine_priority else "fcfs",
        max_num_batched_tokens=max_batched_tokens, long_prefill_token_threshold=long_prefill,
    )  # fmt: skip
    style = "vllm" if engine_priority else "none"
    engines = [Engine(engine_cfg) for _ in range(replicas)]
    stepping = [False] * replicas
    step_out: list[Any] = [None] * replicas
    events: list[tuple[float, int, int, int]] = []
    seq = 0
    lim = base_lim = SaturationLimits(
        slots=slots, reserved=reserved, headroom=headroom, kv_usage=kv_usage, max_waiting=max_waiting,
        max_prefill_tokens=max_prefill,
    )  # fmt: skip
    top = TopConcurrency(auto.window_s if auto else 1.0, 0.0)
    derived_seen: list[int] = []
    high = [float("-inf"), 0.0]  # when the quantile was last taken, its value

    def derive(now: float) -> None:  # the gateway's _PoolQueue.sat_limits (the quantile every DERIVE_EVERY_S)
        nonlocal lim
        if auto is None:
            return
        if now - high[0] >= DERIVE_EVERY_S:
            high[:] = [now, top.needed(now, auto, auto.max_slots * replicas)]
        h = derived_slots(high[1], top.count, replicas, slots, auto)
        lim = replace(base_lim, reserved=h)
        derived_seen.append(h)

    fifo: deque[Req] = deque()
    fair = FairQueue(len(CLASSES) + 1, FAIR_QUEUE)
    service = ServiceTime(SERVICE_S)
    by_engine: dict[EngineRequest, Req] = {}
    calm_left = sum(1 for r in reqs if r.tenant in watch)
    horizon = 20 * seconds
    most_low = [0]
    off_home = [0, 0]  # requests sent off the replica of their longest match at arrival, the tokens lost
    queued_at_send = [0, 0]  # well-behaved requests sent to an engine, of which found others waiting there

    def push(t: float, kind: int, arg: int) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, arg))

    def route_req(r: Req) -> RouteRequest:
        return RouteRequest("chat", "m", r.body, r.tenant or "")

    def send(r: Req, d: Decision, now: float) -> None:
        r.decision = d
        if d.matched_tokens < r.best:  # off its best-prefix replica: the difference prefilled again
            off_home[0] += 1
            off_home[1] += r.best - d.matched_tokens
        if r.spec.rank:  # most a replica held, counting a lower class's request just sent
            most_low[0] = max(most_low[0], d.replica.in_flight)
        k = int(d.replica.id[1:])
        data = render_chat(r.body)
        hashes = block_hashes(data, block_size=16, bytes_per_token=4)
        prio = engine_prio(style, r.spec.rank, len(CLASSES) + 1) or 0
        ereq = EngineRequest(hashes, count_tokens(len(data), 4), r.body["max_tokens"], priority=prio)
        by_engine[ereq] = r
        if r.tenant in watch:  # did a well-behaved request find the engine's own queue non-empty?
            queued_at_send[0] += 1
            queued_at_send[1] += bool(engines[k].waiting)
        engines[k].add(ereq, now)
        if not stepping[k]:
            out = engines[k].step(now)
            stepping[k], step_out[k] = True, out
            push(now + out.duration_s, _STEP, k)

    def pump(now: float) -> None:
        if mode == "fifo":
            while fifo:
                r = fifo[0]
                if now - r.at > fifo_timeout_s:
                    fifo.popleft()
                    r.shed = "timeout"
                    continue
                try:
                    d = router.route(route_req(r))
                except ReplicasBusy:
                    return
                fifo.popleft()
                send(r, d, now)
        elif mode in ("fair", "alone"):
            for waiter, got in release(fair, router, lim, now, lookahead):
                r = waiter.payload.req
                if isinstance(got, Decision):
                    send(r, got, now)
                else:
                    r.shed = "no_replica"

    def arrive(r: Req, now: float) -> None:
        if r.spec.rank == 0:
            top.started(now)
        derive(now)
        _arrive(r, now)
        if r.spec.rank == 0 and r.shed is not None:
            top.ended(now)

    def _arrive(r: Req, now: float) -> None:
        _, at_arrival = router.matches(route_req(r))
        if at_arrival:
            r.home = max(at_arrival, key=at_arrival.__getitem__)
            r.best = at_arrival[r.home]
        if mode == "none":
            send(r, router.route(route_req(r)), now)
            return
        if mode == "fifo":
            if not fifo:
                try:
                    send(r, router.route(route_req(r)), now)
                    return
                except ReplicasBusy:
                    pass
            if len(fifo) >= FIFO_QUEUE:
                r.shed = "queue_full"
            else:
                fifo.append(r)
            return
        request = route_req(r)
        prompt, matched = router.matches(request)
        blim = lim.for_band(r.spec.rank)
        sat = pool_saturation(router.replicas, blim, now)

        def objective_ok(ahead: int) -> bool:
            if r.objective is None:
                return True
            predicted = predict_on_pool(
                router.replicas, prompt, matched, limits=lim, now=now,
                default_rate=routing.prefill_tokens_per_s, ahead=ahead, service_s=service.value,
                overhead_s=OVERHEAD_S,
            )  # fmt: skip
            return predicted <= r.objective

        home = max(matched, key=matched.__getitem__) if matched else None
        full_now = full_for(router.replicas, blim, now)
        room = with_room(router, lim, now)
        for_home = queues_for_home(r.spec.rank, router, home, matched, (), room, full_now)
        if not len(fair) and not sat.saturated and not for_home:
            if not objective_ok(0):
                r.shed = "objective"
                return
            try:
                send(r, router.route(request, exclude=not_to((), full_now)), now)
                return
            except NoReplicaAvailable:
                pass  # every replica full for its class (the pool has healthy replicas): it waits
        work = predicted_work(prompt, max(matched.values(), default=0), r.body["max_tokens"], DECODE_WEIGHT)
        weight = (weights or {}).get(r.tenant or "", 1.0)
        held = _Held(r, request, home, clock, dict(matched))
        w = Waiter(r.tenant, r.spec.rank, work, weight, now, r.spec.max_wait_s, held)
        try:
            evicted = fair.push(w, FAIR_QUEUE if r.tenant is None else FAIR_PER_TENANT)
        except QueueFull as full:
            r.shed = "tenant_cap" if full.scope == "tenant" else "queue_full"
            return
        if evicted is not None:
            evicted.payload.req.shed = "preempted"
        if not objective_ok(fair.ahead(w)):
            fair.remove(w)
            r.shed = "objective"
            return
        pump(now)

    for r in reqs:
        push(r.at, _ARRIVE, r.i)
    push(0.0, _SCRAPE, 0)
    while events:
        now, _, kind, arg = heapq.heappop(events)
        clock[0] = now
        if now > horizon or (now > seconds and calm_left == 0):
            break
        if kind == _SCRAPE:
            for k, e in enumerate(engines):
                router.update_reported(f"r{k}", len(e.running), len(e.waiting), e.pool.usage(), now)
            push(now + 1.0, _SCRAPE, 0)
        elif kind == _ARRIVE:
            arrive(reqs[arg], now)
        else:
            k = arg
            out = step_out[k]
            for ereq in out.first_tokens:
                r = by_engine[ereq]
                r.first, r.scheduled = now, ereq.first_scheduled
                assert r.decision is not None
                router.first_byte(r.decision)
                if r.tenant in watch:
                    calm_left -= 1
            for ereq in out.finished:
                r = by_engine.pop(ereq)
                r.done = now
                r.prompt_tokens, r.cached_tokens = ereq.num_prompt_tokens, max(0, ereq.cached_tokens)
                assert r.decision is not None
                router.observe_usage(r.decision, ereq.cached_tokens)
                router.release(r.decision)
                service.observe(now - r.decision.routed_at)
                if r.spec.rank == 0:
                    top.ended(now)
            derive(now)
            stepping[k] = False
            if not engines[k].idle:
                nxt = engines[k].step(now)
                stepping[k], step_out[k] = True, nxt
                push(now + nxt.duration_s, _STEP, k)
            if out.finished or (out.first_tokens and lim.max_prefill_tokens is not None):
                pump(
                    now
                )  # an end frees a slot; a first token frees queued prefill (the gateway's prefill_room)
    for r in reqs:  # still waiting at the end: the gateway would have answered 503 at its deadline
        if r.decision is None and r.shed is None:
            r.shed = "timeout"
    run = Run(mode, reqs, seconds, weights=dict(weights or {}))
    run.queries = sum(e.stats.prefix_queries for e in engines)
    run.hits = sum(e.stats.prefix_hits for e in engines)
    run.extra["most_in_flight_low"] = most_low[0]
    run.extra["engine_batch"] = batch
    run.extra["decode_tokens"] = sum(e.stats.decode_tokens for e in engines)  # the whole run's
    run.extra["busy_s"] = sum(e.stats.busy_s for e in engines)
    run.extra["off_home"] = off_home[0]
    run.extra["off_home_tokens"] = off_home[1]
    run.extra["sent"] = sum(1 for r in reqs if r.decision is not None)
    run.extra["watch_sent"], run.extra["watch_found_queue"] = queued_at_send
    run.extra["preemptions"] = sum(e.stats.preemptions for e in engines)
    if derived_seen:
        run.extra["derived_mean"] = sum(derived_seen) / len(derived_seen)
        run.extra["derived_max"] = max(derived_seen)
    return run


def capacity(replicas: int, slots: int, seconds: float = 20.0, seed: int = 0, kv_blocks: int = 2048) -> float:
    """Requests a second the fleet completes with every slot busy (a closed loop of flood requests)."""
    rng = random.Random(seed)
    system = _words(rng, 400)
    rng_bodies: list[dict[str, Any]] = [
        {
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": _words(rng, 100)},
            ],
            "max_tokens": rng.randint(MAX_TOKENS // 4, MAX_TOKENS * 7 // 4),
        }
        for _ in range(replicas * slots * 4)
    ]
    engines = [Engine(EngineConfig(num_gpu_blocks=kv_blocks, max_num_seqs=slots)) for _ in range(replicas)]
    done = 0
    t = [0.0] * replicas
    nxt = 0

    def add(k: int, now: float) -> None:
        nonlocal nxt
        body = rng_bodies[nxt % len(rng_bodies)]
        nxt += 1
        data = render_chat(body)
        hashes = block_hashes(data, block_size=16, bytes_per_token=4)
        engines[k].add(EngineRequest(hashes, count_tokens(len(data), 4), body["max_tokens"]), now)

    for k in range(replicas):
        for _ in range(slots):
            add(k, 0.0)
    warm = seconds / 4
    for k, e in enumerate(engines):
        while t[k] < seconds:
            out = e.step(t[k])
            t[k] += out.duration_s
            for _ in out.finished:
                if t[k] >= warm:
                    done += 1
                add(k, t[k])
    return done / (seconds - warm)


SHARE_TOLERANCE = 0.02  # the flood's share may exceed its entitled share by this much (about 1 request in 50)


def max_min_shares(demand: dict[str, float], weights: dict[str, float], capacity: float) -> dict[str, float]:
    """Weighted max-min fair allocation of ``capacity`` between tenants offering ``demand`` (the same unit,
    ``math.inf`` for a tenant that is always backlogged): a tenant asking less than its weight's part of
    what is left gets what it asks, the others share the rest by weight (water-filling). What the flood
    is entitled to when the others ask less than their share: all they leave (work conserving)."""
    alloc: dict[str, float] = {}
    left = {t: d for t, d in demand.items() if d > 0}
    rest = capacity
    while left and rest > 0:
        wsum = sum(weights.get(t, 1.0) for t in left)
        fair = {t: rest * weights.get(t, 1.0) / wsum for t in left}
        under = [t for t, d in left.items() if d <= fair[t]]
        if not under:
            alloc.update(fair)
            break
        for t in under:
            alloc[t] = left.pop(t)
            rest -= alloc[t]
    return {t: alloc.get(t, 0.0) for t in demand}


def entitled_shares(
    offered: dict[str, float], completed: float, weights: dict[str, float] | None = None
) -> dict[str, float]:
    """Each tenant's entitled share of the ``completed`` requests: weighted max-min of the fleet's
    throughput (what it completed, everyone included) given each tenant's ``offered`` requests; a
    tenant-less batch band is after every tenant, so the tenants' entitlements add up to 1."""
    if completed <= 0:
        return {t: float("nan") for t in offered}
    alloc = max_min_shares(offered, weights or {}, completed)
    return {t: a / completed for t, a in alloc.items()}


def _ttfts(run: Run, tenant: str) -> list[float]:
    return [r.first - r.at for r in run.reqs if r.tenant == tenant and r.first is not None]


def _tail_ttfts(run: Run, tenant: str) -> list[float]:
    """Every request of the tenant's: one never answered (shed, or past the horizon) as no first token (inf)."""
    return [r.first - r.at if r.first is not None else float("inf") for r in run.reqs if r.tenant == tenant]


def summarize(run: Run) -> dict[str, Any]:
    t_end = run.seconds
    completed = [r for r in run.reqs if r.done is not None and r.done <= t_end]
    out_tokens = sum(r.body["max_tokens"] for r in completed)
    flood_done = sum(1 for r in completed if r.tenant == FLOOD)
    with_obj = [r for r in run.reqs if r.objective is not None]
    met = [r for r in with_obj if r.first is not None and r.first - r.at <= r.objective]  # type: ignore[operator]
    calm_obj = [r for r in with_obj if r.tenant in CALM]
    calm_met = [r for r in met if r.tenant in CALM]
    per = {}
    for t in CALM:
        xs = _ttfts(run, t)
        per[t] = (percentile(xs, 50), percentile(xs, 99)) if xs else (float("nan"), float("nan"))
    calm_shed = sum(1 for r in run.reqs if r.tenant in CALM and r.shed is not None)
    calm_done = [r for r in run.reqs if r.tenant in CALM and r.done is not None]
    pooled = [r.first - r.at for r in run.reqs if r.tenant in CALM and r.first is not None]
    sent = [r for r in run.reqs if r.tenant in CALM and r.first is not None and r.decision is not None]
    gateway_wait = [r.decision.routed_at - r.at for r in sent]  # type: ignore[union-attr]
    engine_wait = [r.first - r.decision.routed_at for r in sent]  # type: ignore[operator,union-attr]
    # the engine's part: routed to the start of the step that first scheduled it (a step running, or the
    # engine's queue), then that step and any later ones until its first token (its prefill's steps)
    step_wait = [r.scheduled - r.decision.routed_at for r in sent if r.scheduled is not None]  # type: ignore[union-attr]
    own_steps = [r.first - r.scheduled for r in sent if r.scheduled is not None]  # type: ignore[operator]
    offered = {t: float(sum(1 for r in run.reqs if r.tenant == t and r.at < t_end)) for t in (*CALM, FLOOD)}
    entitled = entitled_shares(offered, float(len(completed)), run.weights)
    flood = _ttfts(run, FLOOD)
    return {
        "per": per,
        "flood_entitled": entitled[FLOOD] if offered[FLOOD] else float("nan"),
        "throughput": len(completed) / t_end,
        "tokens_per_s": out_tokens / t_end,
        "flood_share": flood_done / len(completed) if completed else 0.0,
        "attain": len(met) / len(with_obj) if with_obj else float("nan"),
        "calm_attain": len(calm_met) / len(calm_obj) if calm_obj else float("nan"),
        "hit": run.hits / run.queries if run.queries else 0.0,
        "calm_hit": sum(r.cached_tokens for r in calm_done) / max(1, sum(r.prompt_tokens for r in calm_done)),
        "p50": percentile(pooled, 50) if pooled else float("nan"),
        "p99": percentile(pooled, 99) if pooled else float("nan"),
        "p99_gateway": percentile(gateway_wait, 99) if sent else float("nan"),
        "p99_engine": percentile(engine_wait, 99) if sent else float("nan"),
        "engine_parts": [
            (percentile(xs, q) if xs else float("nan")) for xs in (step_wait, own_steps) for q in (50, 95, 99)
        ],
        "calm_shed": calm_shed,
        "flood_shed": sum(1 for r in run.reqs if r.tenant == FLOOD and r.shed is not None),
        "batch_done": sum(1 for r in completed if r.tenant is None),
        "flood_p50": percentile(flood, 50) if flood else float("nan"),
        "flood_p99": percentile(flood, 99) if flood else float("nan"),
        **{k: run.extra[k] for k in ("derived_mean", "derived_max") if k in run.extra},
        "engine_queue": (run.extra["watch_found_queue"], run.extra["watch_sent"], run.extra["preemptions"]),
    }


HEADERS = [
    "mode", "p50 TTFT", "p99 TTFT", "p99 x alone", "p99 wait: gateway / engine", "flood share",
    "flood entitled (max-min)", f"flood within entitled + {SHARE_TOLERANCE:g}", "req/s", "output tok/s", "x today",
    "objective (well-behaved)", "objective (all)", "hit rate", "hit rate (well-behaved)",
    "shed (well-behaved / flood)",
    "batch lines done",
]  # fmt: skip


def _differs(args: argparse.Namespace) -> str:
    parts = []
    if args.calm_rate != 1.0:
        parts.append(f"well-behaved tenants at {args.calm_rate:g} requests/s each")
    if args.slots != 8:
        parts.append(f"{args.slots} slots a replica")
    if args.kv_blocks != 2048:
        parts.append(f"{args.kv_blocks} KV blocks a replica")
    return ", ".join(parts) or args.section


def tails_md(tails: dict[str, dict[str, list[float]]], alone: str, over: str) -> str:
    """Each mode's tenants' tails pooled ``over`` runs against each tenant's own alone (bench.tails)."""
    ref = tails[alone]
    pooled_alone = [x for xs in ref.values() for x in xs]
    out = [
        f"Each well-behaved tenant's tail, pooled over {over} (n a tenant, min-max: "
        f"{min(len(xs) for xs in ref.values())}-{max(len(xs) for xs in ref.values())} alone), against its own "
        f"alone; every request of theirs (one shed or never answered: as no first token, inf); [95 % CI]: order-statistic bounds (bench.tails), a ratio's from two 97.5 % ones; 'open': too "
        f"few values to bound it from above; met / missed: the whole interval under / over {TAIL_TARGET:g}:",
        "",
    ]
    for q in (0.95, 0.99):
        rows: list[list[object]] = []
        for name, per in tails.items():
            if name == alone:
                continue
            pooled = [x for xs in per.values() for x in xs]
            rows.append([
                name, f"{min(map(len, per.values()))}-{max(map(len, per.values()))}",
                ratio_cell(ratio_ci(pooled, pooled_alone, q, TAIL_TARGET)),
                *(ratio_cell(ratio_ci(per[t], ref[t], q, TAIL_TARGET)) for t in per),
            ])  # fmt: skip
        p = f"p{round(q * 100)}"
        out += [
            table(["mode", "n a tenant", f"pooled {p} x alone", *(f"{t} {p} x alone" for t in CALM)], rows),
            "",
        ]
    out += ["Alone, each tenant:", "", tenant_tails(ref)]
    return "\n".join(out)


def _without_priority(name: str, results: dict[str, Any]) -> str:
    """The mode a ``..., engine priority`` one is compared with: the same with FCFS engines (the plain
    "no gateway queue" is at the engine batch ``--slots``)."""
    base = name.replace(", engine priority", "")
    return base if base in results else base.split(" (engine batch")[0]


def within_entitled(share: float, entitled: float) -> str:
    if entitled != entitled:
        return "-"
    return f"{'yes' if share <= entitled + SHARE_TOLERANCE else 'no'} ({share - entitled:+.3f})"


def _f(x: float, digits: int = 3) -> str:
    return "all shed" if x != x else f"{x:.{digits}f}"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.fairness", description=__doc__.split("\n")[0])
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--calm-rate", type=float, default=1.0)
    ap.add_argument("--flood-x", type=float, default=10.0)
    ap.add_argument("--batch-lines", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--tail-seeds", type=int, nargs="*", default=[],
        help="also run every mode with these seeds and give each tenant's p90/p95/p99 pooled over "
        "--seed and these, with 95 %% intervals (bench.tails); the main table stays --seed's",
    )  # fmt: skip
    ap.add_argument("--reserved", type=int, nargs="*", default=[1], help="also run the fair queue with these")
    ap.add_argument("--lookahead", type=int, nargs="*", default=[], help="also run the fair queue with these")
    ap.add_argument(
        "--headroom", type=int, nargs="*", default=[2],
        help="also run the fair queue with these headroom slots (and a slot FIFO at the same engine batch)",
    )  # fmt: skip
    ap.add_argument(
        "--max-prefill", type=int, nargs="*", default=[],
        help="also run the fair queue (with each --headroom) with these bounds on a replica's queued "
        "prefill tokens for the lower classes (fairness.max_queued_prefill_tokens)",
    )  # fmt: skip
    ap.add_argument(
        "--scraped", action="store_true",
        help="also run the fair queue bounded by the engines' scraped waiting count instead of slots",
    )  # fmt: skip
    ap.add_argument(
        "--auto", type=float, nargs="*", default=[],
        help="also run the fair queue with the headroom derived at these quantiles of the interactive "
        "class's concurrency (fairness.auto_headroom), slots = the engine batch of the first --headroom",
    )  # fmt: skip
    ap.add_argument("--auto-window", type=float, default=30.0, help="auto_headroom_window_s")
    ap.add_argument(
        "--auto-model", nargs="+", choices=MODELS, default=["poisson"],
        help="auto_headroom_model (each, with each --auto quantile)",
    )  # fmt: skip
    ap.add_argument("--auto-min", type=int, nargs="+", default=[1], help="auto_headroom_min_slots (each)")
    ap.add_argument(
        "--engine-priority", action="store_true",
        help="also run the engines with vLLM's --scheduling-policy priority, each request carrying its "
        "band's priority: the fair queue with each --headroom (and with --scraped), and no gateway "
        "queue at the engine batches --slots and --slots + the first --headroom",
    )  # fmt: skip
    ap.add_argument("--kv-blocks", type=int, default=2048, help="KV blocks of 16 tokens a replica")
    ap.add_argument("--write", action="store_true", help="write the section of docs/benchmarks.md")
    ap.add_argument("--section", default="fairness", help="the section's name in docs/benchmarks.md")
    args = ap.parse_args(argv)
    if not (1 <= args.replicas <= 16 and 1 <= args.slots <= 256 and 0 < args.seconds <= 300):
        ap.error("bounded: 1-16 replicas, 1-256 slots, at most 300 s")
    if args.kv_blocks < 64:
        ap.error("--kv-blocks: at least 64")
    started = time.perf_counter()
    cap = capacity(args.replicas, args.slots, seed=args.seed, kv_blocks=args.kv_blocks)
    flood_rate = args.flood_x * cap
    S = args.slots
    modes: list[tuple[str, str, dict[str, Any]]] = [("alone", "well-behaved alone", {})]
    modes += [("none", "no gateway queue", {}), ("fifo", "today (slot FIFO)", {}), ("fair", "fair queue", {})]
    modes += [
        ("fair", f"fair queue, {n} reserved slot{'s' if n > 1 else ''}", {"reserved": n})
        for n in args.reserved
    ]
    for n in args.headroom:
        modes += [
            ("fair", f"fair queue, headroom {n} (engine batch {S + n})", {"headroom": n}),
            ("fifo", f"slot FIFO at {S + n} slots (the same engine batch)", {"slots": S + n}),
        ]
    if args.engine_priority:
        modes += [
            ("fair", f"fair queue, headroom {n}, engine priority (engine batch {S + n})",
             {"headroom": n, "engine_priority": True})
            for n in args.headroom
        ]  # fmt: skip
        modes += [
            ("none", f"no gateway queue, engine priority (engine batch {b})", {"engine_batch": b, "engine_priority": True})
            for b in dict.fromkeys([S, S + (args.headroom[0] if args.headroom else 0)])
        ]  # fmt: skip
        if args.headroom:
            modes.append(
                (
                    "none",
                    f"no gateway queue (engine batch {S + args.headroom[0]})",
                    {"engine_batch": S + args.headroom[0]},
                )
            )
    modes += [
        ("fair", f"fair queue, headroom {h}, lower classes' queued prefill <= {n}", {"headroom": h, "max_prefill": n})
        for n in args.max_prefill
        for h in args.headroom or [0]
    ]  # fmt: skip
    modes += [("fair", f"fair queue, lookahead {n}", {"lookahead": n}) for n in args.lookahead]
    B = S + (args.headroom[0] if args.headroom else 0)
    modes += [
        ("fair", f"fair queue, auto headroom {model} q {q:g}, min {m} (engine batch {B})",
         {"slots": B, "auto": AutoHeadroom(B // 2, m, q, args.auto_window, model)})
        for model in args.auto_model
        for m in args.auto_min
        for q in args.auto
    ]  # fmt: skip
    if args.scraped:
        modes.append(
            (
                "fair",
                f"fair queue, saturation from scrapes only ({8 * S} slots, engine waiting > 0)",
                {"slots": 8 * S, "engine_batch": S, "max_waiting": 0},
            )
        )
        if args.engine_priority:  # the engines hold a queue here: the priority has something to order
            modes.append(
                (
                    "fair",
                    f"fair queue, saturation from scrapes only ({8 * S} slots, engine waiting > 0), engine priority",
                    {"slots": 8 * S, "engine_batch": S, "max_waiting": 0, "engine_priority": True},
                )
            )
    results: dict[str, dict[str, Any]] = {}
    seeds = [args.seed, *(s for s in args.tail_seeds if s != args.seed)]
    tails: dict[str, dict[str, list[float]]] = {}  # each mode's tenants' TTFTs over the seeds
    for mode, name, kw in modes:
        flood = 0.0 if mode == "alone" else flood_rate
        batch = 0 if mode == "alone" else args.batch_lines
        kw = {"slots": S, "reserved": 0, "lookahead": LOOKAHEAD, "kv_blocks": args.kv_blocks, **kw}
        tails[name] = {t: [] for t in CALM}
        for seed in seeds if args.tail_seeds else seeds[:1]:
            reqs = workload(args.seconds, args.calm_rate, flood, batch, seed)
            run = simulate(mode, reqs, args.replicas, seconds=args.seconds, **kw)
            if seed == args.seed:
                results[name] = summarize(run)
            for t in CALM:
                tails[name][t] += _tail_ttfts(run, t)
    wall = time.perf_counter() - started
    alone_p99 = results["well-behaved alone"]["p99"]
    today = results["today (slot FIFO)"]["tokens_per_s"]
    ratios = [
        f"headroom {n}: output {results[h]['tokens_per_s'] / today:.3f} x today's slot FIFO, "
        f"{results[h]['tokens_per_s'] / results[f]['tokens_per_s']:.3f} x a slot FIFO at {args.slots + n} slots"
        for n in args.headroom
        for h, f in [(f"fair queue, headroom {n} (engine batch {args.slots + n})", f"slot FIFO at {args.slots + n} slots (the same engine batch)")]
    ]  # fmt: skip
    ratios += [
        f"{prio}: output {results[prio]['tokens_per_s'] / results[base]['tokens_per_s']:.3f} x {base} (the same without engine priority)"
        for prio in results
        if ", engine priority" in prio
        for base in [_without_priority(prio, results)]
        if base in results
    ]  # fmt: skip
    ratios += [
        f"{name}: derived headroom mean {s['derived_mean']:.2f}, max {s['derived_max']:.0f} a replica"
        for name, s in results.items()
        if "derived_mean" in s
    ]
    rows = []
    for name, s in results.items():
        rows.append([
            name, _f(s["p50"]), _f(s["p99"]), _f(s["p99"] / alone_p99, 2),
            f"{_f(s['p99_gateway'])} / {_f(s['p99_engine'])}", f"{s['flood_share']:.3f}",
            "-" if s["flood_entitled"] != s["flood_entitled"] else f"{s['flood_entitled']:.3f}", within_entitled(s["flood_share"], s["flood_entitled"]),
            f"{s['throughput']:.2f}", f"{s['tokens_per_s']:.0f}", f"{s['tokens_per_s'] / today:.3f}", f"{s['calm_attain']:.3f}",
            f"{s['attain']:.3f}", f"{s['hit']:.3f}", f"{s['calm_hit']:.3f}",
            f"{s['calm_shed']} / {s['flood_shed']}", s["batch_done"],
        ])  # fmt: skip
    per_rows = [
        [t, *(f"{_f(s['per'][t][0])} / {_f(s['per'][t][1])}" for s in results.values())] for t in CALM
    ]
    given = argv if argv is not None else sys.argv[1:]
    cmd = "python -m bench.fairness" + "".join(f" {a}" for a in given)
    md = "\n".join(
        [
            "## Tenant-fair admission: a flood against five well-behaved tenants (model time)"
            if args.section == "fairness"
            else "### The same, " + _differs(args),
            "",
            f"`{cmd.replace(' --write', '')}` ({args.replicas} engine-model replicas, {args.slots} slots and {args.kv_blocks} KV blocks each, "
            f"measured capacity {cap:.1f} requests/s, flood at {args.flood_x:g} x = {flood_rate:.0f}/s, five "
            f"tenants at {args.calm_rate:g}/s each, {args.batch_lines} batch lines, arrivals for "
            f"{args.seconds:g} s; {wall:.0f} s of wall time). TTFT in seconds, of the five "
            "well-behaved tenants' requests that were served, pooled; x alone: their p99 against the same tenants with no flood and no batch. "
            "Throughput: requests completed before the arrivals stop, per second, and their output tokens "
            "(x today: tokens against today's; requests differ by the mix served). Flood share: of the "
            "requests completed; flood entitled: its weighted max-min fair share of those completions given "
            "each tenant's offered requests (weights 1; the batch band after every tenant): the five ask "
            "less than their share, so the flood is entitled to what they leave. Objective: share of "
            "requests with one (well-behaved 1 s, flood 3 s) whose first token came within it; a shed "
            "request missed it.",
            "",
            table(HEADERS, rows),
            "",
            *(f"- {r}" for r in ratios),
            "",
            "Each well-behaved tenant, p50 / p99 TTFT (s):",
            "",
            table(["tenant", *results], per_rows),
        ]
    )
    md += "\n\nThe well-behaved requests' engine time (routed to first token), in two parts, p50 / p95 / p99 (s): until the engine step that first scheduled it started (the step running when it came, or the engine's queue), then that step and any more until its first token:\n\n" + table(
        ["mode", "until its first step", "its steps to the first token"],
        [[name, " / ".join(_f(x) for x in s["engine_parts"][:3]), " / ".join(_f(x) for x in s["engine_parts"][3:])] for name, s in results.items()],
    )  # fmt: skip
    md += "\n\nWell-behaved requests that found the engine's own queue non-empty when sent to it, of those sent, and the engines' preemptions: " + "; ".join(
        f"{name} {s['engine_queue'][0]} of {s['engine_queue'][1]}, {s['engine_queue'][2]}" for name, s in results.items()
    )  # fmt: skip
    md += "\n\nThe flood's TTFT (its served requests), p50 / p99 (s): " + "; ".join(
        f"{name} {_f(s['flood_p50'])} / {_f(s['flood_p99'])}" for name, s in results.items() if name != "well-behaved alone"
    )  # fmt: skip
    if args.tail_seeds:
        md += "\n\n" + tails_md(tails, "well-behaved alone", f"seeds {' '.join(map(str, seeds))}")
    print(md)
    if args.write:
        write_section(args.section, md)


if __name__ == "__main__":
    main()
