"""Findings: a snapshot of one (tenant, model) priced with that model's billing rules and prices.

Every estimate is "what the same traffic would have cost with the change", from the tenant's own
counters, in token-equivalents at list price (a token billed at ``p`` % counts ``p / 100``) and in
micro-units of the policy currency. Per request first (averaged over all observed requests), then per
day at the observed rate. The rules and prices come from ``config/billing.py`` through
``cache.billing.pricing.Rules`` / ``ModelPrices``; no percentage is written here.

Kinds (docs/advisor.md has the arithmetic):

- ``variable_prefix``: a stable span sits after content that varies (a timestamp, an id): it is never
  inside the repeatable prefix. Moving the variable part after it makes the span cached:
  ``share × uncovered × tokens × (100 - implicit_cached_pct) %``.
- ``fixed_tail``: the same, for a stable span that ends the prompt after variable content (rules after
  the user's input): move it before the variable content.
- ``explicit_would_pay``: no ``cache_control`` today, and marking the prefix the tenant reuses would
  cost less than implicit caching: reads (reused within the TTL) at ``explicit_hit_pct`` instead of
  ``implicit_cached_pct``, creations at ``explicit_create_pct`` instead of 100 % (new) or
  ``implicit_cached_pct`` (reused after the TTL: a replica may still hold it). The prefix length with the
  largest saving from ``explicit_min_tokens`` up is chosen.
- ``explicit_loses``: the tenant's marked prefixes cost more than implicit caching would (used once:
  created at 125 % and never read; reused only after the TTL): remove the markers.
- ``explicit_below_minimum``: markers on prefixes shorter than ``explicit_min_tokens`` have no effect.
- ``below_implicit_minimum``: prompts shorter than ``implicit_min_tokens`` whose prefix repeats: the
  replica serves it from cache, the tenant is billed in full. Nothing to reorder: the saving is 0 and
  ``forgone`` says what the discount would have been.

Implicit caching is assumed to hit whenever the prefix was seen before (the replica held it): the
explicit verdicts are therefore conservative for ``cache_control``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from cache.advisor.sketch import Snapshot, Span
from cache.billing.pricing import ModelPrices, Rules

Kind = Literal[
    "variable_prefix",
    "fixed_tail",
    "explicit_would_pay",
    "explicit_loses",
    "explicit_below_minimum",
    "below_implicit_minimum",
]
KINDS: tuple[str, ...] = (
    "variable_prefix",
    "fixed_tail",
    "explicit_would_pay",
    "explicit_loses",
    "explicit_below_minimum",
    "below_implicit_minimum",
)
DAY_S = 86_400.0
MIN_RATE_WINDOW_S = 60.0  # a rate is never extrapolated from less than a minute


@dataclass(frozen=True, slots=True)
class Where:
    message: int | None  # -1: the tools header; None: the prefix spans several messages
    role: str | None
    tokens: tuple[int, int]  # from the prompt's start
    message_tokens: tuple[int, int] | None = None  # from the message's start
    moves: bool = False  # the span's offset differs between requests (after variable-length content)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "role": self.role,
            "tokens": list(self.tokens),
            "message_tokens": list(self.message_tokens) if self.message_tokens else None,
            "moves": self.moves,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    tenant: str
    model: str
    kind: str
    where: Where
    share: float  # requests concerned / observed requests
    requests_per_day: float
    saving_tokens_per_request: float  # token-equivalents at list price
    saving_micros_per_request: float
    currency: str
    advice: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def saving_tokens_per_day(self) -> float:
        return self.saving_tokens_per_request * self.requests_per_day

    @property
    def saving_micros_per_day(self) -> float:
        return self.saving_micros_per_request * self.requests_per_day

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "kind": self.kind,
            "where": self.where.to_dict(),
            "share": round(self.share, 4),
            "requests_per_day": round(self.requests_per_day, 1),
            "saving": {
                "tokens_per_request": round(self.saving_tokens_per_request, 2),
                "micros_per_request": round(self.saving_micros_per_request, 3),
                "tokens_per_day": round(self.saving_tokens_per_day),
                "micros_per_day": round(self.saving_micros_per_day),
                "currency": self.currency,
            },
            "advice": self.advice,
            **({"detail": self.detail} if self.detail else {}),
        }


@dataclass(frozen=True, slots=True)
class Pricing:
    """What findings need beyond the snapshot: the model's rules and prices, and the thresholds."""

    rules: Rules
    prices: ModelPrices
    sample_rate: float
    min_requests: int
    min_saving_pct: float


