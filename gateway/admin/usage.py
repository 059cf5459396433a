"""``GET /admin/usage``: tokens, cost and what caching saved, from the billing ledger;
``GET /admin/usage/reconcile``: the ledger's tokens per replica against the replica's own counters
(``gateway.process.reconcile``); ``GET /admin/usage/budgets``: each tenant budget's spend against its
limit, as this process's admission reads it (``cache.billing.budgets``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING

import orjson
from aiohttp import web

from cache.billing.budgets import report_rows
from cache.billing.ledger import LedgerRangeUnavailable, to_ms
from cache.billing.report import parse_group_by, parse_time, report
from gateway.errors import GatewayError
from gateway.process.process import PROCESS
from gateway.process.reconcile import reconcile

if TYPE_CHECKING:
    from gateway.process.process import Process


def _billing(request: web.Request) -> Process:
    """The process, when its policy bills (else the admin API's 404)."""
    process = request.app[PROCESS]
    if process.metering is None:
        raise GatewayError(404, "billing is disabled in this policy", code="billing_disabled")
    return process


def _window(q: Mapping[str, str]) -> tuple[datetime | None, datetime | None]:
    """``since`` and ``until`` of a query (a 400 in the admin API's shape when one does not parse)."""
    try:
        return parse_time(q.get("since"), "since"), parse_time(q.get("until"), "until")
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_request") from None


async def usage_endpoint(request: web.Request) -> web.Response:
    """``GET /admin/usage?tenant=&model=&since=&until=&group_by=tenant,model,day,source``."""
    process, q = _billing(request), request.query
    since, until = _window(q)
    try:
        group_by = parse_group_by(q.get("group_by"))
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_request") from None
    assert process.metering is not None  # _billing: the ledger is on
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


async def reconcile_endpoint(request: web.Request) -> web.Response:
    """``GET /admin/usage/reconcile?since=&until=``: from the counters' last reading at or before
    ``since`` (default: one ``billing.reconcile.window_s`` before ``until``) to their last at or before
    ``until`` (default: the latest scrape), per replica: counted, billed, estimated rows, drift."""
    process = _billing(request)
    since, until = _window(request.query)
    since_ms, until_ms = to_ms(since), to_ms(until)
    if since_ms is not None and until_ms is not None and until_ms <= since_ms:
        raise GatewayError(400, "until must be later than since", param="until", code="invalid_request")
    if since_ms is None:
        window_ms = int(process.state.policy.billing.reconcile.window_s * 1000)
        end = until_ms if until_ms is not None else process.usage_counters.latest_ms()
        since_ms = None if end is None else end - window_ms
    try:
        assert process.metering is not None  # _billing: the ledger is on
        cfg = process.state.policy.billing.reconcile
        rep = await reconcile(process.metering.ledger, process.usage_counters, cfg, since_ms, until_ms)
    except LedgerRangeUnavailable as exc:
        raise GatewayError(400, str(exc), code="range_unavailable") from None
    return web.Response(body=orjson.dumps(rep), content_type="application/json")


async def budgets_endpoint(request: web.Request) -> web.Response:
    """``GET /admin/usage/budgets?tenant=``: spend against budget, one row a budget of the policy."""
    process = _billing(request)
    tenant = request.query.get("tenant")
    budgets = [b for t, bs in process.state.budgets.items() if tenant is None or t == tenant for b in bs]
    assert process.budgets is not None  # with the ledger
    spent = await process.budgets.spent(budgets, process.state.policy.tenancy.budgets.outage_pct)
    rows = report_rows(spent, process.state.policy.billing.currency)
    return web.Response(body=orjson.dumps({"budgets": rows}), content_type="application/json")
