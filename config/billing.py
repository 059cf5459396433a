"""Billing section of the policy (owned by the billing work).

Prices are written in currency units per million tokens (``input_per_1m: 3.0`` means 3 USD per 1M input
tokens) and converted to integer micro-units (1 unit = 1,000,000 micros) at load time; a price with more
than six decimals is rejected rather than silently rounded. Rule percentages are integers. Every rule
can be overridden per model; unset fields of a model's ``rules`` inherit the section's ``rules``.
See docs/billing.md for the arithmetic.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MICROS_PER_UNIT = 1_000_000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def to_micros(value: Decimal) -> int:
    """Currency units (exact decimal) to integer micro-units; raise if it is not a whole micro."""
    micros = value * MICROS_PER_UNIT
    if micros != micros.to_integral_value():
        raise ValueError(f"price {value} has more than 6 decimals (smallest unit is 1e-6)")
    return int(micros)


class ModelPriceConfig(_Strict):
    input_per_1m: Decimal = Field(Decimal(0), ge=0, description="price of 1M input tokens, currency units")
    output_per_1m: Decimal = Field(Decimal(0), ge=0, description="price of 1M output tokens, currency units")
    price_version: str | None = Field(None, description="overrides the section's price_version")
    rules: RulesOverride | None = None

    @field_validator("input_per_1m", "output_per_1m")
    @classmethod
    def _whole_micros(cls, v: Decimal) -> Decimal:
        to_micros(v)
        return v

    @property
    def input_micros_per_1m(self) -> int:
        return to_micros(self.input_per_1m)

    @property
    def output_micros_per_1m(self) -> int:
        return to_micros(self.output_per_1m)


class RulesConfig(_Strict):
    """Percentages of the list price and token thresholds (defaults: the documented rules)."""

    implicit_cached_pct: int = Field(
        20, ge=0, le=10_000, description="input served from a replica's prefix cache"
    )
    implicit_min_tokens: int = Field(
        256, ge=0, description="prompts shorter than this get no implicit discount"
    )
    explicit_create_pct: int = Field(125, ge=0, le=10_000, description="marked prefix, first request")
    explicit_hit_pct: int = Field(10, ge=0, le=10_000, description="marked prefix matching a live entry")
    explicit_ttl_s: float = Field(300.0, gt=0, description="life of an explicit entry, renewed by each hit")
    explicit_min_tokens: int = Field(1024, ge=1, description="shorter marked prefixes are billed as implicit")
    max_markers: int = Field(4, ge=0, le=64, description="more cache_control markers than this is a 400")
    response_cache_input_pct: int = Field(0, ge=0, le=10_000)
    response_cache_output_pct: int = Field(0, ge=0, le=10_000)
    coalesced_input_pct: int = Field(0, ge=0, le=10_000, description="follower served the leader's answer")
    coalesced_output_pct: int = Field(0, ge=0, le=10_000)


class RulesOverride(_Strict):
    """Per-model overrides: every field optional, unset ones inherit the section's rules."""

    implicit_cached_pct: int | None = Field(None, ge=0, le=10_000)
    implicit_min_tokens: int | None = Field(None, ge=0)
    explicit_create_pct: int | None = Field(None, ge=0, le=10_000)
    explicit_hit_pct: int | None = Field(None, ge=0, le=10_000)
    explicit_ttl_s: float | None = Field(None, gt=0)
    explicit_min_tokens: int | None = Field(None, ge=1)
    max_markers: int | None = Field(None, ge=0, le=64)
    response_cache_input_pct: int | None = Field(None, ge=0, le=10_000)
    response_cache_output_pct: int | None = Field(None, ge=0, le=10_000)
    coalesced_input_pct: int | None = Field(None, ge=0, le=10_000)
    coalesced_output_pct: int | None = Field(None, ge=0, le=10_000)


ModelPriceConfig.model_rebuild()


# Group commit of the SQLite ledger (cache/billing/ledger_sqlite.py): a group of rows closes this
# many ms after its first row or at this many rows, whichever first; measured in bench.ledger_commit.
GROUP_COMMIT_MS = 0.0
GROUP_COMMIT_ROWS = 256


