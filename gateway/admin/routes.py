"""The admin API under ``/admin/*``, behind one bearer token.

The token is read from the environment variable the policy names (``admin.token_env``) at each admin
request, so a reload that names another variable takes effect at once. No token configured: every admin
path answers 404, as if it did not exist. A request without ``Authorization: Bearer ...`` gets 401, a
wrong token 403, both in OpenAI's error format; the comparison is constant-time.

Other modules add their own admin endpoints with ``add_admin_route(app, method, path, handler)``:
the handler is wrapped by the same check.
"""

from __future__ import annotations

import asyncio
import hmac
import os
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from gateway.errors import GatewayError, error_response
from gateway.process.runtime import RUNTIME
from gateway.process.state import GatewayState, current_state

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ADMIN_PREFIX = "/admin"


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def admin_token(state: GatewayState) -> str | None:
    token = os.environ.get(state.policy.admin.token_env)
    return token or None


def check_admin(request: web.Request) -> None:
    """Raise the right ``GatewayError`` unless the request carries the admin token."""
    token = admin_token(current_state(request.app))
    if token is None:
        raise GatewayError(404, f"Unknown path {request.path}", code="not_found")
    auth = request.headers.get("Authorization", "")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise GatewayError(
            401,
            "admin endpoints need 'Authorization: Bearer <admin token>'",
            code="missing_admin_token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not hmac.compare_digest(given.strip().encode(), token.encode()):
        raise GatewayError(403, "the admin token is not valid", code="invalid_admin_token")


def protected(handler: Handler) -> Handler:
    async def wrapped(request: web.Request) -> web.StreamResponse:
        try:
            check_admin(request)
        except GatewayError as err:
            return error_response(err)
        return await handler(request)

    wrapped.__name__ = getattr(handler, "__name__", "admin_handler")
    wrapped.__doc__ = handler.__doc__
    return wrapped


def add_admin_route(app: web.Application, method: str, path: str, handler: Handler) -> None:
    """Register ``handler`` at ``/admin`` + ``path`` (or ``path`` if it already starts with it),
    behind the admin token. Call before the app starts (aiohttp freezes its router)."""
    if not path.startswith(ADMIN_PREFIX + "/"):
        path = ADMIN_PREFIX + ("" if path.startswith("/") else "/") + path
    app.router.add_route(method, path, protected(handler))


# -- handlers -------------------------------------------------------------------------------------------
async def list_replicas(request: web.Request) -> web.Response:
    """Every replica of every pool: routing verdict and its inputs, load, index size."""
    state = current_state(request.app)
    fleet = state.fleet
    models = {}
    for name, pool in state.pools.items():
        router = pool.router
        sizes = router.index.stats().per_replica
        rows = []
        for r in router.replicas:
            rec = fleet.get(r.url) if fleet is not None else None
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
                row.update(fleet.snapshot(rec))  # type: ignore[union-attr]
            rows.append(row)
        models[name] = {"policy": router.policy.name, "replicas": rows}
    return _json({"models": models})


async def _set_drain(request: web.Request, drained: bool) -> web.Response:
    state = current_state(request.app)
    replica_id = request.match_info["replica_id"]
    recs = state.fleet.set_drained(replica_id, drained) if state.fleet is not None else []
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
    from gateway.process.reload import reload_app

    text = (await request.read()).decode("utf-8", "replace") if request.body_exists else None
    result = await reload_app(request.app, text=text or None, source="admin")
    status = 200 if result.ok else (409 if result.result == "no_source" else 422)
    return _json(result.as_json(), status)


async def debug(request: web.Request) -> web.Response:
    """Process figures for leak hunting: asyncio tasks alive, open client connections."""
    server = request.app[RUNTIME].server
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