def requests_per_day(snap: Snapshot, sample_rate: float) -> float:
    """Observed requests scaled by the sampling rate, per day over the snapshot's duration."""
    if snap.requests == 0 or sample_rate <= 0:
        return 0.0
    return snap.requests / sample_rate * DAY_S / max(snap.duration_s, MIN_RATE_WINDOW_S)


def _tok(n: float) -> str:
    return f"{round(n):,}"


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


class _Pricer:
    def __init__(self, snap: Snapshot, p: Pricing):
        self.snap, self.p = snap, p
        self.rpd = requests_per_day(snap, p.sample_rate)
        self.avg_prompt = snap.prompt_tokens / snap.requests if snap.requests else 0.0
        self.threshold = self.avg_prompt * p.min_saving_pct / 100

    def micros(self, token_equiv: float) -> float:
        return token_equiv * self.p.prices.input_micros_per_1m / 1_000_000

    def finding(
        self, kind: str, where: Where, share: float, saving_tokens: float, advice: str, **detail: Any
    ) -> Finding:
        return Finding(
            tenant=self.snap.tenant,
            model=self.snap.model,
            kind=kind,
            where=where,
            share=share,
            requests_per_day=self.rpd,
            saving_tokens_per_request=saving_tokens,
            saving_micros_per_request=self.micros(saving_tokens),
            currency=self.p.prices.currency,
            advice=advice,
            detail=detail,
        )

    def per_day(self, token_equiv: float) -> str:
        return f"{_tok(token_equiv * self.rpd)} tokens/day ({self.micros(token_equiv) * self.rpd / 1e6:,.2f} {self.p.prices.currency}/day)"


def price(snap: Snapshot, p: Pricing) -> list[Finding]:
    """The findings of one snapshot, largest saving first. None below ``min_requests``."""
    if snap.requests < p.min_requests:
        return []
    pr = _Pricer(snap, p)
    out = [f for span in snap.spans if (f := _span_finding(pr, span)) is not None]
    out += _explicit_findings(pr)
    short = _short_finding(pr)
    if short is not None:
        out.append(short)
    out.sort(key=lambda f: (-f.saving_micros_per_request, -f.saving_tokens_per_request))
    return out


def _span_finding(pr: _Pricer, span: Span) -> Finding | None:
    rules, snap = pr.p.rules, pr.snap
    eligible = 1.0 if span.end >= rules.implicit_min_tokens else snap.long_requests / snap.requests
    moved = span.share * span.uncovered * span.tokens * eligible  # tokens that would become cached
    saving = moved * (100 - rules.implicit_cached_pct) / 100
    if saving <= 0 or saving < pr.threshold:
        return None
    msg = "the tools header" if span.message < 0 else f"message {span.message}, {span.role}"
    rng = f"tokens {_tok(span.start)}–{_tok(span.end)} ({msg}"
    rng += f", starting as late as token {_tok(span.start_max)})" if span.moves else ")"
    where = Where(
        span.message,
        span.role,
        (span.start, span.end),
        (span.message_start, span.message_start + span.tokens),
        span.moves,
    )
    cached = min(snap.stable_prefix_tokens, span.start)
    if span.tail <= snap.block_size * 2 and span.start > cached:
        return pr.finding(
            "fixed_tail",
            where,
            span.share,
            saving,
            f"{rng} repeat in {_pct(span.share)} of requests but come last, after content that varies "
            f"(the repeated prefix ends at token {_tok(cached)}); moving them before the variable "
            f"content (e.g. into the system message) would save {pr.per_day(saving)}",
            variable_tokens=[cached, span.start_max],
            tail_tokens=span.tail,
        )
    return pr.finding(
        "variable_prefix",
        where,
        span.share,
        saving,
        f"tokens {_tok(cached)}–{_tok(span.start)} vary; {rng} repeat in {_pct(span.share)} of requests "
        f"but are never inside a cached prefix; moving the variable part after them would save "
        f"{pr.per_day(saving)}",
        variable_tokens=[cached, span.start],
    )


def _message_at(snap: Snapshot, token: int) -> tuple[int | None, str | None]:
    """The message of the last stable chunk starting at or before ``token`` (None when there is none)."""
    found: tuple[int | None, str | None] = (None, None)
    for start, _length, message, role in snap.landmarks:
        if start > token:
            break
        found = (message, role)
    return found


