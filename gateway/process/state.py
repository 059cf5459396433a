"""Everything one gateway process serves with, built from a policy.

Handlers read ``current_state(request.app)`` once per request; a reload builds a new ``GatewayState``
and swaps the holder's reference, so a request in flight finishes on the state it started with.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from config.policy import Policy
from gateway.fleet.pools import Pool, build_pools
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.ops_metrics import ops_metrics
from gateway.pipeline.billing import Metering
from gateway.pipeline.tenant import TenantResolver, server_secret
from gateway.process.cache_runtime import CacheRuntime, build_cache_runtime
from gateway.upstream.client import Upstream
from gateway.upstream.health import FleetHealth


@dataclass(slots=True)
class GatewayState:
    policy: Policy
    pools: dict[str, Pool]
    tenants: TenantResolver
    metrics: GatewayMetrics
    upstream: Upstream
    cache: CacheRuntime | None = None
    metering: Metering | None = None
    draining: bool = False
    # Breakers, active verdicts and drains per replica: one object shared by every state a reload builds.
    fleet: FleetHealth | None = None


def new_fleet(policy: Policy, metrics: GatewayMetrics) -> FleetHealth:
    return FleetHealth(policy.breaker, ops_metrics(metrics.registry), metrics.replica_healthy)


def build_state(
    policy: Policy,
    metrics: GatewayMetrics,
    upstream: Upstream,
    secret: bytes | None = None,
    fleet: FleetHealth | None = None,
    pools: dict[str, Pool] | None = None,
) -> GatewayState:
    """``fleet`` and ``pools`` are given by a reload, to keep breakers, drains and routers' indexes."""
    if secret is None:
        secret = server_secret(policy.tenancy, required=policy.redis.url is not None)
    if pools is None:
        pools = build_pools(policy)
    if fleet is None:
        fleet = new_fleet(policy, metrics)
    else:
        fleet.reconfigure(policy.breaker)
    fleet.attach(p.router for p in pools.values())
    return GatewayState(
        policy=policy,
        pools=pools,
        tenants=TenantResolver(policy.tenancy, secret),
        metrics=metrics,
        upstream=upstream,
        cache=build_cache_runtime(policy, metrics) if policy.cache.enabled else None,
        fleet=fleet,
    )


@dataclass(slots=True)
class StateHolder:
    """Set once at startup (the app is frozen afterwards); ``current`` is swapped by a reload."""

    current: GatewayState


STATE = web.AppKey("state", StateHolder)


def current_state(app: web.Application) -> GatewayState:
    return app[STATE].current
