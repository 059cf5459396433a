"""The HTTP surface: one table of every public endpoint, and the handlers that are not the pipeline.

Inference endpoints come from ``gateway.pipeline.parse.ENDPOINTS`` (the one list of them: their
paths, what they validate, where they are proxied) and run ``gateway.pipeline.handler.handle``; the
Files and Batches API is ``gateway.server.batch_api``.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cache.advisor.render import GAUGE_FINDINGS, GAUGE_SAVING_MICROS, GAUGE_SAVING_TOKENS, gauge_values
from cache.store_redis import REDIS_ERRORS
from gateway.batch.objects import STATUSES
from gateway.errors import GatewayError, error_response
from gateway.pipeline.handler import handle
from gateway.pipeline.parse import ENDPOINTS
from gateway.pipeline.protocols import FRONTENDS, FrontEnd
from gateway.pipeline.protocols import responses as responses_api
from gateway.process.process import PROCESS, Process
from gateway.server.batch_api import add_batch_routes

INFERENCE_PATHS = frozenset(e.path for e in ENDPOINTS.values())
FRONTEND_BY_PATH: dict[str, FrontEnd] = {e.path: FRONTENDS[e.frontend] for e in ENDPOINTS.values()}


async def list_models(request: web.Request) -> web.Response:
    """The policy's models and, as vLLM lists them, the LoRA adapters each serves (``parent``)."""
    state = request.app[PROCESS].state
    try:
        state.tenants.resolve(request.headers, request.remote)
    except GatewayError as err:
        return error_response(err)
    created = int(time.time())
    data = []
    for name, pool in state.pools.items():
        data.append(
            {"id": name, "object": "model", "created": created, "owned_by": "prefix-gateway", "parent": None}
        )
        data.extend(
            {"id": a, "object": "model", "created": created, "owned_by": "prefix-gateway", "parent": name}
            for a in sorted(pool.adapters())
        )
    return web.Response(body=orjson.dumps({"object": "list", "data": data}), content_type="application/json")


async def stored_response(request: web.Request) -> web.Response:
    """``GET /v1/responses/{id}`` (and ``/input_items``), ``DELETE /v1/responses/{id}``: the
    gateway's response store, per tenant."""
    process = request.app[PROCESS]
    state, metrics = process.state, process.metrics
    response_id = request.match_info["response_id"]
    try:
        tenant = state.tenants.resolve(request.headers, request.remote)
        if request.method == "DELETE":
            return await responses_api.forget(state.conversations, tenant.id, response_id, metrics)
        record = await responses_api.stored(state.conversations, tenant.id, response_id, metrics)
    except GatewayError as err:
        return error_response(err)
    body = (
        responses_api.input_items_page(record)
        if request.path.endswith("/input_items")
        else record["response"]
    )
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about replicas (that is /ready)."""
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


def readiness(process: Process) -> tuple[bool, dict[str, object]]:
    models = {}
    ready = not process.draining
    for name, pool in process.state.pools.items():
        healthy = [r.id for r in pool.router.replicas if r.healthy]
        models[name] = {"healthy_replicas": healthy, "replicas": len(pool.router.replicas)}
        ready = ready and bool(healthy)
    return ready, {"ready": ready, "draining": process.draining, "models": models}


async def ready(request: web.Request) -> web.Response:
    """Ready: not draining, and a healthy replica exists for every model."""
    ok, detail = readiness(request.app[PROCESS])
    return web.Response(status=200 if ok else 503, body=orjson.dumps(detail), content_type="application/json")


async def metrics_endpoint(request: web.Request) -> web.Response:
    process = request.app[PROCESS]
    metrics = process.metrics
    for pool in process.state.pools.values():
        for replica_id, blocks in pool.router.index.stats().per_replica.items():
            metrics.child(metrics.index_blocks, replica_id).set(blocks)
    if process.metering is not None:
        try:
            stats = await process.metering.registry.stats()
        except REDIS_ERRORS:  # Redis away: /metrics still answers, the gauges keep their last values
            metrics.child(metrics.redis_errors, "explicit", "stats").inc()
        else:
            for name in ("live", "created", "hits", "expired"):
                metrics.child(metrics.explicit_entries, name).set(getattr(stats, name))
    cache = process.state.cache
    if cache is not None and cache.semantic is not None:
        metrics.semantic_stale.set(cache.semantic.store.stats.stale)
    if process.advisor.cfg.enabled:
        set_advice_gauges(process)
    if process.batch is not None:
        await set_batch_gauges(process)
    return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def set_advice_gauges(process: Process) -> None:
    """The advisor's potential savings per tenant (listed, else ``other``) and finding kind; series of
    kinds that no longer apply drop to 0 (``gauge_values`` lists every kind of a present tenant)."""
    metrics = process.metrics
    listed = {t.id for t in process.state.policy.tenancy.tenants}
    values = gauge_values(process.advisor.advice(), listed)
    for name, gauge in (
        (GAUGE_SAVING_MICROS, metrics.advice_saving_micros),
        (GAUGE_SAVING_TOKENS, metrics.advice_saving_tokens),
        (GAUGE_FINDINGS, metrics.advice_findings),
    ):
        for (tenant, kind), value in values[name].items():
            metrics.child(gauge, tenant, kind).set(value)


async def set_batch_gauges(process: Process) -> None:
    """Batches per status, from the job store (every pod's batches: take the max across pods, not the
    sum); a status no batch has any more drops to 0. The runner's own counters are a collector
    (``gateway.batch.metrics``)."""
    assert process.batch is not None
    metrics = process.metrics
    try:
        counts = await process.batch.store.count_by_status()
    except Exception:  # the store is unreachable: /metrics still answers, the gauges keep their values
        metrics.child(metrics.redis_errors, "batch", "count").inc()
        return
    for status in STATUSES:
        metrics.child(metrics.batches, status).set(counts.get(status, 0))


def _inference(process: Process, name: str) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    async def endpoint(request: web.Request) -> web.StreamResponse:
        return await handle(request, process, name)

    endpoint.__name__ = f"{name}_endpoint"
    return endpoint


def add_public_routes(app: web.Application, process: Process) -> None:
    for name, spec in ENDPOINTS.items():
        app.router.add_post(spec.path, _inference(process, name))
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/responses/{response_id}", stored_response)
    app.router.add_delete("/v1/responses/{response_id}", stored_response)
    app.router.add_get("/v1/responses/{response_id}/input_items", stored_response)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics_endpoint)
    add_batch_routes(app)
