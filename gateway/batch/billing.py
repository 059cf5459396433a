"""A batch line's answer as a billing line item: priced like an online request, at the batch price.

Same split as an online request (``cache.billing.pricing.bill``: the replica's cached tokens at the
implicit rate, a marked prefix at the explicit rates), source ``batch``, every amount times
``billing.batch_price_factor`` (OpenAI charges batches half). The no-cache cost is at the same factor,
so ``saved_micros`` of batch rows is what the prompt cache, and so the prefix ordering, saved. The
request id is the line's id, which is also the request id the line was sent with: a line re-run after
a crash is one ledger row (the ledger keeps one row per tenant and request id).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cache.billing.pricing import (
    ExplicitOutcome,
    LineItem,
    bill,
    prices_from_config,
    rules_from_config,
    usage_from_response,
)
from config.billing import BillingConfig


def line_item(
    answer: Any,
    *,
    cfg: BillingConfig,
    tenant: str,
    model: str,
    request_id: str,
    ts_ms: int,
    index_cached_tokens: int | None = None,
    explicit: ExplicitOutcome | None = None,
) -> LineItem | None:
    """The line item of one batch answer (an OpenAI response body); None when it carries no usage."""
    usage = answer.get("usage") if isinstance(answer, Mapping) else None
    if not isinstance(usage, Mapping):
        return None
    return bill(
        usage_from_response(usage, index_cached_tokens),
        prices_from_config(cfg, model),
        rules_from_config(cfg, model),
        explicit,
        "batch",
        request_id=request_id,
        tenant=tenant,
        model=model,
        ts_ms=ts_ms,
        price_factor_bp=cfg.batch_price_factor_bp,
    )
