"""Usage reports from the billing ledger, shared by ``GET /admin/usage`` and ``prefix-gateway usage``.

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

from cache.billing.ledger import Ledger, UsageRow, check_group_by
from cache.billing.pricing import KINDS, format_micros

COLUMNS = ("requests", "estimated", *KINDS, "cost", "cost_without_cache", "saved", "saving_rate")
"""``estimated``: of the requests, rows whose tokens the gateway estimated because the replica's usage
never came (the client left, the stream broke off; docs/billing.md, "A row on every path")."""


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
        "estimated": sum(r.estimated for r in rows),
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
        str(row["estimated"]),
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
        f"total: {t['requests']} requests ({t['estimated']} with estimated usage), cost {format_micros(t['cost_micros'])} {rep['currency']}, "
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
