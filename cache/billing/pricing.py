"""Prompt-cache billing rules: pure functions from a request's usage to a priced line item.

No I/O here. The gateway gathers a ``RequestUsage`` (from the replica's ``usage`` or its own prefix
index), an optional ``ExplicitOutcome`` (from ``cache.billing.explicit``), and calls ``bill``; the resulting
``LineItem`` goes to a ledger and, optionally, into response headers.

Money is integer micro-units of the policy currency. Each kind of tokens is priced once, exactly:
``amount = tokens * price_micros_per_1M * pct / (1_000_000 * 100)`` rounded half-up to a whole micro;
the total is the sum of the rounded amounts, so a line item always adds up. See docs/billing.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from operator import attrgetter
from typing import Any, Literal

from config.billing import BillingConfig, RulesConfig

Source = Literal["upstream", "batch", "response_cache", "coalesced"]
CachedSource = Literal["replica", "gateway_index", "none"]
ExplicitKind = Literal["created", "hit"]

# Where a request's answer came from. A semantic-cache hit is billed by the response cache's rules; the
# ledger keeps it apart so that savings can be reported per cache layer.
SOURCES: tuple[str, ...] = ("upstream", "batch", "response_cache", "semantic_cache", "coalesced")
SERVED: tuple[str, ...] = ("response_cache", "semantic_cache", "coalesced")
"""``batch``: a line of an offline batch, run by the fleet and priced like ``upstream`` (same implicit and
explicit rules) times the policy's ``batch_price_factor``."""
KINDS: tuple[str, ...] = (
    "uncached",
    "implicit_hit",
    "explicit_create",
    "explicit_hit",
    "output",
    "served_input",
    "served_output",
)
"""Token kinds. The first five are tokens the fleet handled for this request (``output`` was generated,
``implicit_hit``/``explicit_hit`` were read from a KV cache); ``served_*`` are tokens answered from the
response cache or a coalesced leader: served to the client, computed by nobody for this request."""

_KIND_VALUES = attrgetter(*KINDS)
"""A ``KindCounts``'s values in ``KINDS`` order, in one C call: ``total`` and ``as_dict`` run twice a
request, and a generator of ``getattr`` was 23 of its ~1,000 Python calls (``bench.profile --calls``)."""

_DENOMINATOR = 1_000_000 * 100  # per 1M tokens, percent
FULL_PRICE_BP = 10_000  # a price factor of 1, in basis points


@dataclass(frozen=True, slots=True)
class KindCounts:
    """One integer per token kind (used both for tokens and for micros)."""

    uncached: int = 0
    implicit_hit: int = 0
    explicit_create: int = 0
    explicit_hit: int = 0
    output: int = 0
    served_input: int = 0
    served_output: int = 0

    def total(self) -> int:
        return sum(_KIND_VALUES(self))

    def as_dict(self) -> dict[str, int]:
        return dict(zip(KINDS, _KIND_VALUES(self), strict=True))

    @classmethod
    def from_mapping(cls, m: Mapping[str, int]) -> KindCounts:
        return cls(**{k: int(m.get(k, 0)) for k in KINDS})


@dataclass(frozen=True, slots=True)
class RequestUsage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    cached_source: CachedSource = "none"
    estimated: bool = False
    """The replica sent no usage (the client left, the stream broke off): the gateway's own counts."""


@dataclass(frozen=True, slots=True)
class ModelPrices:
    input_micros_per_1m: int
    output_micros_per_1m: int
    currency: str = "USD"
    price_version: str = "default"


_DEFAULT_RULES = RulesConfig()  # the documented rules: one source for their defaults


@dataclass(frozen=True, slots=True)
class Rules:
    implicit_cached_pct: int = _DEFAULT_RULES.implicit_cached_pct
    implicit_min_tokens: int = _DEFAULT_RULES.implicit_min_tokens
    explicit_create_pct: int = _DEFAULT_RULES.explicit_create_pct
    explicit_hit_pct: int = _DEFAULT_RULES.explicit_hit_pct
    explicit_ttl_s: float = _DEFAULT_RULES.explicit_ttl_s
    explicit_min_tokens: int = _DEFAULT_RULES.explicit_min_tokens
    max_markers: int = _DEFAULT_RULES.max_markers
    response_cache_input_pct: int = _DEFAULT_RULES.response_cache_input_pct
    response_cache_output_pct: int = _DEFAULT_RULES.response_cache_output_pct
    coalesced_input_pct: int = _DEFAULT_RULES.coalesced_input_pct
    coalesced_output_pct: int = _DEFAULT_RULES.coalesced_output_pct


@dataclass(frozen=True, slots=True)
class ExplicitOutcome:
    """What the explicit registry said about the request's marked prefix."""

    prefix_tokens: int
    kind: ExplicitKind


