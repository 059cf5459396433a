"""``GET /admin/routing/explain?request_id=…``: why the router sent a recent request where it did.

Answers the kept record of the request (``gateway.observability.decisions``): each attempt's candidates
with their score terms (queued prefill, load, matched tokens, score), the weights the policy applied,
the reason, why the winner won, the tokens the fleet held for the prompt and what the chosen replica
reported cached. ``request_id`` is the gateway's ``x-gateway-request-id`` or the client's
``x-request-id`` (every kept request that carried it). 404 ``decision_not_found`` for an id this
process never routed (or forgot long ago), 404 ``decision_evicted`` for one that left the buffer
(``limits.explain_decisions``). Each gateway process keeps its own decisions: ask the one that routed it.
"""

from __future__ import annotations

import orjson
from aiohttp import web

from gateway.errors import GatewayError
from gateway.process.process import PROCESS


async def explain_endpoint(request: web.Request) -> web.Response:
    key = request.query.get("request_id", "").strip()
    if not key or len(key) > 256:
        raise GatewayError(
            400, "request_id is required (at most 256 characters)", param="request_id", code="invalid_request"
        )
    process = request.app[PROCESS]
    found = process.decisions.find(key)
    limit = process.state.policy.limits.explain_decisions
    if found is None and limit == 0:
        raise GatewayError(
            404,
            "this process keeps no routing decisions (limits.explain_decisions: 0)",
            code="decision_not_found",
        )
    if found is None:
        raise GatewayError(
            404, f"no routing decision of request {key!r} is known to this process", code="decision_not_found"
        )
    if not found:
        raise GatewayError(
            404,
            f"the routing decision of request {key!r} was evicted: this process keeps its last {limit} "
            "(limits.explain_decisions)",
            code="decision_evicted",
        )
    body = {"request_id": key, "decisions": [r.as_json() for r in found]}
    return web.Response(body=orjson.dumps(body), content_type="application/json")
