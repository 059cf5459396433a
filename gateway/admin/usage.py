"""``GET /admin/usage``: tokens, cost and what caching saved, from the billing ledger."""

from __future__ import annotations

import orjson
from aiohttp import web

from cache.billing.ledger import LedgerRangeUnavailable
from cache.billing.report import parse_group_by, parse_time, report
from gateway.errors import GatewayError
from gateway.process.process import PROCESS


async def usage_endpoint(request: web.Request) -> web.Response:
    """``GET /admin/usage?tenant=&model=&since=&until=&group_by=tenant,model,day,source``."""
    process = request.app[PROCESS]
    if process.metering is None:
        raise GatewayError(404, "billing is disabled in this policy", code="billing_disabled")
    q = request.query
    try:
        since, until = parse_time(q.get("since"), "since"), parse_time(q.get("until"), "until")
        group_by = parse_group_by(q.get("group_by"))
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_request") from None
    try:
        rep = await report(
            process.metering.ledger,
            process.state.policy.billing.currency,
            tenant=q.get("tenant"),
            model=q.get("model"),
            since=since,
            until=until,
            group_by=group_by,
        )
    except LedgerRangeUnavailable as exc:
        raise GatewayError(400, str(exc), code="range_unavailable") from None
    return web.Response(body=orjson.dumps(rep), content_type="application/json")
