"""Tenant budgets on the request path: refused before anything is routed while a budget is exhausted
(429 ``budget_exceeded`` with ``Retry-After``), and each ledger row counted where it is written.

The counters and every bound (the overshoot of requests in flight, a Redis outage) are
``cache.billing.budgets``'s. The refusal is OpenAI's answer to a spent quota (429, type
``insufficient_quota``) with its own code, ``budget_exceeded``; Anthropic's shape on /v1/messages
(``rate_limit_error``) comes from the front end. Its message names the budget, what is counted against
its limit and when it resets, and nothing of another tenant. A soft limit (``warn_at_pct``, and 100 %)
crossed by a row is counted (``prefix_gateway_budget_soft_limit_total``) and logged once, with the
tenant's metric label (``observability.tenant_labels``), never a key.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from cache.billing.budgets import Added, Spent
from cache.billing.pricing import LineItem, format_micros
from gateway.errors import GatewayError
from gateway.pipeline.context import RequestContext
from gateway.pipeline.parse import ENDPOINTS

log = logging.getLogger("prefix_gateway")


def _amount(unit: str, n: int, currency: str) -> str:
    return f"{format_micros(n)} {currency}" if unit == "spend" else f"{n} tokens"


def exceeded(blocking: list[Spent], now_ms: int, currency: str) -> GatewayError:
    """The 429 of the exhausted budget that stays exhausted longest."""
    s = max(blocking, key=lambda x: x.resets_ms)
    b = s.budget
    retry = max(1, -(-(s.resets_ms - now_ms) // 1000))
    at = datetime.fromtimestamp(s.resets_ms / 1000, tz=UTC).isoformat(timespec="seconds")
    period = f"the last {b.window_ms // 1000}s" if b.period == "rolling" else f"this {b.period} (UTC)"
    if s.outage_exhausted and s.spent < b.limit:
        why = "its shared counter is unreachable and this gateway's outage allowance is used up"
    else:
        why = f"{_amount(b.unit, s.spent, currency)} of {_amount(b.unit, b.limit, currency)} used in {period}"
    return GatewayError(
        429,
        f"Budget {b.name!r} is exhausted: {why}. It resets at {at}; retry after {retry}s.",
        code="budget_exceeded",
        type="insufficient_quota",
        headers={"Retry-After": str(retry), "x-budget-name": b.name, "x-budget-reset": at},
    )


async def admit(ctx: RequestContext) -> None:
    """Refuse the request while a budget of its tenant for its model is exhausted."""
    counters = ctx.process.budgets
    if counters is None or ctx.tenant is None or ctx.pool is None or ctx.parsed is None:
        return
    if not ENDPOINTS[ctx.parsed.endpoint].billed:  # tokenize and the like cost nothing: never refused
        return
    model = ctx.pool.cfg.name  # ``pool.name``, one call less
    of_tenant = ctx.state.budgets.get(ctx.tenant.id)
    if not of_tenant:  # a tenant without budgets (the usual case): no list to build
        return
    budgets = [b for b in of_tenant if b.applies(model)]
    if not budgets:
        return
    policy = ctx.state.policy
    spent = await counters.spent(budgets, policy.tenancy.budgets.outage_pct)
    m, label = ctx.process.metrics, ctx.tenant.metric_label
    for s in spent:
        m.child(m.budget_used, label, s.budget.name).set(s.used)
    blocking = [s for s in spent if s.exhausted]
    if blocking:
        for s in blocking:
            m.child(m.budget_refused, label, s.budget.name).inc()
        raise exceeded(blocking, counters.now_ms(), policy.billing.currency)


async def count(ctx: RequestContext, item: LineItem) -> None:
    """A ledger row written (or kept for a retry): count it against its tenant's budgets."""
    counters = ctx.process.budgets
    budgets = ctx.state.budgets.get(item.tenant)
    if counters is None or not budgets or ctx.tenant is None:
        return
    moved = await counters.add(budgets, item)
    m, label = ctx.process.metrics, ctx.tenant.metric_label
    for a in moved:
        m.child(m.budget_used, label, a.budget.name).set(a.after / a.budget.limit)
        for pct in a.crossed():
            m.child(m.budget_soft_limit, label, a.budget.name, str(pct)).inc()
            _log_crossing(a, pct, label)


def _log_crossing(a: Added, pct: int, label: str) -> None:
    b = a.budget
    log.warning(
        "budget exhausted" if pct >= 100 else "budget soft limit reached",
        extra={
            "event": "budget_exhausted" if pct >= 100 else "budget_soft_limit",
            "tenant": label,
            "budget": b.name,
            "pct": pct,
            "unit": b.unit,
            "used": a.after,
            "limit": b.limit,
        },
    )