@dataclass(frozen=True, slots=True)
class LineItem:
    request_id: str
    tenant: str
    model: str
    ts_ms: int
    source: str
    cached_source: str
    currency: str
    price_version: str
    tokens: KindCounts
    micros: KindCounts
    total_micros: int
    cost_without_cache_micros: int
    reported_cached_tokens: int = 0
    """Cached tokens the replica/index reported, recorded even when not discounted (short prompts)."""
    client_request_id: str | None = None
    """The client's own ``x-request-id``, kept for reconciliation; ``request_id`` (the gateway's id
    of the generation) is the row's key, so a client cannot merge generations by reusing its id."""
    usage_estimated: bool = False
    """The tokens are the gateway's estimate (prompt by its tokenizer, output by the stream events
    relayed), not the replica's usage: the client went away or the stream broke off before it came.
    Rows written before this field read as False."""
    replica_id: str | None = None
    """The policy's id of the replica that ran the generation (``upstream`` and ``batch`` rows), which
    usage reconciliation compares with that replica's own counters; None for a served answer and for
    rows written before this field."""

    @property
    def saved_micros(self) -> int:
        return self.cost_without_cache_micros - self.total_micros

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["tokens"] = self.tokens.as_dict()
        d["micros"] = self.micros.as_dict()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LineItem:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        kw["tokens"] = KindCounts.from_mapping(d["tokens"])
        kw["micros"] = KindCounts.from_mapping(d["micros"])
        return cls(**kw)


def price_micros(tokens: int, micros_per_1m: int, pct: int, factor_bp: int = FULL_PRICE_BP) -> int:
    """``tokens * micros_per_1m * pct / 1e8 * factor_bp / 1e4`` in exact integers, rounded half-up once
    (all inputs >= 0). At the default factor it is exactly ``tokens * micros_per_1m * pct / 1e8``."""
    if tokens < 0 or micros_per_1m < 0 or pct < 0 or factor_bp < 0:
        raise ValueError("tokens, prices, percentages and factors must be non-negative")
    num = tokens * micros_per_1m * pct * factor_bp
    den = _DENOMINATOR * FULL_PRICE_BP
    return (2 * num + den) // (2 * den)


def explicit_eligible(prefix_tokens: int, rules: Rules) -> bool:
    """A marked prefix creates or reads an explicit entry only from ``explicit_min_tokens`` (inclusive)."""
    return prefix_tokens >= rules.explicit_min_tokens


def bill(
    usage: RequestUsage,
    prices: ModelPrices,
    rules: Rules,
    explicit: ExplicitOutcome | None,
    source: str,
    *,
    request_id: str,
    tenant: str,
    model: str,
    ts_ms: int,
    client_request_id: str | None = None,
    price_factor_bp: int = FULL_PRICE_BP,
    replica_id: str | None = None,
) -> LineItem:
    """Split a request's tokens by kind and price them.

    - ``source`` ``response_cache`` / ``semantic_cache`` / ``coalesced``: all tokens are ``served_*`` at
      that source's rule (a semantic hit at the response cache's).
    - ``upstream`` and ``batch``: the rules below; ``price_factor_bp`` (basis points, a ``batch`` line
      passes ``billing.batch_price_factor``) multiplies every amount and the cost without cache alike,
      so ``saved_micros`` is what the prompt cache saved at that price.
    - explicit outcome with an eligible prefix: the prefix at create/hit pct, the rest at 100 %, no
      implicit discount (explicit and implicit are exclusive). The prefix is clamped to the prompt.
    - otherwise implicit: cached tokens (clamped to the prompt) at ``implicit_cached_pct`` when the
      prompt has at least ``implicit_min_tokens``; below, everything at 100 %.
    """
    if source not in SOURCES:
        raise ValueError(f"unknown billing source {source!r}; expected one of {SOURCES}")
    if price_factor_bp != FULL_PRICE_BP and source != "batch":
        raise ValueError("only batch lines are priced with a price factor")
    prompt = max(0, int(usage.prompt_tokens))
    completion = max(0, int(usage.completion_tokens))
    reported_cached = min(max(0, int(usage.cached_tokens)), prompt)
    p_in, p_out = prices.input_micros_per_1m, prices.output_micros_per_1m
    tok: dict[str, int] = dict.fromkeys(KINDS, 0)
    amt: dict[str, int] = dict.fromkeys(KINDS, 0)

    f = price_factor_bp
    if source in SERVED:
        in_pct, out_pct = (
            (rules.coalesced_input_pct, rules.coalesced_output_pct)
            if source == "coalesced"
            else (rules.response_cache_input_pct, rules.response_cache_output_pct)
        )
        tok["served_input"], tok["served_output"] = prompt, completion
        amt["served_input"] = price_micros(prompt, p_in, in_pct)
        amt["served_output"] = price_micros(completion, p_out, out_pct)
    else:
        if explicit is not None and explicit_eligible(explicit.prefix_tokens, rules):
            prefix = min(explicit.prefix_tokens, prompt)
            if explicit.kind == "created":
                tok["explicit_create"] = prefix
                amt["explicit_create"] = price_micros(prefix, p_in, rules.explicit_create_pct, f)
            elif explicit.kind == "hit":
                tok["explicit_hit"] = prefix
                amt["explicit_hit"] = price_micros(prefix, p_in, rules.explicit_hit_pct, f)
            else:
                raise ValueError(f"unknown explicit outcome {explicit.kind!r}")
            tok["uncached"] = prompt - prefix
        elif prompt >= rules.implicit_min_tokens:
            tok["implicit_hit"] = reported_cached
            amt["implicit_hit"] = price_micros(reported_cached, p_in, rules.implicit_cached_pct, f)
            tok["uncached"] = prompt - reported_cached
        else:
            tok["uncached"] = prompt
        amt["uncached"] = price_micros(tok["uncached"], p_in, 100, f)
        tok["output"] = completion
        amt["output"] = price_micros(completion, p_out, 100, f)

    micros = KindCounts(**amt)
    return LineItem(
        request_id=request_id,
        tenant=tenant,
        model=model,
        ts_ms=int(ts_ms),
        source=source,
        cached_source=usage.cached_source,
        currency=prices.currency,
        price_version=prices.price_version,
        tokens=KindCounts(**tok),
        micros=micros,
        total_micros=micros.total(),
        cost_without_cache_micros=price_micros(prompt, p_in, 100, f)
        + price_micros(completion, p_out, 100, f),
        reported_cached_tokens=reported_cached,
        client_request_id=client_request_id,
        usage_estimated=usage.estimated,
        replica_id=replica_id if source not in SERVED else None,
    )


