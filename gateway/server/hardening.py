"""Wiring of the production machinery into the app, kept out of ``gateway/server/app.py``'s factory:
admin routes, admission and body-deadline middlewares, background loops (active health checks,
load scraping, discovery, policy file watch), and the drain-time shutdown hooks.

``app.py`` calls ``install`` when it builds the app, ``started`` at the end of its startup and
``stopping`` first thing in its cleanup (which aiohttp runs after the drain).
"""

from __future__ import annotations

import logging

from aiohttp import web

from config.policy import Policy
from gateway.admin.routes import add_admin_routes
from gateway.errors import GatewayError, error_response
from gateway.fleet import probes as health
from gateway.fleet import scrape
from gateway.fleet.discovery import start_discovery
from gateway.observability.ops_metrics import ops_metrics
from gateway.process.admission import ProcessAdmission
from gateway.process.runtime import RUNTIME, Runtime
from gateway.process.state import current_state
from gateway.server.conn_guard import body_deadline

log = logging.getLogger("prefix_gateway")

INFERENCE_PATHS = frozenset(("/v1/chat/completions", "/v1/completions", "/v1/embeddings"))


@web.middleware
async def admission_middleware(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """At most ``limits.max_concurrent_requests`` inference requests in this process; others wait
    (bounded) or get 503 + Retry-After."""
    admission = request.app[RUNTIME].admission
    if admission is None or request.path not in INFERENCE_PATHS or request.method != "POST":
        return await handler(request)
    try:
        await admission.acquire()
    except GatewayError as err:
        return error_response(err)
    try:
        return await handler(request)
    finally:
        admission.release()


def _body_timeout(request: web.Request) -> float:
    return current_state(request.app).policy.limits.body_timeout_s


def install(
    app: web.Application, policy: Policy, *, policy_path: str | None = None, secret: bytes | None = None
) -> Runtime:
    """Before the app starts: runtime holder, middlewares, admin routes."""
    rt = Runtime(policy_path=policy_path, secret=secret)
    app[RUNTIME] = rt
    app.middlewares.append(body_deadline(_body_timeout))
    app.middlewares.append(admission_middleware)
    add_admin_routes(app)
    return rt


def start_background(app: web.Application, policy: Policy) -> None:
    """(Re)start the loops whose settings come from the policy."""
    from gateway.process.reload import watch_file

    rt = app[RUNTIME]
    for name in ("health", "scrape", "watch"):
        task = rt.tasks.pop(name, None)
        if task is not None:
            task.cancel()
    if policy.health.enabled:
        h = policy.health
        rt.start_task("health", health.health_loop(app, h.interval_s, h.timeout_s, h.fails_to_eject))
    if policy.scrape.enabled:
        rt.start_task("scrape", scrape.scrape_loop(app, policy.scrape.interval_s, policy.scrape.timeout_s))
    if policy.reload.watch_interval_s > 0 and rt.policy_path is not None:
        rt.start_task("watch", watch_file(app, policy.reload.watch_interval_s))


async def started(app: web.Application) -> None:
    """End of startup: the state exists. Wire the breaker into the upstream, start the loops."""
    rt = app[RUNTIME]
    state = current_state(app)
    if rt.secret is None:
        rt.secret = state.tenants._secret  # a reload must keep the salts (even a random secret)
    upstream = state.upstream
    if hasattr(upstream, "fleet"):
        upstream.fleet = state.fleet  # type: ignore[attr-defined]
    rt.admission = ProcessAdmission(state.policy.limits, ops_metrics(state.metrics.registry))
    start_background(app, state.policy)
    start_discovery(app)


async def stopping(app: web.Application) -> None:
    """After the drain: stop the loops, run the shutdown hooks (in order), stop breaker timers."""
    rt = app[RUNTIME]
    await rt.stop_tasks()
    for hook in rt.shutdown_hooks:
        try:
            await hook(app)
        except Exception:
            log.exception("shutdown hook failed", extra={"event": "shutdown_hook_error"})
    state = current_state(app)
    if state.fleet is not None:
        state.fleet.close()
