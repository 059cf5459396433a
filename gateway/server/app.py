"""Application factory: the process, its hooks, the routes, one middleware; and serving it.

``create_app`` builds a ``Process`` (opened at startup and closed at cleanup through aiohttp's
``cleanup_ctx``, after the drain), installs the lifecycle hooks of the pipeline (routing feedback, the
layout advisor's observation, billing, tenant refunds, metrics and the access log), and the routes: the public ones
(``gateway.server.endpoints``) and the admin API (``gateway.admin``).

One middleware does what every request needs, in this order: errors in the format of the API the path
speaks (OpenAI's, Anthropic's on ``/v1/messages``) for anything that escapes (404, 405, a malformed
body aiohttp refused while a handler read it: a 400 in fixed words, logged nowhere, since aiohttp's message
holds the client's bytes; an unexpected exception: a 500, never a crash); a POST body read within ``limits.body_timeout_s`` (but for file uploads,
which the handler streams); process admission for inference requests (at most
``limits.max_concurrent_requests`` at once, others queued, bounded).

When the drain begins (aiohttp's ``on_shutdown``, before requests in flight are waited for) the process
stops running batches, so their leases are free for another pod at once.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage
from redis.exceptions import RedisError

from config.policy import Policy
from gateway.admin.routes import add_admin_routes
from gateway.errors import GatewayError
from gateway.observability.logs import traceback_without_messages
from gateway.observability.metrics import GatewayMetrics
from gateway.pipeline.protocols.openai import FRONTEND as OPENAI
from gateway.process.process import PROCESS, Process, process_context
from gateway.server.batch_api import STREAMED_PATHS, quiet_multipart_warnings
from gateway.server.conn_guard import GatewayRunner, read_body_within
from gateway.server.endpoints import FRONTEND_BY_PATH, INFERENCE_PATHS, add_public_routes


@web.middleware
async def gateway_middleware(request: web.Request, handler):
    process = request.app[PROCESS]
    error_response = FRONTEND_BY_PATH.get(request.path, OPENAI).error
    try:
        if request.method != "POST" or request.path in STREAMED_PATHS:
            return await handler(request)
        lim = process.state.policy.limits
        early = await read_body_within(request, lim.body_timeout_s)
        if early is not None:
            return early
        if request.path not in INFERENCE_PATHS:
            return await handler(request)
        await process.admission.acquire(lim)
        try:
            return await handler(request)
        finally:
            process.admission.release()
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
    except BadHttpMessage:  # a malformed body a handler read (its message holds the client's bytes)
        return error_response(GatewayError(400, "malformed request body", code="invalid_request"))
    except RedisError:  # the shared store (batch jobs, a Redis ledger's reads) is not answering now
        process.metrics.child(process.metrics.redis_errors, "request", "unavailable").inc()
        return error_response(
            GatewayError(
                503,
                "the gateway's shared state store is not answering; retry shortly",
                code="store_unavailable",
                headers={"Retry-After": "1"},
            )
        )
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # by type and frames: a message may hold the client's text
        request.app.logger.error(
            "unhandled error",
            extra={
                "event": "unhandled",
                "path": request.path,
                "exc_type": type(exc).__qualname__,
                "traceback": traceback_without_messages(exc),
            },
        )
        return error_response(GatewayError(500, "internal gateway error", code="internal_error"))


def create_app(
    policy: Policy,
    *,
    secret: bytes | None = None,
    metrics: GatewayMetrics | None = None,
    policy_path: str | None = None,
    span_exporter: Any = None,
    worker: int = 0,
) -> web.Application:
    """``policy_path``: the file a reload (SIGHUP, file watch, ``POST /admin/reload``) reads again;
    ``span_exporter`` replaces OTLP when the policy turns tracing on; ``worker``: this process's index
    among ``--workers N``."""
    process = Process(
        policy,
        policy_path=policy_path,
        secret=secret,
        metrics=metrics or GatewayMetrics(),
        span_exporter=span_exporter,
        worker=worker,
    )
    quiet_multipart_warnings()
    app = web.Application(middlewares=[gateway_middleware], client_max_size=policy.limits.max_body_bytes)
    app[PROCESS] = process
    add_public_routes(app, process)
    add_admin_routes(app)
    app.cleanup_ctx.append(process_context(process))
    app.on_shutdown.append(lambda _app: process.stop_batches())
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
        max_headers=policy.limits.max_headers,
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
    worker: int = 0,
) -> tuple[web.AppRunner, str]:
    """Start serving; returns the runner (``await runner.cleanup()`` to stop) and the base URL.
    ``reuse_port``: several worker processes listen on one port (SO_REUSEPORT); ``worker``: which."""
    app = create_app(policy, policy_path=policy_path, worker=worker)
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
