"""The response cache's admin endpoints: ``POST /admin/cache/purge`` drops one tenant's entries or one
key; ``POST /admin/cache/events`` applies a business event to every cache layer (removes exactly the
semantic entries whose fingerprints it touches and the exact entries the policy's rules tie to the
same entities, in every tenant, and keeps the generations in flight out of the cache)."""

from __future__ import annotations

import orjson
from aiohttp import web

from cache.keys import tenant_tag
from cache.semantic.invalidation import EventError
from cache.semantic.layer import Tie
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
        result: dict[str, object] = {"purged": "key", "key": key}
    else:
        tenant = body["tenant"]
        if not isinstance(tenant, str) or not tenant:
            raise GatewayError(400, "'tenant' must be a tenant id", param="tenant", code="invalid_request")
        removed = await state.cache.store.purge_tenant(tenant_tag(state.tenants.salt_for(tenant)))
        result = {"purged": "tenant", "tenant": tenant, "entries": removed}
    return web.Response(body=orjson.dumps(result), content_type="application/json")


MAX_EVENT_BYTES = 64 * 1024  # a business event is a small JSON object


async def events(request: web.Request) -> web.Response:
    """Body: one event, e.g. ``{"type": "ProductSpecUpdated", "product_id": "...", "changed_fields":
    [...]}``; the policy's ``cache.semantic.events`` map its fields to slots and intents. Answers
    ``{"removed", "removed_by_layer", "tags", "ignored_fields"}`` (``removed``: the entries of every
    layer; ``removed_by_layer``: ``semantic`` and ``exact`` entries, and ``in_flight``, this process's
    coalesced generations that started before the event and will not be stored); 503 when the store
    is unreachable (resending is safe)."""
    cache = request.app[PROCESS].state.cache
    if cache is None or cache.semantic is None:
        raise GatewayError(
            404, "no model of this policy has a semantic cache", code="semantic_cache_disabled"
        )
    if (request.content_length or 0) > MAX_EVENT_BYTES:
        raise GatewayError(413, f"an event is at most {MAX_EVENT_BYTES} bytes", code="body_too_large")
    raw = await request.read()
    if len(raw) > MAX_EVENT_BYTES:
        raise GatewayError(413, f"an event is at most {MAX_EVENT_BYTES} bytes", code="body_too_large")
    try:
        event = orjson.loads(raw or b"null")
    except orjson.JSONDecodeError:
        raise GatewayError(400, "body must be a JSON event object", code="invalid_json") from None
    try:
        flying = [t for t in cache.coalescer.leading() if isinstance(t, Tie)]
        result = await cache.semantic.apply_event(event, flying)
    except EventError as exc:
        raise GatewayError(400, str(exc), param=exc.param, code="invalid_event") from None
    if result.removed < 0:
        raise GatewayError(
            503,
            "the semantic store is unreachable; resend the event",
            code="store_unavailable",
            headers={"Retry-After": "1"},
        )
    metrics = request.app[PROCESS].metrics
    metrics.child(metrics.semantic_events, event["type"]).inc()
    for layer, n in result.by_layer.items():
        metrics.child(metrics.semantic_invalidated, layer).inc(n)
    body = {
        "removed": result.removed,
        "removed_by_layer": result.by_layer,
        "tags": result.tags,
        "ignored_fields": result.ignored_fields,
    }
    return web.Response(body=orjson.dumps(body), content_type="application/json")
