"""Prometheus exposition of a process, and its own listener (``server.metrics_port``).

The metrics name tenants, replicas and spend, so they are not for whoever reaches the API port: as the
Rust routers (smg's ``--prometheus-port``) and vLLM's production stack do, they are served on a
separate listener, which a NetworkPolicy or the pod network keeps to the scraper. The serving port
still answers ``/metrics``, but only with the admin token (``gateway.server.endpoints``).

It binds ``server.metrics_host``, loopback unless the operator names another address (the Helm chart
names the pod's, for the scraper), never ``server.host``: with ``host: 0.0.0.0`` the listener used to
publish per-tenant spend, tokens and advice savings on every interface (issue 31, item 5). With
``server.metrics_token_env`` it wants ``Authorization: Bearer <token>`` (Prometheus' ``authorization``
of a scrape config), compared in constant time; without one ``check-config`` warns when the listener
is off loopback. The tenant label itself may be hashed or dropped (``observability.tenant_labels``,
``gateway.pipeline.tenant``).

The listener is a resource of the ``Process``: opened after the state is built, closed in the same
exit stack, after the drain (a scrape during shutdown still answers). Both receive what they read (the
registry, the current state, the ledger's registry, the advisor, the batches; the listener only the
function that renders), not the ``Process``.
"""

from __future__ import annotations

import hmac
import os
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cache.advisor.render import GAUGE_FINDINGS, GAUGE_SAVING_MICROS, GAUGE_SAVING_TOKENS, gauge_values
from cache.store_redis import REDIS_ERRORS
from gateway.batch.objects import STATUSES

if TYPE_CHECKING:
    from cache.advisor.advisor import Advisor
    from gateway.batch.service import BatchService
    from gateway.observability.metrics import GatewayMetrics
    from gateway.process.metering import Metering
    from gateway.process.state import State


async def exposition(
    metrics: GatewayMetrics,
    state: State,
    metering: Metering | None,
    advisor: Advisor,
    batch: BatchService | None,
) -> web.Response:
    """The process's metrics, with the gauges read at scrape time (index sizes, explicit entries, the
    semantic cache's stale entries, the advisor's savings, batches by status)."""
    for pool in state.pools.values():
        for replica_id, blocks in pool.router.index.stats().per_replica.items():
            metrics.child(metrics.index_blocks, replica_id).set(blocks)
    if metering is not None:
        try:
            stats = await metering.registry.stats()
        except REDIS_ERRORS:  # Redis away: /metrics still answers, the gauges keep their last values
            metrics.child(metrics.redis_errors, "explicit", "stats").inc()
        else:
            for name in ("live", "created", "hits", "expired"):
                metrics.child(metrics.explicit_entries, name).set(getattr(stats, name))
    cache = state.cache
    if cache is not None and cache.semantic is not None:
        metrics.semantic_stale.set(cache.semantic.store.stats.stale)
    if advisor.cfg.enabled:
        await set_advice_gauges(metrics, state, advisor)
    if batch is not None:
        await set_batch_gauges(metrics, batch)
    return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def set_advice_gauges(metrics: GatewayMetrics, state: State, advisor: Advisor) -> None:
    """The advisor's potential savings per tenant (listed, else ``other``) and finding kind; series of
    kinds that no longer apply drop to 0 (``gauge_values`` lists every kind of a present tenant). From
    the cached findings: a scrape starts a pricing where they are stale and never waits for it."""
    tenants = state.tenants
    listed = {t.id for t in state.policy.tenancy.tenants}
    values = gauge_values(await advisor.advice_async(wait=False), listed)
    for name, gauge in (
        (GAUGE_SAVING_MICROS, metrics.advice_saving_micros),
        (GAUGE_SAVING_TOKENS, metrics.advice_saving_tokens),
        (GAUGE_FINDINGS, metrics.advice_findings),
    ):
        labelled: dict[tuple[str, str], float] = defaultdict(float)  # hashed / none: the policy's labels
        for (tenant, kind), value in values[name].items():
            labelled[(tenants.label_of(tenant), kind)] += value
        for (label, kind), value in labelled.items():
            metrics.child(gauge, label, kind).set(value)


async def set_batch_gauges(metrics: GatewayMetrics, batch: BatchService) -> None:
    """Batches per status, from the job store (every pod's batches: take the max across pods, not the
    sum); a status no batch has any more drops to 0. The runner's own counters are a collector
    (``gateway.batch.metrics``)."""
    try:
        counts = await batch.store.count_by_status()
    except Exception:  # the store is unreachable: /metrics still answers, the gauges keep their values
        metrics.child(metrics.redis_errors, "batch", "count").inc()
        return
    for status in STATUSES:
        metrics.child(metrics.batches, status).set(counts.get(status, 0))


def metrics_token(env_name: str | None) -> str | None:
    """The listener's token from ``server.metrics_token_env``; an operator who named a variable and
    left it unset gets a refusal at start, not an open listener."""
    if env_name is None:
        return None
    token = os.environ.get(env_name)
    if not token:
        raise RuntimeError(
            f"{env_name} is not set (server.metrics_token_env names it for the /metrics listener)"
        )
    return token


def bearer_ok(header: str | None, token: str) -> bool:
    """True when ``header`` is ``Bearer <token>`` (the scheme case-insensitive), in constant time."""
    scheme, _, given = (header or "").partition(" ")
    ok = hmac.compare_digest(given.strip().encode("utf-8"), token.encode("utf-8"))
    return ok and scheme.lower() == "bearer"


async def open_listener(
    render: Callable[[], Awaitable[web.Response]], host: str, port: int, token: str | None = None
) -> tuple[web.AppRunner, str]:
    """Serve ``GET /metrics`` (and nothing else, ``render``'s answer) on ``host:port``, behind the
    bearer ``token`` when given; returns the runner and its URL."""

    async def handler(request: web.Request) -> web.Response:
        if token is not None and not bearer_ok(request.headers.get("Authorization"), token):
            return web.Response(
                status=401,
                text="metrics token required (Authorization: Bearer)\n",
                headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
            )
        return await render()

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    h, p = runner.addresses[0][:2]
    return runner, f"http://[{h}]:{p}" if ":" in h else f"http://{h}:{p}"
