"""What a policy makes: the state one request is served with.

Everything here is derived from one policy. A reload builds a new ``State`` from the new policy and
the process swaps its reference in one assignment (``Process.swap``): a request in flight finishes on
the state it started with. A part whose section of the policy did not change is carried over rather
than rebuilt, by one rule (``_keep``): a pool's router (its prefix index and load counters) while the
pool's routing and backend are the same, the upstream session while the timeouts are, the response
cache (entries, coalescing, buckets) while the cache section is. Whatever outlives every reload
(breakers, the ledger, Redis, admission, background tasks) belongs to the ``Process``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import redis.asyncio as aioredis

from cache.billing.budgets import Budget, budgets_of
from cache.billing.pricing import ModelPrices, Rules, prices_from_config, rules_from_config
from cache.conversations import ConversationStore, make_conversations
from config.policy import ModelPoolConfig, Policy
from gateway.fleet.discovery import pool_replicas
from gateway.fleet.pools import Pool
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.tenant import TenantResolver
from gateway.process.cache_runtime import CacheRuntime, build_cache_runtime
from gateway.upstream.client import make_session
from gateway.upstream.health import FleetHealth, ObservedUpstream
from router.pool import PoolRouter

T = TypeVar("T")


@dataclass(slots=True, eq=False)
class State:
    policy: Policy
    pools: dict[str, Pool]
    tenants: TenantResolver
    upstream: ObservedUpstream
    cache: CacheRuntime | None
    rules: dict[str, Rules]  # billing rules per model (overrides applied)
    prices: dict[str, ModelPrices]
    conversations: ConversationStore | None = None  # the Responses API's store (None: turned off)
    budgets: dict[str, tuple[Budget, ...]] = field(default_factory=dict)  # per tenant id (pipeline.budgets)


def _keep(
    previous: State | None, same: Callable[[Policy], Any], policy: Policy, part: Callable[[State], T]
) -> T | None:
    """The previous state's part when the section it is built from is unchanged, else None."""
    if previous is not None and same(previous.policy) == same(policy):
        return part(previous)
    return None


def _pool(
    cfg: ModelPoolConfig, policy: Policy, previous: State | None, discovered: dict[str, tuple[Any, list[str]]]
) -> tuple[Pool, Callable[[], None] | None]:
    """The pool of ``cfg``, and for a router carried over, what to apply to it once the new state is
    current (its replica set and slot cap), so the old state serves unchanged until the swap."""
    known = discovered.get(cfg.name)
    addresses = known[1] if known is not None and known[0] == cfg.discovery else []
    replicas = pool_replicas(cfg, addresses)
    slots = policy.limits.max_concurrent_per_replica
    if policy.fairness.enabled:  # the fair queue's slots are the slot filter's (router.fairness.saturation)
        slots = (policy.fairness.slots_per_replica or slots) + policy.fairness.headroom_slots
    prev = previous.pools.get(cfg.name) if previous is not None else None
    explain = policy.limits.explain_decisions > 0  # the decision log keeps their explanations
    if prev is None or (prev.cfg.routing, prev.cfg.backend) != (cfg.routing, cfg.backend):
        router = PoolRouter(replicas, cfg.routing, slot_limit=slots)
        router.explain = explain
        return Pool(cfg=cfg, router=router), None
    router = prev.router

    def apply() -> None:
        router.set_replicas(replicas)  # staying replicas keep their counters and index entries
        router.slot_limit = slots
        router.explain = explain

    return Pool(cfg=cfg, router=router), apply


def build_state(
    policy: Policy,
    *,
    secret: bytes,
    fleet: FleetHealth,
    metrics: GatewayMetrics,
    redis: aioredis.Redis | None,
    discovered: dict[str, tuple[Any, list[str]]],
    pools_now: Callable[[], dict[str, Pool]],
    previous: State | None = None,
) -> tuple[State, list[Callable[[], None]]]:
    """The state of ``policy``, carrying over from ``previous`` what its unchanged sections built;
    and what to apply to the carried-over routers once the new state is current. ``pools_now``: the
    pools of whatever state is current when called (the semantic cache may embed with one of them)."""
    pools: dict[str, Pool] = {}
    pending: list[Callable[[], None]] = []
    for cfg in policy.models:
        pools[cfg.name], apply = _pool(cfg, policy, previous, discovered)
        if apply is not None:
            pending.append(apply)
    tenants = TenantResolver(policy.tenancy, secret, policy.observability.tenant_labels)
    names = [m.name for m in policy.models]
    rules = {n: rules_from_config(policy.billing, n) for n in names}
    prices = {n: prices_from_config(policy.billing, n) for n in names}
    # Resources last, so that nothing is left open when an earlier part fails to build.
    # Per-model cache settings depend on the model list too.
    cache = _keep(previous, lambda p: (p.cache, [m.name for m in p.models]), policy, lambda s: s.cache)
    if cache is None and policy.cache.enabled:
        cache = build_cache_runtime(policy, metrics, redis, secret, pools_now)
    conversations = _keep(previous, lambda p: p.protocols.responses, policy, lambda s: s.conversations)
    if conversations is None:
        conversations = make_conversations(policy.protocols.responses, redis, policy.redis.key_prefix)
    upstream = _keep(previous, lambda p: p.timeouts, policy, lambda s: s.upstream)
    if upstream is None:
        upstream = ObservedUpstream(make_session(policy.timeouts), policy.timeouts, fleet)
    state = State(
        policy=policy,
        pools=pools,
        tenants=tenants,
        upstream=upstream,
        cache=cache,
        rules=rules,
        prices=prices,
        conversations=conversations,
        budgets=budgets_of(policy.tenancy),
    )
    return state, pending


def replaced(old: State, new: State) -> list[Callable[[], Any]]:
    """What ``old`` owned that ``new`` does not carry over: to close once old requests finished."""
    closers: list[Callable[[], Any]] = []
    if new.upstream is not old.upstream:
        closers.append(old.upstream.close)
    if old.cache is not None and new.cache is not old.cache:
        closers.append(old.cache.close)
    return closers
