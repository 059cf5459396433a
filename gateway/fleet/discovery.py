"""Replica discovery: the static list of the policy, plus DNS names resolved periodically.

A pool with ``discovery: {dns: NAME, port: P}`` resolves NAME every ``interval_s`` (``loop.getaddrinfo``,
so ``/etc/hosts`` and the cluster DNS both work; a Kubernetes headless service answers one address per
ready pod). Each address becomes a replica ``ip:port`` beside the static ones. A change reaches the
router through ``PoolRouter.set_replicas``, which keeps the counters and prefix index of replicas that
stay; consistent hashing moves only the keys of the replicas that came or went.

A failed resolution keeps the last known set (a DNS blip must not empty a pool; replicas that really
died are ejected by the health checks). The resolver is a plain async function, injectable in tests.

Discovery receives what it uses of the process (``Discovery``): the current pools, the fleet's health
(re-attached when a pool's replicas change), its metrics, the record of resolved addresses a reload's
build starts from, and the process's tasks (one loop per pool), not the ``Process``.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from config.policy import DiscoveryConfig, ModelPoolConfig
from gateway.fleet.pools import CurrentPools, Pool, replica_states
from gateway.fleet.tasks import Tasks
from gateway.observability.metrics import GatewayMetrics
from gateway.upstream.health import FleetHealth
from router.replica import ReplicaState

log = logging.getLogger("prefix_gateway")

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True, slots=True)
class Discovery:
    """What discovery uses of the process."""

    pools: CurrentPools  # read afresh: a reload swaps them
    health: FleetHealth
    metrics: GatewayMetrics
    tasks: Tasks
    # model name -> (discovery config it was resolved with, addresses in resolver order)
    discovered: dict[str, tuple[Any, list[str]]]
    resolver: Resolver | None = None  # None: resolve_dns


async def resolve_dns(host: str, port: int) -> list[str]:
    """Addresses of ``host`` (IPv4 and IPv6, TCP), unique, in the resolver's order."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    seen: dict[str, None] = {}
    for _family, _type, _proto, _canon, sockaddr in infos:
        seen.setdefault(str(sockaddr[0]), None)
    return list(seen)


def _host_part(address: str) -> str:
    try:
        return f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    except ValueError:
        return address


def discovered_states(cfg: DiscoveryConfig, addresses: Iterable[str], backend: str) -> list[ReplicaState]:
    out = []
    for a in addresses:
        host = _host_part(a)
        out.append(
            ReplicaState(
                id=f"{host}:{cfg.port}",
                url=f"{cfg.scheme}://{host}:{cfg.port}",
                kind=backend,
                kv_capacity_blocks=cfg.kv_capacity_blocks,
            )
        )
    return out


def pool_replicas(pool_cfg: ModelPoolConfig, addresses: Iterable[str]) -> list[ReplicaState]:
    """The static replicas of a pool, then the discovered ones not already listed (by id)."""
    static = replica_states(pool_cfg)
    if pool_cfg.discovery is None:
        return static
    ids = {r.id for r in static}
    dynamic = [
        r for r in discovered_states(pool_cfg.discovery, addresses, pool_cfg.backend) if r.id not in ids
    ]
    return static + dynamic


def apply_addresses(d: Discovery, pool: Pool, addresses: list[str]) -> tuple[set[str], set[str]]:
    """Give the pool's router its static + discovered replicas; returns (added ids, removed ids)."""
    router = pool.router
    before = {r.id for r in router.replicas}
    wanted = pool_replicas(pool.cfg, addresses)
    after = {r.id for r in wanted}
    if before == after:
        return set(), set()
    router.set_replicas(wanted)
    d.health.attach(p.router for p in d.pools().values())
    return after - before, before - after


async def refresh_pool(d: Discovery, model: str, resolver: Resolver) -> bool:
    """Resolve one pool's name once and apply the answer; False when resolution failed."""
    pool = d.pools().get(model)
    if pool is None or pool.cfg.discovery is None:
        return False
    cfg = pool.cfg.discovery
    metrics = d.metrics
    try:
        addresses = await resolver(cfg.dns, cfg.port)
    except (OSError, UnicodeError, ValueError) as exc:
        metrics.child(metrics.discovery_errors, model).inc()
        log.warning(
            "discovery failed; keeping the last known replicas",
            extra={"event": "discovery_error", "model": model, "error": type(exc).__name__},
        )
        return False
    pool = d.pools().get(model)  # a reload may have happened while resolving
    if pool is None or pool.cfg.discovery != cfg:
        return False
    d.discovered[model] = (cfg, addresses)
    added, removed = apply_addresses(d, pool, addresses)
    if added or removed:
        metrics.child(metrics.discovery_changes, model, "added").inc(len(added))
        metrics.child(metrics.discovery_changes, model, "removed").inc(len(removed))
        log.info(
            "discovery changed the replicas",
            extra={"event": "discovery", "model": model, "added": sorted(added), "removed": sorted(removed)},
        )
    return True


async def discovery_loop(d: Discovery, model: str, resolver: Resolver) -> None:
    """Re-resolve one pool's name every ``interval_s`` (read afresh, so a reload's value applies)."""
    while True:
        await refresh_pool(d, model, resolver)
        pool = d.pools().get(model)
        if pool is None or pool.cfg.discovery is None:
            return
        await asyncio.sleep(pool.cfg.discovery.interval_s)


def start_discovery(d: Discovery, restart: bool = False) -> None:
    """Start one loop per pool that has discovery (``restart``: restart them all, resolving at once);
    stop the loops of pools that no longer have it."""
    resolver = d.resolver or resolve_dns
    wanted = {name for name, pool in d.pools().items() if pool.cfg.discovery is not None}
    running = d.tasks.alive("discovery:")
    for key in running:
        if key.removeprefix("discovery:") not in wanted:
            d.tasks.stop(key)
    for name in wanted:
        key = f"discovery:{name}"
        if restart or not running.get(key, False):
            d.tasks.start(key, discovery_loop(d, name, resolver))
