"""The HTTP surface: one table of every public endpoint, and the handlers that are not the pipeline.

Inference endpoints come from ``gateway.pipeline.parse.ENDPOINTS`` (the one list of them: their
paths, what they validate, where they are proxied) and run ``gateway.pipeline.handler.handle``; the
Files and Batches API is ``gateway.server.batch_api``.

Public endpoints echo no configuration: ``/v1/models`` lists the model names of the operator's policy
file (``Process.file_policy``; never a name that only an uploaded policy brought), ``/ready`` says
ready or not and nothing more (the details are ``/admin/replicas``), ``/metrics`` needs the admin
token here (the scraper reads the listener of ``server.metrics_port``: ``gateway.process.exposition``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.admin.auth import protected
from gateway.errors import GatewayError, error_response
from gateway.pipeline.handler import handle
from gateway.pipeline.parse import ENDPOINTS
from gateway.pipeline.protocols import FRONTENDS, FrontEnd
from gateway.pipeline.protocols import responses as responses_api
from gateway.pipeline.tenant import allows
from gateway.process.process import PROCESS, Process
from gateway.server.batch_api import add_batch_routes

INFERENCE_PATHS = frozenset(e.path for e in ENDPOINTS.values())
FRONTEND_BY_PATH: dict[str, FrontEnd] = {e.path: FRONTENDS[e.frontend] for e in ENDPOINTS.values()}


async def list_models(request: web.Request) -> web.Response:
    """The policy's models and, as vLLM lists them, the LoRA adapters each serves (``parent``): those the
    caller's tenant may use (``tenancy.tenants[].models``)."""
    state = request.app[PROCESS].state
    try:
        tenant = state.tenants.resolve(request.headers, request.remote)
    except GatewayError as err:
        return error_response(err)
    created = int(time.time())
    published = request.app[PROCESS].file_policy
    data = []
    for name, pool in state.pools.items():
        if published.pool(name) is None:  # a model only an uploaded policy brought: not published
            continue
        if allows(tenant, name):
            data.append(
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "prefix-gateway",
                    "parent": None,
                }
            )
        data.extend(
            {"id": a, "object": "model", "created": created, "owned_by": "prefix-gateway", "parent": name}
            for a in sorted(pool.adapters())
            if allows(tenant, a)
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
        body = (
            responses_api.input_items_page(record, request.query)
            if request.path.endswith("/input_items")
            else record["response"]
        )
    except GatewayError as err:
        return error_response(err)
    return web.Response(body=orjson.dumps(body), content_type="application/json")


async def health(request: web.Request) -> web.Response:
    """Alive: the process answers. Says nothing about replicas (that is /ready)."""
    return web.Response(body=b'{"status":"ok"}', content_type="application/json")


def readiness(process: Process) -> bool:
    """Not draining, and every pool has a replica that serves (``FleetHealth.serving``)."""
    if process.draining:
        return False
    fleet, checks = process.fleet, process.state.policy.health.enabled
    return all(
        any(fleet.serving(r, active_checks=checks) for r in pool.router.replicas)
        for pool in process.state.pools.values()
    )


async def ready(request: web.Request) -> web.Response:
    """Ready or not, and nothing more: 200 ``{"ready": true}`` or 503 ``{"ready": false}``."""
    ok = readiness(request.app[PROCESS])
    return web.Response(
        status=200 if ok else 503,
        body=b'{"ready":true}' if ok else b'{"ready":false}',
        content_type="application/json",
    )


async def metrics_endpoint(request: web.Request) -> web.Response:
    """``/metrics`` on the serving port: behind the admin token (the separate listener of
    ``server.metrics_port`` serves it to the scraper without one)."""
    return await request.app[PROCESS].exposition()


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
    app.router.add_get("/metrics", protected(metrics_endpoint))
    add_batch_routes(app)
