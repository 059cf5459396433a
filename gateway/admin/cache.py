"""``POST /admin/cache/purge``: drop one tenant's response-cache entries, or one key."""

from __future__ import annotations

import orjson
from aiohttp import web

from cache.keys import tenant_tag
from gateway.errors import GatewayError
from gateway.process.process import PROCESS


async def purge(request: web.Request) -> web.Response:
    """Body ``{"tenant": "<id>"}`` (every entry of that tenant's salt) or ``{"key": "v1:..."}``."""
    state = request.app[PROCESS].state
    if state.cache is None:
        raise GatewayError(404, "the response cache is disabled in this policy", code="cache_disabled")
    try:
        body = orjson.loads(await request.read() or b"{}")
    except orjson.JSONDecodeError:
        raise GatewayError(400, "body must be JSON", code="invalid_json") from None
    if not isinstance(body, dict) or ("tenant" in body) == ("key" in body):
        raise GatewayError(400, "give exactly one of 'tenant' or 'key'", code="invalid_request")
    if "key" in body:
        key = body["key"]
        if not isinstance(key, str) or not key.startswith("v1:"):
            raise GatewayError(400, "'key' must be a cache key (v1:...)", param="key", code="invalid_request")
        await state.cache.store.delete(key)
        result = {"purged": "key", "key": key}
    else:
        tenant = body["tenant"]
        if not isinstance(tenant, str) or not tenant:
            raise GatewayError(400, "'tenant' must be a tenant id", param="tenant", code="invalid_request")
        removed = await state.cache.store.purge_tenant(tenant_tag(state.tenants.salt_for(tenant)))
        result = {"purged": "tenant", "tenant": tenant, "entries": removed}
    return web.Response(body=orjson.dumps(result), content_type="application/json")
