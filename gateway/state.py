"""Everything one gateway process serves with, built from a policy.

Handlers read ``current_state(request.app)`` once per request; a reload builds a new ``GatewayState``
and swaps the holder's reference, so a request in flight finishes on the state it started with.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

from config.policy import Policy
from gateway.metrics import GatewayMetrics
from gateway.pools import Pool, build_pools
from gateway.tenancy import TenantResolver, server_secret
from gateway.upstream import Upstream


@dataclass(slots=True)
class GatewayState:
    policy: Policy
    pools: dict[str, Pool]
    tenants: TenantResolver
    metrics: GatewayMetrics
    upstream: Upstream
    draining: bool = False


def build_state(
    policy: Policy, metrics: GatewayMetrics, upstream: Upstream, secret: bytes | None = None
) -> GatewayState:
    if secret is None:
        secret = server_secret(policy.tenancy, required=policy.redis.url is not None)
    return GatewayState(
        policy=policy,
        pools=build_pools(policy),
        tenants=TenantResolver(policy.tenancy, secret),
        metrics=metrics,
        upstream=upstream,
    )


@dataclass(slots=True)
class StateHolder:
    """Set once at startup (the app is frozen afterwards); ``current`` is swapped by a reload."""

    current: GatewayState


STATE = web.AppKey("state", StateHolder)


def current_state(app: web.Application) -> GatewayState:
    return app[STATE].current
