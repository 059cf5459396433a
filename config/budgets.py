"""A tenant's budgets (``tenancy.tenants[].budgets``): spend or tokens over a period, and the soft limits.

A budget counts what the billing ledger's rows of the tenant say (``total_micros`` for ``spend``, every
token of the row for ``tokens``), over a UTC ``day``, a UTC calendar ``month`` or a ``rolling`` window of
``window_s`` seconds, optionally only for some models (the ledger's model: the pool's name, a LoRA
adapter's calls count as its base model's). ``spend`` is written in currency units, like the prices, and
converted to micro-units at load time. The name is the counter's identity (Redis keys, metrics, the usage
report): keep it when changing the limit, change it to start counting afresh. Enforcement and its bounds:
``cache.billing.budgets`` and docs/operations.md ("Budgets").
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from config.billing import to_micros

ROLLING_MIN_S = 60
ROLLING_MAX_S = 400 * 86_400


class BudgetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="the budget's identity in counters, metrics and reports (default: <period>-<spend|tokens>"
        ", with the models when set); changing it starts a new count",
    )
    spend: Decimal | None = Field(
        None, gt=0, description="most a tenant spends in the period, in currency units (like prices)"
    )
    tokens: int | None = Field(
        None, gt=0, description="most tokens (every kind a ledger row bills) in the period"
    )
    period: Literal["day", "month", "rolling"] = Field(
        "month", description="UTC day, UTC calendar month, or the last window_s seconds"
    )
    window_s: int | None = Field(
        None,
        ge=ROLLING_MIN_S,
        le=ROLLING_MAX_S,
        description="rolling: the window, counted in 60 slots of window_s/60 (so to within one slot)",
    )
    models: list[str] | None = Field(
        None,
        min_length=1,
        description="count and enforce only for these models (pool names or glob patterns; an adapter's "
        "calls count as its pool's); None: every model",
    )
    warn_at_pct: list[int] = Field(
        default_factory=lambda: [80],
        description="soft limits: shares of the budget (percent) at which the gateway logs "
        "budget_soft_limit once and counts prefix_gateway_budget_soft_limit_total",
    )

    @field_validator("spend")
    @classmethod
    def _whole_micros(cls, v: Decimal | None) -> Decimal | None:
        if v is not None:
            to_micros(v)
        return v

    @field_validator("warn_at_pct")
    @classmethod
    def _shares(cls, v: list[int]) -> list[int]:
        if any(p < 1 or p > 100 for p in v):
            raise ValueError("warn_at_pct entries are percentages from 1 to 100")
        return sorted(set(v))

    @model_validator(mode="after")
    def _one_limit(self) -> BudgetConfig:
        if (self.spend is None) == (self.tokens is None):
            raise ValueError("a budget has exactly one of spend (currency units) or tokens")
        if (self.period == "rolling") != (self.window_s is not None):
            raise ValueError("window_s is set for a rolling period, and only for it")
        return self

    @property
    def unit(self) -> Literal["spend", "tokens"]:
        return "spend" if self.spend is not None else "tokens"

    @property
    def limit(self) -> int:
        """Micro-units for ``spend``, tokens for ``tokens``."""
        return to_micros(self.spend) if self.spend is not None else int(self.tokens or 0)

    @property
    def key_name(self) -> str:
        """The name, or the one derived from the period, the unit and the models."""
        if self.name is not None:
            return self.name
        parts = [self.period if self.period != "rolling" else f"rolling{self.window_s}s", self.unit]
        if self.models:
            parts.append("+".join(self.models))
        return "-".join(parts)


class BudgetsConfig(BaseModel):
    """How budgets behave while Redis (their shared counters) is away."""

    model_config = ConfigDict(extra="forbid")

    outage_pct: int = Field(
        10,
        ge=0,
        le=100,
        description="while Redis does not answer, each process admits a budgeted tenant until it has counted "
        "this share of the budget locally (past what it last read): fleet overshoot at most processes x this "
        "share (plus the in-flight bound); 0: refuse budgeted tenants until Redis answers",
    )
