"""Output forms of the advice: a text table (``prefix-gateway advise --format table``) and the values of
the Prometheus gauges of potential savings. JSON is ``Advisor.advice`` itself (orjson-serialisable).

Gauges (set by the gateway from ``gauge_values``; label values bounded: a tenant from the policy's
tenant list, else ``other``; a finding kind from ``cache.advisor.findings.KINDS``):

- ``prefix_gateway_advice_saving_micros_per_day{tenant, kind}``: estimated saving per day, micro-units
  of the policy currency;
- ``prefix_gateway_advice_saving_tokens_per_day{tenant, kind}``: the same in token-equivalents at
  list price;
- ``prefix_gateway_advice_findings{tenant, kind}``: how many findings of that kind.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from cache.advisor.findings import KINDS
from cache.billing.pricing import format_micros

GAUGE_SAVING_MICROS = "prefix_gateway_advice_saving_micros_per_day"
GAUGE_SAVING_TOKENS = "prefix_gateway_advice_saving_tokens_per_day"
GAUGE_FINDINGS = "prefix_gateway_advice_findings"
GAUGES: tuple[str, ...] = (GAUGE_SAVING_MICROS, GAUGE_SAVING_TOKENS, GAUGE_FINDINGS)
OTHER_TENANT = "other"

GaugeKey = tuple[str, str]  # tenant label, kind


def gauge_values(doc: Mapping[str, Any], listed_tenants: Container[str]) -> dict[str, dict[GaugeKey, float]]:
    """Every gauge's value per (tenant label, kind), summed over models (and over unlisted tenants).

    Every listed tenant present in the document gets every kind (0 when it has no such finding), so a
    fixed layout stops showing a saving instead of keeping its last value."""
    out: dict[str, dict[GaugeKey, float]] = {g: {} for g in GAUGES}
    for t in doc.get("tenants", []):
        label = t["tenant"] if t["tenant"] in listed_tenants else OTHER_TENANT
        for kind in KINDS:
            for g in GAUGES:
                out[g].setdefault((label, kind), 0.0)
        for m in t["models"]:
            for f in m["findings"]:
                key = (label, f["kind"])
                out[GAUGE_SAVING_MICROS][key] += f["saving"]["micros_per_day"]
                out[GAUGE_SAVING_TOKENS][key] += f["saving"]["tokens_per_day"]
                out[GAUGE_FINDINGS][key] += 1
    return out


def _table(header: list[str], rows: list[list[str]], right_from: int) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i >= right_from else c.ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        ).rstrip()

    return [line(header), *(line(r) for r in rows)]


def _where(w: Mapping[str, Any]) -> str:
    a, b = w["tokens"]
    msg = (
        "" if w["message"] is None else (" tools" if w["message"] < 0 else f" msg {w['message']} {w['role']}")
    )
    return f"{a}-{b}{msg}{' (moves)' if w['moves'] else ''}"


def render_table(doc: Mapping[str, Any], savings: Mapping[str, Any] | None = None) -> str:
    """Findings per tenant and model, then (when given) the savings report per layer."""
    currency = doc.get("currency") or (savings or {}).get("currency") or ""
    rows = []
    for t in doc.get("tenants", []):
        for m in t["models"]:
            for f in m["findings"]:
                s = f["saving"]
                rows.append(
                    [
                        t["tenant"],
                        m["model"],
                        f["kind"],
                        _where(f["where"]),
                        f"{f['share']:.0%}",
                        f"{s['tokens_per_day']:,}",
                        format_micros(s["micros_per_day"]),
                    ]
                )
    lines = [f"layout advice (sample rate {doc.get('sample_rate')}, window {doc.get('window_s')} s)"]
    header = ["tenant", "model", "finding", "tokens (where)", "share", "tokens/day", f"{currency}/day"]
    lines += _table(header, rows, right_from=4) if rows else ["no findings"]
    for t in doc.get("tenants", []):
        for m in t["models"]:
            for f in m["findings"]:
                lines.append(f"- {t['tenant']} / {m['model']}: {f['advice']}")
    if savings is not None:
        lines.append("")
        lines.append(
            f"cost-savings rate per layer ({savings['currency']}, period {savings['period_s']:.0f} s)"
        )
        layer_names = list(savings["overall"]["layers"])
        header = [
            "tenant",
            "requests",
            "uncached",
            "paid",
            "CSR",
            *layer_names,
            "advice adds",
            "CSR with advice",
        ]
        body = []
        for t in [*savings["tenants"], savings["overall"]]:
            body.append(
                [
                    t["tenant"] if t["tenant"] is not None else "(all)",
                    str(t["requests"]),
                    format_micros(t["uncached_micros"]),
                    format_micros(t["paid_micros"]),
                    f"{t['csr']:.1%}",
                    *(f"{t['layers'][n]['csr']:.1%}" for n in layer_names),
                    format_micros(t["advice"]["micros_in_period"]),
                    f"{t['advice']['csr_with_advice']:.1%}",
                ]
            )
        lines += _table(header, body, right_from=1)
    return "\n".join(lines)
