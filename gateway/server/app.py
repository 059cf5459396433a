"""Application factory and process lifecycle."""

from __future__ import annotations

import asyncio

import redis.asyncio as aioredis
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from cache.store_redis import REDIS_ERRORS, connect
from config.policy import Policy
from gateway.admin import cache as cache_admin
from gateway.admin import usage
from gateway.admin.routes import add_admin_route
from gateway.errors import GatewayError, error_response
from gateway.fleet import probes as health
from gateway.fleet.kv_events import start_kv_events, stop_kv_events
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline import handler as handlers
from gateway.pipeline.billing import build_metering
from gateway.process.state import STATE, StateHolder, build_state, current_state
from gateway.server import hardening
from gateway.server.conn_guard import GatewayRunner
from gateway.upstream.client import make_session
from gateway.upstream.health import ObservedUpstream

OWN_REDIS = web.AppKey("own_redis", aioredis.Redis)


@web.middleware
async def openai_errors(request: web.Request, handler):  # type: ignore[no-untyped-def]
    """Routing errors (404, 405) and anything unexpected in OpenAI's error format, never a crash."""
    try:
        return await handler(request)
    except GatewayError as err:
        return error_response(err)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status)
        message = {
            404: f"Unknown path {request.path}",
            405: f"Method {request.method} is not allowed for {request.path}",
        }.get(exc.status, exc.reason)
        headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
        return error_response(GatewayError(exc.status, message, code=code, headers=headers))
    except asyncio.CancelledError:
        raise
    except Exception:
        request.app.logger.exception("unhandled error", extra={"event": "unhandled", "path": request.path})
        return error_response(GatewayError(500, "internal gateway error", code="internal_error"))


async def metrics_endpoint(request: web.Request) -> web.Response:
    state = current_state(request.app)
    for pool in state.pools.values():
        for replica_id, blocks in pool.router.index.stats().per_replica.items():
            state.metrics.index_blocks.labels(replica_id).set(blocks)
    if state.metering is not None:
        try:
            stats = await state.metering.registry.stats()
        except REDIS_ERRORS:  # Redis away: /metrics still answers, the gauges keep their last values
            state.metrics.redis_errors.labels("explicit", "stats").inc()
        else:
            for name in ("live", "created", "hits", "expired"):
                state.metrics.explicit_entries.labels(name).set(getattr(stats, name))
    registry = state.metrics.registry
    return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})


def create_app(
    policy: Policy,
    *,
    secret: bytes | None = None,
    metrics: GatewayMetrics | None = None,
    policy_path: str | None = None,
) -> web.Application:
    """``policy_path``: the file a reload (SIGHUP, file watch, ``POST /admin/reload``) reads again."""
    app = web.Application(middlewares=[openai_errors], client_max_size=policy.limits.max_body_bytes)
    app.router.add_post("/v1/chat/completions", handlers.chat_completions)
    app.router.add_post("/v1/completions", handlers.completions)
    app.router.add_post("/v1/embeddings", handlers.embeddings)
    app.router.add_get("/v1/models", handlers.list_models)
    app.router.add_get("/health", health.health)
    app.router.add_get("/ready", health.ready)
    app.router.add_get("/metrics", metrics_endpoint)
    hardening.install(app, policy, policy_path=policy_path, secret=secret)
    add_admin_route(app, "GET", "/admin/usage", usage.usage_endpoint)
    add_admin_route(app, "POST", "/admin/cache/purge", cache_admin.purge)

    async def startup(app: web.Application) -> None:
        upstream = ObservedUpstream(make_session(policy.timeouts), policy.timeouts)
        state = build_state(policy, metrics or GatewayMetrics(), upstream, secret)
        redis = state.cache.redis if state.cache is not None else None
        if redis is None and policy.redis.url is not None and policy.billing.ledger.kind == "redis":
            redis = connect(policy.redis.url, policy.redis.socket_timeout_s, policy.redis.max_connections)
            app[OWN_REDIS] = redis
        state.metering = await build_metering(policy, state.metrics, redis)
        app[STATE] = StateHolder(state)
        await hardening.started(app)  # breaker wiring, admission, health/scrape/discovery/watch loops
        await start_kv_events(app)  # precise pools: bind the KV-event SUB socket(s)

    async def cleanup(app: web.Application) -> None:
        await stop_kv_events(app)
        await hardening.stopping(app)  # loops, then the shutdown hooks (runtime.add_shutdown_hook)
        state = current_state(app)
        if state.metering is not None:
            await state.metering.close()
        if state.cache is not None:
            await state.cache.close()
        await state.upstream.session.close()
        if OWN_REDIS in app:
            await app[OWN_REDIS].aclose()

    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    return app


def runner_for(app: web.Application, policy: Policy) -> web.AppRunner:
    """An AppRunner with the policy's header limits and slow-client timeouts, cancelling handlers when
    clients disconnect, and waiting up to the drain period for requests in flight at shutdown."""
    limit = policy.limits.max_header_bytes
    return GatewayRunner(
        app,
        head_timeout_s=policy.limits.header_timeout_s,
        handler_cancellation=True,
        access_log=None,
        max_line_size=limit,
        max_field_size=limit,
        keepalive_timeout=policy.server.keepalive_timeout_s,
        lingering_time=1.0,  # after an early answer (408, 413), read and drop the unread body this long
        shutdown_timeout=policy.server.drain_timeout_s,
    )


async def serve(
    policy: Policy,
    *,
    host: str | None = None,
    port: int | None = None,
    policy_path: str | None = None,
    reuse_port: bool = False,
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (``await runner.cleanup()`` to stop) and the base URL.
    ``reuse_port``: several worker processes listen on one port (SO_REUSEPORT)."""
    app = create_app(policy, policy_path=policy_path)
    runner = runner_for(app, policy)
    await runner.setup()
    site = web.TCPSite(
        runner,
        host or policy.server.host,
        policy.server.port if port is None else port,
        reuse_port=reuse_port,
        backlog=1024,
    )
    await site.start()
    sock = site._server.sockets[0]  # type: ignore[union-attr]
    h, p = sock.getsockname()[:2]
    return runner, f"http://{h}:{p}"
