"""Usage reports from the billing ledger: the admin endpoint and the ``prefix-gateway usage`` command.

Both answer the same question the same way: tokens by kind, cost, and what caching saved (the cost the
same traffic would have had with no cache at all, minus the actual cost) per tenant / model / day /
source over a half-open period ``[since, until)``.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import Any

import orjson
from aiohttp import web

from cache.billing.ledger import Ledger, LedgerRangeUnavailable, UsageRow, check_group_by
from cache.billing.pricing import KINDS, format_micros
from gateway.errors import GatewayError
from gateway.process.state import current_state

COLUMNS = ("requests", *KINDS, "cost", "cost_without_cache", "saved", "saving_rate")


def parse_time(value: str | None, name: str) -> datetime | None:
    """ISO date or datetime (naive = UTC), or epoch seconds."""
    if value is None or value == "":
        return None
    try:
        return datetime.fromtimestamp(float(value), tz=UTC)
    except ValueError:
        pass
    try:
        if len(value) == 10:
            d = date.fromisoformat(value)
            return datetime(d.year, d.month, d.day, tzinfo=UTC)
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return t if t.tzinfo else t.replace(tzinfo=UTC)
    except ValueError:
        raise ValueError(f"{name} must be an ISO date/time or epoch seconds, got {value!r}") from None


def parse_group_by(value: str | None) -> tuple[str, ...]:
    if not value:
        return ("tenant", "model")
    return check_group_by([v.strip() for v in value.split(",") if v.strip()])


def row_dict(row: UsageRow, currency: str) -> dict[str, Any]:
    out = row.to_dict()
    out["currency"] = currency
    out["cost"] = format_micros(row.cost_micros)
    out["cost_without_cache"] = format_micros(row.cost_without_cache_micros)
    out["saved"] = format_micros(row.saved_micros)
    return {k: v for k, v in out.items() if v is not None}


def totals(rows: Sequence[UsageRow]) -> dict[str, Any]:
    cost = sum(r.cost_micros for r in rows)
    without = sum(r.cost_without_cache_micros for r in rows)
    tokens = {k: sum(r.tokens.as_dict()[k] for r in rows) for k in KINDS}
    return {
        "requests": sum(r.requests for r in rows),
        "tokens": tokens,
        "cost_micros": cost,
        "cost_without_cache_micros": without,
        "saved_micros": without - cost,
        "saving_rate": (without - cost) / without if without > 0 else 0.0,
    }


async def report(
    ledger: Ledger,
    currency: str,
    *,
    tenant: str | None,
    model: str | None,
    since: datetime | None,
    until: datetime | None,
    group_by: tuple[str, ...],
) -> dict[str, Any]:
    rows = await ledger.query(tenant=tenant, model=model, since=since, until=until, group_by=group_by)
    return {
        "currency": currency,
        "since": since.isoformat() if since else None,
        "until": until.isoformat() if until else None,
        "group_by": list(group_by),
        "rows": [row_dict(r, currency) for r in rows],
        "totals": totals(rows),
    }


def _cells(row: dict[str, Any], group_by: Sequence[str]) -> list[str]:
    tokens = row["tokens"]
    return [
        *(str(row.get(g, "")) for g in group_by),
        str(row["requests"]),
        *(str(tokens[k]) for k in KINDS),
        row["cost"],
        row["cost_without_cache"],
        row["saved"],
        f"{row['saving_rate']:.1%}",
    ]


def render_table(rep: dict[str, Any]) -> str:
    group_by = rep["group_by"]
    header = [*group_by, *COLUMNS]
    body = [_cells(r, group_by) for r in rep["rows"]]
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += [
        "  ".join(
            c.rjust(w) if i >= len(group_by) else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in body
    ]
    t = rep["totals"]
    lines.append(
        f"total: {t['requests']} requests, cost {format_micros(t['cost_micros'])} {rep['currency']}, "
        f"without cache {format_micros(t['cost_without_cache_micros'])}, saved "
        f"{format_micros(t['saved_micros'])} ({t['saving_rate']:.1%})"
    )
    return "\n".join(lines)


def render_csv(rep: dict[str, Any]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow([*rep["group_by"], *COLUMNS, "currency"])
    for r in rep["rows"]:
        writer.writerow([*_cells(r, rep["group_by"])[:-1], f"{r['saving_rate']:.6f}", rep["currency"]])
    return buf.getvalue()


async def usage_endpoint(request: web.Request) -> web.Response:
    """``GET /admin/usage?tenant=&model=&since=&until=&group_by=tenant,model,day,source``."""
    state = current_state(request.app)
    if state.metering is None:
        raise GatewayError(404, "billing is disabled in this policy", code="billing_disabled")
    q = request.query
    try:
        since, until = parse_time(q.get("since"), "since"), parse_time(q.get("until"), "until")
        group_by = parse_group_by(q.get("group_by"))
    except ValueError as exc:
        raise GatewayError(400, str(exc), code="invalid_request") from None
    try:
        rep = await report(
            state.metering.ledger,
            state.policy.billing.currency,
            tenant=q.get("tenant"),
            model=q.get("model"),
            since=since,
            until=until,
            group_by=group_by,
        )
    except LedgerRangeUnavailable as exc:
        raise GatewayError(400, str(exc), code="range_unavailable") from None
    return web.Response(body=orjson.dumps(rep), content_type="application/json")


def add_usage_command(sub: Any) -> None:
    """``prefix-gateway usage``: the same report as ``GET /admin/usage``, read from the policy's ledger."""
    p = sub.add_parser("usage", help="usage report from the billing ledger (tokens, cost, savings)")
    p.add_argument("--config", required=True, help="the gateway's policy file (names the ledger)")
    p.add_argument("--since", help="ISO date/time or epoch seconds (inclusive)")
    p.add_argument("--until", help="ISO date/time or epoch seconds (exclusive)")
    p.add_argument("--tenant")
    p.add_argument("--model")
    p.add_argument("--group-by", default="tenant,model", help="any of tenant,model,day,source")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: Any) -> int:
    import asyncio
    import sys

    from cache.billing.ledger import open_ledger
    from cache.store_redis import connect
    from config import PolicyError, load_policy

    try:
        policy = load_policy(args.config)
        since, until = parse_time(args.since, "--since"), parse_time(args.until, "--until")
        group_by = parse_group_by(args.group_by)
    except (PolicyError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 1

    async def run() -> dict[str, Any]:
        redis = None
        if policy.billing.ledger.kind == "redis":
            if policy.redis.url is None:
                raise ValueError("billing.ledger.kind is 'redis' but redis.url is not set")
            redis = connect(policy.redis.url, policy.redis.socket_timeout_s)
        ledger = await open_ledger(
            policy.billing.ledger, redis_client=redis, key_prefix=policy.redis.key_prefix
        )
        try:
            return await report(
                ledger,
                policy.billing.currency,
                tenant=args.tenant,
                model=args.model,
                since=since,
                until=until,
                group_by=group_by,
            )
        finally:
            await ledger.close()
            if redis is not None:
                await redis.aclose()

    try:
        rep = asyncio.run(run())
    except (ValueError, LedgerRangeUnavailable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(orjson.dumps(rep, option=orjson.OPT_INDENT_2).decode())
    elif args.format == "csv":
        print(render_csv(rep), end="")
    else:
        print(render_table(rep))
    return 0
