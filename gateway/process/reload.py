"""Hot reload of the policy: SIGHUP, a poll of the file's mtime, ``POST /admin/reload``.

The new policy is validated first; an invalid one is logged and counted
(``prefix_gateway_config_reloads_total{result="invalid"}``) and the old one keeps serving. A valid one
becomes a new ``GatewayState``, swapped in with one assignment: requests in flight finish on the state
they started with. What carries over:

- a pool whose routing section and backend are unchanged keeps its ``PoolRouter`` (prefix index, load
  counters); ``set_replicas`` gives it the new replica list, keeping staying replicas' entries;
- breakers, active health verdicts and drains (one ``FleetHealth`` for the process);
- the upstream session when the timeouts are unchanged, else a new one (the old closes after the drain
  period); the response cache runtime when its sections (``cache``, ``redis``) are unchanged;
- metrics (same registry).

Settings bound to the listening socket or the HTTP server (``server.host``, ``server.port``,
``limits.max_body_bytes``, ``limits.max_header_bytes``, ``limits.header_timeout_s``,
``server.keepalive_timeout_s``) need a restart; a reload that changes them logs which.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass, field

from aiohttp import web

from config.loader import PolicyError, load_policy, parse_policy
from config.policy import Policy
from gateway.fleet.discovery import pool_replicas, start_discovery
from gateway.fleet.pools import Pool
from gateway.observability.ops_metrics import ops_metrics
from gateway.process.runtime import RUNTIME
from gateway.process.state import STATE, GatewayState, build_state, current_state
from gateway.upstream.client import make_session
from gateway.upstream.health import ObservedUpstream
from router.pool import PoolRouter
from router.replica import ReplicaState

log = logging.getLogger("prefix_gateway")

RESTART_ONLY = (
    ("server", "host"),
    ("server", "port"),
    ("server", "keepalive_timeout_s"),
    ("limits", "max_body_bytes"),
    ("limits", "max_header_bytes"),
    ("limits", "header_timeout_s"),
    ("billing", "enabled"),
    ("billing", "ledger"),
)


@dataclass
class ReloadResult:
    ok: bool
    result: str  # ok | invalid | error | no_source
    message: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "result": self.result,
            "message": self.message,
            "problems": [{"path": p, "message": m} for p, m in self.problems],
            "needs_restart": self.needs_restart,
        }


def reuse_pools(
    old: GatewayState, policy: Policy, discovered: dict[str, tuple[object, list[str]]]
) -> tuple[dict[str, Pool], list[tuple[PoolRouter, list[ReplicaState]]]]:
    """New pools, keeping the router of each pool whose routing and backend did not change. Kept
    routers are not touched yet: the second value lists the replica sets to give them once the new
    state is built (``set_replicas`` keeps the index entries of replicas that stay)."""
    pools: dict[str, Pool] = {}
    pending: list[tuple[PoolRouter, list[ReplicaState]]] = []
    for cfg in policy.models:
        known = discovered.get(cfg.name)
        addresses = known[1] if known is not None and known[0] == cfg.discovery else []
        replicas = pool_replicas(cfg, addresses)
        prev = old.pools.get(cfg.name)
        slots = policy.limits.max_concurrent_per_replica
        if prev is not None and prev.cfg.routing == cfg.routing and prev.cfg.backend == cfg.backend:
            pools[cfg.name] = Pool(cfg=cfg, router=prev.router)
            pending.append((prev.router, replicas))
            prev.router.slot_limit = slots
        else:
            pools[cfg.name] = Pool(cfg=cfg, router=PoolRouter(replicas, cfg.routing, slot_limit=slots))
    return pools, pending


def restart_only_changes(old: Policy, new: Policy) -> list[str]:
    return [
        f"{section}.{name}"
        for section, name in RESTART_ONLY
        if getattr(getattr(old, section), name) != getattr(getattr(new, section), name)
    ]


async def swap_policy(app: web.Application, policy: Policy) -> list[str]:
    """Build the state of ``policy`` and make it current; returns the restart-only settings changed."""
    rt = app[RUNTIME]
    old = current_state(app)
    drain_s = max(old.policy.server.drain_timeout_s, 1.0)
    upstream = old.upstream
    if policy.timeouts != old.policy.timeouts:
        upstream = ObservedUpstream(make_session(policy.timeouts), policy.timeouts, old.fleet)
    pools, pending = reuse_pools(old, policy, rt.discovered)
    secret = rt.secret or old.tenants._secret
    try:
        new = build_state(policy, old.metrics, upstream, secret, fleet=old.fleet, pools=pools)
    except BaseException:
        if old.fleet is not None:  # build_state may have attached the new routers: back to the old
            old.fleet.attach(p.router for p in old.pools.values())
        if upstream is not old.upstream:
            await upstream.session.close()
        raise
    for router, replicas in pending:
        router.set_replicas(replicas)
    if new.fleet is not None:
        new.fleet.attach(p.router for p in new.pools.values())
    if upstream is not old.upstream:
        rt.retire(old.upstream.session.close, drain_s)
    old_cache = getattr(old, "cache", None)
    new_cache = getattr(new, "cache", None)
    if old_cache is not None:
        if new_cache is not None and policy.cache == old.policy.cache and policy.redis == old.policy.redis:
            await new_cache.close()
            new.cache = old_cache  # entries, coalescing and buckets survive the reload
        else:
            rt.retire(old_cache.close, drain_s)
    if getattr(old, "metering", None) is not None and hasattr(new, "metering"):
        new.metering = old.metering  # the billing ledger belongs to the process, not to a policy
        new.metering.reconfigure(policy)  # new prices and rules apply to requests settled from now on
    new.draining = old.draining
    app[STATE].current = new  # the swap: one assignment, nothing awaited between build and here
    if rt.admission is not None:
        rt.admission.limits = policy.limits
    start_discovery(app, restart=True)
    restart_background(app, old.policy, policy)
    return restart_only_changes(old.policy, policy)


def restart_background(app: web.Application, old: Policy, new: Policy) -> None:
    """Restart the health and scrape loops when their sections changed (they read the state afresh)."""
    from gateway.server.hardening import start_background

    if old.health != new.health or old.scrape != new.scrape or old.reload != new.reload:
        start_background(app, new)


async def reload_app(
    app: web.Application, *, text: str | None = None, source: str = "signal"
) -> ReloadResult:
    """Validate and apply a policy (``text``, else the file the process was started with)."""
    rt = app[RUNTIME]
    metrics = ops_metrics(current_state(app).metrics.registry)
    async with rt.reload_lock:
        try:
            if text is not None:
                policy = parse_policy(text, f"<{source}>")
            elif rt.policy_path is not None:
                policy = await asyncio.to_thread(load_policy, rt.policy_path)
            else:
                metrics.reloads.labels("no_source").inc()
                return ReloadResult(
                    False, "no_source", "no policy file to reload from; send the YAML as the body"
                )
        except PolicyError as err:
            metrics.reloads.labels("invalid").inc()
            log.warning(
                "policy reload rejected; the old policy keeps serving",
                extra={"event": "reload_invalid", "source": source, "problems": err.problems[:20]},
            )
            return ReloadResult(
                False, "invalid", "invalid policy; the old policy keeps serving", err.problems
            )
        try:
            needs_restart = await swap_policy(app, policy)
        except Exception as exc:  # e.g. a secret missing from the environment
            metrics.reloads.labels("error").inc()
            log.exception(
                "policy reload failed; the old policy keeps serving", extra={"event": "reload_error"}
            )
            return ReloadResult(False, "error", f"reload failed: {type(exc).__name__}: {exc}")
    metrics.reloads.labels("ok").inc()
    log.info(
        "policy reloaded",
        extra={"event": "reloaded", "source": source, "needs_restart": needs_restart},
    )
    message = "reloaded"
    if needs_restart:
        message += f"; these settings take effect only after a restart: {', '.join(needs_restart)}"
    return ReloadResult(True, "ok", message, needs_restart=needs_restart)


async def watch_file(app: web.Application, interval_s: float) -> None:
    """Reload when the policy file's mtime (or size) changes; a ConfigMap update swaps a symlink, which
    ``os.stat`` follows."""
    rt = app[RUNTIME]
    if rt.policy_path is None:
        return

    def stamp() -> tuple[float, int] | None:
        try:
            st = os.stat(rt.policy_path)  # type: ignore[arg-type]
        except OSError:
            return None
        return (st.st_mtime, st.st_size)

    last = stamp()
    while True:
        await asyncio.sleep(interval_s)
        now = stamp()
        if now is not None and now != last:
            last = now
            await reload_app(app, source="watch")
