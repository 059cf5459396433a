"""The admin API's guard: every ``/admin/*`` path is behind one bearer token.

The token is read from the environment variable the policy names (``admin.token_env``) at each admin
request, so a reload that names another variable takes effect at once. No token configured: every admin
path answers 404, as if it did not exist. A request without ``Authorization: Bearer ...`` gets 401, a
wrong token 403, both in OpenAI's error format; the comparison is constant-time.

``add_admin_route(app, method, path, handler)`` registers an endpoint wrapped by the check.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Awaitable, Callable

from aiohttp import web

from gateway.errors import GatewayError, error_response
from gateway.process.process import PROCESS
from gateway.process.state import State

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

ADMIN_PREFIX = "/admin"


def admin_token(state: State) -> str | None:
    token = os.environ.get(state.policy.admin.token_env)
    return token or None


def check_admin(request: web.Request) -> None:
    """Raise the right ``GatewayError`` unless the request carries the admin token."""
    token = admin_token(request.app[PROCESS].state)
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