def _explicit_findings(pr: _Pricer) -> list[Finding]:
    snap, r = pr.snap, pr.p.rules
    m = snap.marked
    out: list[Finding] = []
    if m.below_requests and m.below_requests >= snap.requests * 0.01:
        out.append(
            pr.finding(
                "explicit_below_minimum",
                Where(None, None, (0, round(m.below_tokens / m.below_requests))),
                m.below_requests / snap.requests,
                0.0,
                f"{_pct(m.below_requests / snap.requests)} of requests mark a prefix of about "
                f"{_tok(m.below_tokens / m.below_requests)} tokens, below the {_tok(r.explicit_min_tokens)}-token "
                "minimum: the markers have no effect (billed as implicit caching)",
            )
        )
    if m.requests:
        marked = m.hit_tokens + m.new_tokens + m.stale_tokens
        explicit = (
            m.hit_tokens * r.explicit_hit_pct
            + (m.new_tokens + m.stale_tokens) * r.explicit_create_pct
            + (m.prompt_tokens - marked) * 100
        )
        implicit = m.repeat_tokens * r.implicit_cached_pct + (m.prompt_tokens - m.repeat_tokens) * 100
        loss = (explicit - implicit) / 100 / snap.requests
        if loss > 0 and loss >= pr.threshold:
            reason = "used_once" if m.new_tokens >= m.stale_tokens else "reused_after_ttl"
            why = (
                "most marked prefixes are used once (created, never read)"
                if reason == "used_once"
                else f"marked prefixes come back only after the {r.explicit_ttl_s:.0f} s TTL (created again)"
            )
            out.append(
                pr.finding(
                    "explicit_loses",
                    Where(None, None, (0, round(marked / m.requests))),
                    m.requests / snap.requests,
                    loss,
                    f"cache_control costs more than it saves: {why}; created at {r.explicit_create_pct} %, "
                    f"read at {r.explicit_hit_pct} % against {r.implicit_cached_pct} % for implicit caching; "
                    f"removing the markers would save {pr.per_day(loss)}",
                    reason=reason,
                    read_share=round(m.hit_tokens / marked, 4) if marked else 0.0,
                )
            )
        return out
    best = _best_explicit_prefix(snap, r)
    if best is not None:
        blocks, gain, share_within = best
        length = blocks * snap.block_size
        if gain > 0 and gain >= pr.threshold:
            message, role = _message_at(snap, length - 1)
            out.append(
                pr.finding(
                    "explicit_would_pay",
                    Where(message, role, (0, length)),
                    snap.reach[blocks - 1] / snap.requests,
                    gain,
                    f"the first {_tok(length)} tokens are reused within {r.explicit_ttl_s:.0f} s by "
                    f"{_pct(share_within)} of the requests that reach them; marking them with cache_control "
                    f"(read at {r.explicit_hit_pct} % instead of {r.implicit_cached_pct} %, created at "
                    f"{r.explicit_create_pct} %) would save {pr.per_day(gain)}",
                )
            )
    return out


def _best_explicit_prefix(snap: Snapshot, r: Rules) -> tuple[int, float, float] | None:
    """(blocks, token-equivalent gain per request, share read within the TTL) of the best prefix."""
    first = -(-r.explicit_min_tokens // snap.block_size)
    best: tuple[int, float, float] | None = None
    for k in range(first, len(snap.reach) + 1):
        n, rep, win = snap.reach[k - 1], snap.repeat[k - 1], snap.within_ttl[k - 1]
        if n == 0:
            break
        per_token = (
            win * (r.implicit_cached_pct - r.explicit_hit_pct)
            - (rep - win) * (r.explicit_create_pct - r.implicit_cached_pct)
            - (n - rep) * (r.explicit_create_pct - 100)
        )
        gain = k * snap.block_size * per_token / 100 / snap.requests
        if best is None or gain > best[1]:
            best = (k, gain, win / n)
    return best


def _short_finding(pr: _Pricer) -> Finding | None:
    snap, r = pr.snap, pr.p.rules
    if not snap.short_repeat_tokens or snap.short_requests < snap.requests * pr.p.min_saving_pct / 100:
        return None
    forgone = snap.short_repeat_tokens * (100 - r.implicit_cached_pct) / 100 / snap.requests
    if forgone < pr.threshold:
        return None
    avg_cached = snap.short_repeat_tokens / snap.short_requests
    return pr.finding(
        "below_implicit_minimum",
        Where(None, None, (0, round(avg_cached))),
        snap.short_requests / snap.requests,
        0.0,
        f"{_pct(snap.short_requests / snap.requests)} of requests are shorter than "
        f"{_tok(r.implicit_min_tokens)} tokens: their repeated prefix (about {_tok(avg_cached)} tokens) is "
        f"served from the replica's cache but never billed at {r.implicit_cached_pct} % (it would be "
        f"{pr.per_day(forgone)}); nothing to reorder",
        forgone_tokens_per_request=round(forgone, 2),
        forgone_micros_per_day=round(pr.micros(forgone) * pr.rpd),
    )
