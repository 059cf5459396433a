"""The admin API under ``/admin/*`` (behind the admin token, ``gateway.admin.auth``): replicas and
their verdicts, drains, reload, process figures, usage, layout advice, routing explanations, cache purge."""

from __future__ import annotations

import asyncio
import os

import orjson
from aiohttp import web

from gateway.admin.advice import advice_endpoint
from gateway.admin.auth import add_admin_route
from gateway.admin.cache import events, purge
from gateway.admin.explain import explain_endpoint
from gateway.admin.usage import budgets_endpoint, reconcile_endpoint, usage_endpoint
from gateway.errors import GatewayError, error_response
from gateway.process.process import PROCESS
from gateway.process.reload import reload


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


# -- handlers -------------------------------------------------------------------------------------------
async def list_replicas(request: web.Request) -> web.Response:
    """Every replica of every pool: routing verdict and its inputs, load, index size."""
    process = request.app[PROCESS]
    fleet = process.fleet
    models = {}
    for name, pool in process.state.pools.items():
        router = pool.router
        sizes = router.index.stats().per_replica
        rows = []
        for r in router.replicas:
            rec = fleet.get(r.url)
            row: dict[str, object] = {
                "id": r.id,
                "url": r.url,
                "healthy": r.healthy,
                "in_flight": r.in_flight,
                "queued_prefill_tokens": r.queued_prefill_tokens,
                "reported": {
                    "running": r.reported_running,
                    "waiting": r.reported_waiting,
                    "kv_usage": r.reported_kv_usage,
                },
                "index_blocks": sizes.get(r.id, 0),
            }
            if rec is not None:
                row.update(fleet.snapshot(rec))
            rows.append(row)
        models[name] = {"policy": router.policy.name, "replicas": rows}
    return _json({"models": models})


async def _set_drain(request: web.Request, drained: bool) -> web.Response:
    replica_id = request.match_info["replica_id"]
    recs = request.app[PROCESS].fleet.set_drained(replica_id, drained)
    if not recs:
        return error_response(
            GatewayError(404, f"no replica with id or url {replica_id!r}", code="replica_not_found")
        )
    return _json({"replica": replica_id, "drained": drained, "urls": [r.url for r in recs]})


async def drain_replica(request: web.Request) -> web.Response:
    """Take no new requests to this replica (those in flight finish); survives reloads."""
    return await _set_drain(request, True)


async def undrain_replica(request: web.Request) -> web.Response:
    return await _set_drain(request, False)


async def reload_policy(request: web.Request) -> web.Response:
    """Reload the policy from its file, or from the YAML in the request body when one is sent."""
    text = (await request.read()).decode("utf-8", "replace") if request.body_exists else None
    result = await reload(request.app[PROCESS], text=text or None, source="admin")
    status = 200 if result.ok else (409 if result.result == "no_source" else 422)
    return _json(result.as_json(), status)


async def debug(request: web.Request) -> web.Response:
    """Process figures for leak hunting: asyncio tasks alive, open client connections."""
    server = request.app[PROCESS].server
    return _json(
        {
            "tasks": len(asyncio.all_tasks()),
            "client_connections": len(server.connections) if server is not None else None,
            "pid": os.getpid(),
        }
    )


def add_admin_routes(app: web.Application) -> None:
    add_admin_route(app, "GET", "/admin/replicas", list_replicas)
    add_admin_route(app, "POST", "/admin/replicas/{replica_id}/drain", drain_replica)
    add_admin_route(app, "POST", "/admin/replicas/{replica_id}/undrain", undrain_replica)
    add_admin_route(app, "POST", "/admin/reload", reload_policy)
    add_admin_route(app, "GET", "/admin/debug", debug)
    add_admin_route(app, "GET", "/admin/usage", usage_endpoint)
    add_admin_route(app, "GET", "/admin/usage/reconcile", reconcile_endpoint)
    add_admin_route(app, "GET", "/admin/usage/budgets", budgets_endpoint)
    add_admin_route(app, "GET", "/admin/advice", advice_endpoint)
    add_admin_route(app, "GET", "/admin/routing/explain", explain_endpoint)
    add_admin_route(app, "POST", "/admin/cache/purge", purge)
    add_admin_route(app, "POST", "/admin/cache/events", events)