class LedgerConfig(_Strict):
    kind: Literal["sqlite", "redis"] = "sqlite"
    path: str = Field(
        "var/ledger.db",
        description="SQLite file, relative to the policy file's directory (parent created); ':memory:' "
        "keeps nothing across restarts",
    )
    synchronous: Literal["full", "normal"] = Field(
        "normal",
        description="SQLite: 'normal' survives a killed or crashed gateway (WAL); 'full' also power loss, "
        "at one fsync per group commit on the answer's path",
    )
    group_commit_ms: float = Field(
        GROUP_COMMIT_MS,
        ge=0,
        le=1000,
        description="SQLite: a group commit closes this long after its first row (or at group_commit_rows); "
        "each answer's end waits for its own group's commit; 0: commit what is queued, wait for nothing",
    )
    group_commit_rows: int = Field(
        GROUP_COMMIT_ROWS,
        ge=1,
        le=100_000,
        description="SQLite: most rows in one group commit (1: one commit per row)",
    )
    stream_maxlen: int = Field(1_000_000, ge=1000, description="Redis: line items kept (approximate trim)")
    counters_ttl_days: int = Field(400, ge=1, description="Redis: per-day counters expire after this")
    idempotency_ttl_s: int = Field(
        7 * 86_400, ge=60, description="Redis: how long a request id is remembered against double counting"
    )


class ReconcileConfig(_Strict):
    """Usage reconciliation: the ledger's tokens per replica against the replica's own counters
    (``vllm:prompt_tokens_total``, ``vllm:generation_tokens_total``, SGLang's names), read by the
    scrape at each window's edges (docs/billing.md, "Reconciliation")."""

    enabled: bool = Field(True, description="check each window and export the drift gauge (needs scrape)")
    window_s: float = Field(300.0, ge=1, description="length of a reconciliation window")
    drift_threshold_pct: float = Field(
        1.0,
        ge=0,
        description="a replica's drift (its counter minus the ledger, prompt or generation tokens) above "
        "this share of its counted tokens in a window is a warning (log usage_drift) and counted",
    )
    windows_kept: int = Field(288, ge=1, le=100_000, description="window edges kept per replica")


class ResponseExtensionConfig(_Strict):
    headers: bool = Field(True, description="add x-gateway-billing-* response headers")
    header_prefix: str = Field("x-gateway-billing-", pattern=r"^[a-z0-9-]+$")
    usage_extension: bool = Field(False, description="add usage.billing to the JSON body / final chunk")


class BillingConfig(_Strict):
    enabled: bool = True
    currency: str = Field("USD", min_length=1, max_length=8, pattern=r"^[A-Za-z0-9]+$")
    price_version: str = Field("default", min_length=1, max_length=64)
    default: ModelPriceConfig = Field(
        default_factory=ModelPriceConfig, description="prices of models not listed (zero: tokens only)"
    )
    models: dict[str, ModelPriceConfig] = Field(default_factory=dict)
    rules: RulesConfig = Field(default_factory=RulesConfig)
    ledger: LedgerConfig = Field(default_factory=LedgerConfig)
    response: ResponseExtensionConfig = Field(default_factory=ResponseExtensionConfig)
    reconcile: ReconcileConfig = Field(default_factory=ReconcileConfig)
    batch_price_factor: Decimal = Field(
        Decimal("0.5"),
        ge=0,
        le=10,
        description="multiplies every amount of a batch line (OpenAI charges batches half); at most 4 decimals",
    )

    @field_validator("batch_price_factor")
    @classmethod
    def _factor_bp(cls, v: Decimal) -> Decimal:
        if v * 10_000 != (v * 10_000).to_integral_value():
            raise ValueError(f"batch_price_factor {v} has more than 4 decimals")
        return v

    @property
    def batch_price_factor_bp(self) -> int:
        """The batch price factor in basis points (0.5 → 5000), for exact integer pricing."""
        return int(self.batch_price_factor * 10_000)

    @model_validator(mode="after")
    def _valid_overrides(self) -> BillingConfig:
        for name in self.models:
            self.rules_for(name)  # an override that breaks a cross-field rule fails at load time
        return self

    def price_for(self, model: str) -> ModelPriceConfig:
        return self.models.get(model, self.default)

    def rules_for(self, model: str) -> RulesConfig:
        """The section's rules with the model's overrides (listed model, else ``default``) applied."""
        override = self.price_for(model).rules
        if override is None:
            return self.rules
        patch = override.model_dump(exclude_none=True)
        return RulesConfig.model_validate({**self.rules.model_dump(), **patch})

    def price_version_for(self, model: str) -> str:
        return self.price_for(model).price_version or self.price_version
