"""Cost-savings rate per cache layer, per tenant and overall, from billing-ledger rows; plus the advice.

``CSR = Σ(uncached cost − cost paid) / Σ uncached cost``, where the uncached cost is what the same
traffic would have cost with no cache at all (the ledger's ``cost_without_cache_micros``). Each layer's
``csr`` is its saving over the *tenant's whole* uncached cost, so the layers of a tenant add up to its
overall CSR (up to rounding); ``discount`` is the layer's saving over the uncached cost of its own
tokens only.

Layers, from rows grouped by ``(tenant, model, source)`` (``Ledger.query``, SQLite or Redis alike):

- a served source (``response_cache``, ``coalesced``, ``semantic_cache`` and any later one): the row's
  uncached cost against what it was billed;
- ``upstream`` rows split into ``explicit`` (``explicit_create`` + ``explicit_hit`` tokens: may be a
  loss, creations cost more than the list price) and ``implicit`` (``implicit_hit``). Their uncached
  value is the row's input value (``cost_without_cache − output``) pro rata of tokens, so no price is
  needed and a price change inside the period is accounted as it was billed.

"What the advice would add" is the advisor's saving per request times the tenant's requests billed
upstream in the same period (rates and counts of the same period, never a per-day extrapolation over
a period that holds fewer requests): the projected CSR is ``(saved + advice per request × upstream
requests) / uncached``, at most 1 since no saving exceeds a request's input cost.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from cache.billing.ledger import UsageRow

SERVED_LAYERS: tuple[str, ...] = ("response_cache", "coalesced", "semantic_cache")
PROMPT_LAYERS: tuple[str, ...] = ("explicit", "implicit")
LAYERS: tuple[str, ...] = (*SERVED_LAYERS, *PROMPT_LAYERS)


@dataclass(slots=True)
class LayerSums:
    uncached_micros: int = 0  # what this layer's tokens would have cost with no cache
    paid_micros: int = 0

    @property
    def saved_micros(self) -> int:
        return self.uncached_micros - self.paid_micros

    def add(self, uncached: int, paid: int) -> None:
        self.uncached_micros += uncached
        self.paid_micros += paid


@dataclass(slots=True)
class TenantSavings:
    tenant: str | None  # None: overall
    requests: int = 0
    uncached_micros: int = 0
    paid_micros: int = 0
    layers: dict[str, LayerSums] = field(default_factory=lambda: {n: LayerSums() for n in LAYERS})
    advice_micros_per_request: float = 0.0
    upstream_requests: int = 0

    @property
    def saved_micros(self) -> int:
        return self.uncached_micros - self.paid_micros

    @property
    def csr(self) -> float:
        return self.saved_micros / self.uncached_micros if self.uncached_micros > 0 else 0.0

    def add_row(self, row: UsageRow) -> None:
        self.requests += row.requests
        self.uncached_micros += row.cost_without_cache_micros
        self.paid_micros += row.cost_micros
        source = row.source
        if source is None:
            raise ValueError("savings need ledger rows grouped by source (group_by includes 'source')")
        if source == "upstream":
            self.upstream_requests += row.requests
        if source != "upstream":
            self.layers.setdefault(source, LayerSums()).add(row.cost_without_cache_micros, row.cost_micros)
            return
        t, m = row.tokens, row.micros
        input_value = row.cost_without_cache_micros - m.output
        input_tokens = row.input_tokens_computed
        if input_tokens <= 0:
            return
        explicit_tokens = t.explicit_create + t.explicit_hit
        self.layers["explicit"].add(
            input_value * explicit_tokens // input_tokens, m.explicit_create + m.explicit_hit
        )
        self.layers["implicit"].add(input_value * t.implicit_hit // input_tokens, m.implicit_hit)

    def to_dict(self, period_s: float) -> dict[str, Any]:
        added = self.advice_micros_per_request * self.upstream_requests
        return {
            "tenant": self.tenant,
            "requests": self.requests,
            "uncached_micros": self.uncached_micros,
            "paid_micros": self.paid_micros,
            "saved_micros": self.saved_micros,
            "csr": self.csr,
            "layers": {
                name: {
                    "uncached_micros": s.uncached_micros,
                    "paid_micros": s.paid_micros,
                    "saved_micros": s.saved_micros,
                    "csr": s.saved_micros / self.uncached_micros if self.uncached_micros > 0 else 0.0,
                    "discount": s.saved_micros / s.uncached_micros if s.uncached_micros > 0 else 0.0,
                }
                for name, s in self.layers.items()
            },
            "advice": {
                "micros_per_request": round(self.advice_micros_per_request, 3),
                "micros_in_period": round(added),
                "csr_with_advice": (self.saved_micros + added) / self.uncached_micros
                if self.uncached_micros > 0
                else 0.0,
            },
        }


def savings_report(
    rows: Sequence[UsageRow],
    period_s: float,
    *,
    currency: str,
    advice_micros_per_request: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """Per tenant and overall, from rows grouped by ``("tenant", "model", "source")`` over a period of
    ``period_s`` seconds; ``advice_micros_per_request`` maps tenants to the advisor's saving per request."""
    if period_s <= 0:
        raise ValueError("period_s must be positive")
    advice = dict(advice_micros_per_request or {})
    per: dict[str, TenantSavings] = {}
    overall = TenantSavings(None)
    for row in rows:
        key = row.tenant or ""
        per.setdefault(key, TenantSavings(row.tenant)).add_row(row)
        overall.add_row(row)
    for t, micros in advice.items():
        per.setdefault(t, TenantSavings(t)).advice_micros_per_request = micros
    added = sum(per[t].advice_micros_per_request * per[t].upstream_requests for t in advice)
    overall.advice_micros_per_request = (
        added / overall.upstream_requests if overall.upstream_requests else 0.0
    )
    return {
        "currency": currency,
        "period_s": period_s,
        "tenants": [per[t].to_dict(period_s) for t in sorted(per)],
        "overall": overall.to_dict(period_s),
    }


def advice_by_tenant(advice_doc: Mapping[str, Any]) -> dict[str, float]:
    """Saving per request of each tenant in an advice document (``Advisor.advice``): its findings'
    savings per request, averaged over its models weighted by their observed requests."""
    out = {}
    for t in advice_doc.get("tenants", []):
        n = sum(m["observed"]["requests"] for m in t["models"])
        total = sum(
            m["observed"]["requests"] * sum(f["saving"]["micros_per_request"] for f in m["findings"])
            for m in t["models"]
        )
        out[t["tenant"]] = total / n if n else 0.0
    return out
