"""``GET /admin/advice[?tenant=&since=&until=]``: what each tenant's prompt layout costs it.

The advice document of the process's advisor (findings with where, how often and the saving per day,
in tokens and the tenant's prices), and the cost-savings report per cache layer from the billing
ledger over ``[since, until)`` (default: the last 24 hours), with what the advice would add. Numbers,
fixed words and ids only: no prompt text. The findings are priced in a worker thread
(``Advisor.advice_async``): while a new pricing runs, the answer holds the cached findings and says
``priced.computing``; a (tenant, model) never priced in its window waits for its pricing.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import orjson
from aiohttp import web

from cache.advisor.savings import advice_by_tenant, savings_report
from cache.billing.ledger import LedgerRangeUnavailable
from cache.billing.report import parse_time
from gateway.errors import GatewayError
from gateway.process.process import PROCESS

DEFAULT_PERIOD_S = 86_400.0


async def advice_endpoint(request: web.Request) -> web.Response:
    process = request.app[PROCESS]
    q = request.query
    tenant = q.get("tenant") or None
    try:
        until = parse_time(q.get("until"), "until") or datetime.now(tz=UTC)
        since = parse_time(q.get("since"), "since") or datetime.fromtimestamp(
            until.timestamp() - DEFAULT_PERIOD_S, tz=UTC
        )
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_request") from None
    period_s = until.timestamp() - since.timestamp()
    if period_s <= 0:
        raise GatewayError(400, "'since' must be before 'until'", code="invalid_request")
    advice = await process.advisor.advice_async(tenant, now=time.time())
    savings = None
    if process.metering is not None:
        try:
            rows = await process.metering.ledger.query(
                tenant=tenant, since=since, until=until, group_by=("tenant", "model", "source")
            )
        except LedgerRangeUnavailable as exc:
            raise GatewayError(400, str(exc), code="range_unavailable") from None
        savings = savings_report(
            rows,
            period_s,
            currency=process.state.policy.billing.currency,
            advice_micros_per_request=advice_by_tenant(advice),
        )
    return web.Response(
        body=orjson.dumps({"advice": advice, "savings": savings}), content_type="application/json"
    )