def usage_from_response(usage: Mapping[str, Any] | None, index_cached_tokens: int | None) -> RequestUsage:
    """Build ``RequestUsage`` from an OpenAI ``usage`` object.

    ``usage.prompt_tokens_details.cached_tokens`` wins when the replica reports it
    (``cached_source="replica"``); else the gateway's prefix-index estimate (``"gateway_index"``);
    else none.
    """
    usage = usage or {}
    details = usage.get("prompt_tokens_details") or {}
    replica_cached = details.get("cached_tokens") if isinstance(details, dict) else None  # parsed JSON
    prompt = int(usage.get("prompt_tokens") or 0)
    completion = int(usage.get("completion_tokens") or 0)
    if isinstance(replica_cached, int) and not isinstance(replica_cached, bool):
        return RequestUsage(prompt, completion, replica_cached, "replica")
    if index_cached_tokens is not None:
        return RequestUsage(prompt, completion, int(index_cached_tokens), "gateway_index")
    return RequestUsage(prompt, completion, 0, "none")


def rules_from_config(cfg: BillingConfig, model: str) -> Rules:
    r: RulesConfig = cfg.rules_for(model)
    return Rules(**r.model_dump())


def prices_from_config(cfg: BillingConfig, model: str) -> ModelPrices:
    p = cfg.price_for(model)
    return ModelPrices(
        input_micros_per_1m=p.input_micros_per_1m,
        output_micros_per_1m=p.output_micros_per_1m,
        currency=cfg.currency,
        price_version=cfg.price_version_for(model),
    )


def format_micros(micros: int) -> str:
    """Micros as a decimal string of currency units with six decimals (``1234567`` → ``"1.234567"``)."""
    sign, n = ("-", -micros) if micros < 0 else ("", micros)  # no ``abs``/``divmod`` calls (twice an answer)
    return f"{sign}{n // 1_000_000}.{n % 1_000_000:06d}"


def billing_headers(item: LineItem, prefix: str = "x-gateway-billing-") -> dict[str, str]:
    """Response headers describing a line item (no prompt content, only counts and money)."""
    t = item.tokens
    return {
        f"{prefix}currency": item.currency,
        f"{prefix}price-version": item.price_version,
        f"{prefix}source": item.source,
        f"{prefix}cost": format_micros(item.total_micros),
        f"{prefix}cost-without-cache": format_micros(item.cost_without_cache_micros),
        f"{prefix}input-tokens": (
            f"uncached={t.uncached};implicit_hit={t.implicit_hit};explicit_create={t.explicit_create};"
            f"explicit_hit={t.explicit_hit};served={t.served_input}"
        ),
        f"{prefix}output-tokens": str(t.output + t.served_output),
    }


def usage_extension(item: LineItem) -> dict[str, Any]:
    """A ``usage.billing`` object for the response body (or the final SSE chunk)."""
    return {
        "currency": item.currency,
        "price_version": item.price_version,
        "source": item.source,
        "cached_source": item.cached_source,
        "tokens": item.tokens.as_dict(),
        "cost_micros": item.total_micros,
        "cost_without_cache_micros": item.cost_without_cache_micros,
        "saved_micros": item.saved_micros,
    }
