"""Billing ledger: the interface both stores implement, and the query/report maths they share.

A ledger keeps one row per (tenant, request id): ``record`` returns True when the row was inserted,
False when that request was already recorded (a retried write never counts twice). ``query`` sums rows
by any of ``tenant``, ``model``, ``day`` (UTC) and ``source``, over ``[since, until)``.

Implementations: ``cache.billing.ledger_sqlite.SqliteLedger`` (embedded, one file) and
``cache.billing.ledger_redis.RedisLedger`` (shared by pods); ``cache.billing.ledgers.open_ledger`` builds
the configured one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Protocol

from cache.billing.pricing import KINDS, KindCounts, LineItem

GROUP_KEYS: tuple[str, ...] = ("tenant", "model", "day", "source")
DAY_MS = 86_400_000

TimeArg = datetime | float | int | None


class LedgerRangeUnavailable(Exception):
    """The asked period needs line items the ledger no longer keeps (e.g. a trimmed Redis stream)."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Sums over the rows of one group. Group fields not in ``group_by`` are None."""

    tenant: str | None
    model: str | None
    day: str | None
    source: str | None
    requests: int
    tokens: KindCounts
    micros: KindCounts
    cost_micros: int
    cost_without_cache_micros: int
    estimated: int = 0  # of ``requests``, rows whose tokens the gateway estimated (``usage_estimated``)

    @property
    def saved_micros(self) -> int:
        return self.cost_without_cache_micros - self.cost_micros

    @property
    def saving_rate(self) -> float:
        """Share of the no-cache cost that caching saved (0.0 when nothing was priced)."""
        if self.cost_without_cache_micros <= 0:
            return 0.0
        return self.saved_micros / self.cost_without_cache_micros

    @property
    def input_tokens_computed(self) -> int:
        """Input tokens the fleet prefilled or read from its KV cache (upstream requests only)."""
        t = self.tokens
        return t.uncached + t.implicit_hit + t.explicit_create + t.explicit_hit

    @property
    def served_tokens(self) -> int:
        """Tokens answered from the response cache or a coalesced leader: no GPU work for them."""
        return self.tokens.served_input + self.tokens.served_output

    def to_dict(self) -> dict[str, object]:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "day": self.day,
            "source": self.source,
            "requests": self.requests,
            "estimated": self.estimated,
            "tokens": self.tokens.as_dict(),
            "micros": self.micros.as_dict(),
            "cost_micros": self.cost_micros,
            "cost_without_cache_micros": self.cost_without_cache_micros,
            "saved_micros": self.saved_micros,
            "saving_rate": self.saving_rate,
        }


@dataclass(slots=True)
class Sums:
    """Mutable accumulator behind a ``UsageRow``."""

    requests: int = 0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    micros: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    cost_micros: int = 0
    cost_without_cache_micros: int = 0
    estimated: int = 0

    def add_item(self, item: LineItem) -> None:
        self.requests += 1
        self.estimated += item.usage_estimated
        for k in KINDS:
            self.tokens[k] += getattr(item.tokens, k)
            self.micros[k] += getattr(item.micros, k)
        self.cost_micros += item.total_micros
        self.cost_without_cache_micros += item.cost_without_cache_micros

    def add(self, other: Sums) -> None:
        self.requests += other.requests
        self.estimated += other.estimated
        for k in KINDS:
            self.tokens[k] += other.tokens[k]
            self.micros[k] += other.micros[k]
        self.cost_micros += other.cost_micros
        self.cost_without_cache_micros += other.cost_without_cache_micros


GroupKey = tuple[str | None, str | None, str | None, str | None]  # tenant, model, day, source


def check_group_by(group_by: Sequence[str]) -> tuple[str, ...]:
    if isinstance(group_by, str):
        group_by = (group_by,)
    bad = [g for g in group_by if g not in GROUP_KEYS]
    if bad:
        raise ValueError(f"group_by accepts {GROUP_KEYS}, got {bad}")
    return tuple(group_by)


def group_key(group_by: Sequence[str], tenant: str, model: str, day: str, source: str) -> GroupKey:
    return (
        tenant if "tenant" in group_by else None,
        model if "model" in group_by else None,
        day if "day" in group_by else None,
        source if "source" in group_by else None,
    )


def rows_from_sums(acc: dict[GroupKey, Sums]) -> list[UsageRow]:
    """Rows sorted by their group key (None first)."""

    def order(k: GroupKey) -> tuple[str, ...]:
        return tuple("" if v is None else v for v in k)

    return [
        UsageRow(
            tenant=key[0],
            model=key[1],
            day=key[2],
            source=key[3],
            requests=s.requests,
            tokens=KindCounts.from_mapping(s.tokens),
            micros=KindCounts.from_mapping(s.micros),
            cost_micros=s.cost_micros,
            cost_without_cache_micros=s.cost_without_cache_micros,
            estimated=s.estimated,
        )
        for key, s in sorted(acc.items(), key=lambda kv: order(kv[0]))
    ]


def to_ms(t: TimeArg) -> int | None:
    """A datetime (naive = UTC) or epoch seconds to epoch milliseconds."""
    if t is None:
        return None
    if isinstance(t, datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=UTC)
        return int(t.timestamp() * 1000)
    return int(t * 1000)


def day_of(ts_ms: int) -> str:
    """UTC calendar day of an epoch-ms time, ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC).date().isoformat()


def day_number(day: str) -> int:
    """Days since 1970-01-01 of a ``YYYY-MM-DD`` day."""
    return (date.fromisoformat(day) - date(1970, 1, 1)).days


def in_range(ts_ms: int, since_ms: int | None, until_ms: int | None) -> bool:
    return (since_ms is None or ts_ms >= since_ms) and (until_ms is None or ts_ms < until_ms)


@dataclass(frozen=True, slots=True)
class Query:
    """One usage query, checked and converted once: what each ledger's ``query`` starts from."""

    tenant: str | None
    model: str | None
    since_ms: int | None
    until_ms: int | None
    group_by: tuple[str, ...]

    @classmethod
    def of(
        cls,
        tenant: str | None = None,
        model: str | None = None,
        since: TimeArg = None,
        until: TimeArg = None,
        group_by: Sequence[str] = ("tenant", "model"),
    ) -> Query:
        return cls(tenant, model, to_ms(since), to_ms(until), check_group_by(group_by))

    def selects(self, tenant: str, model: str) -> bool:
        return (self.tenant is None or tenant == self.tenant) and (self.model is None or model == self.model)

    def add(
        self, acc: dict[GroupKey, Sums], item: LineItem, since_ms: int | None, until_ms: int | None
    ) -> None:
        """Count ``item`` in its group if the query (within ``[since_ms, until_ms)``) selects it."""
        if self.selects(item.tenant, item.model) and in_range(item.ts_ms, since_ms, until_ms):
            key = group_key(self.group_by, item.tenant, item.model, day_of(item.ts_ms), item.source)
            acc.setdefault(key, Sums()).add_item(item)


def aggregate(
    items: Iterable[LineItem],
    *,
    tenant: str | None = None,
    model: str | None = None,
    since: TimeArg = None,
    until: TimeArg = None,
    group_by: Sequence[str] = ("tenant", "model"),
) -> list[UsageRow]:
    """The reference query over line items in memory (tests compare the ledgers with it)."""
    q = Query.of(tenant, model, since, until, group_by)
    acc: dict[GroupKey, Sums] = {}
    for it in items:
        q.add(acc, it, q.since_ms, q.until_ms)
    return rows_from_sums(acc)


FLEET_SOURCES: tuple[str, ...] = ("upstream", "batch")
"""Rows of a generation a replica ran: what a replica's own token counters count."""
ESTIMATED_IDS_MAX = 100  # request ids of estimated rows named per replica in a reconciliation


@dataclass(slots=True)
class ReplicaTotals:
    """A replica's rows over a period (``upstream`` and ``batch``), for reconciliation with its
    counters: prompt and generated tokens, and apart, the rows whose tokens the gateway estimated."""

    model: str
    replica: str | None  # None: rows written before rows carried their replica
    rows: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    estimated_rows: int = 0
    estimated_prompt_tokens: int = 0
    estimated_output_tokens: int = 0
    estimated_ids: list[str] = field(default_factory=list)  # the first ``ESTIMATED_IDS_MAX``

    def add(self, request_id: str, prompt: int, output: int, estimated: bool) -> None:
        self.rows += 1
        self.prompt_tokens += prompt
        self.output_tokens += output
        if estimated:
            self.estimated_rows += 1
            self.estimated_prompt_tokens += prompt
            self.estimated_output_tokens += output
            if len(self.estimated_ids) < ESTIMATED_IDS_MAX:
                self.estimated_ids.append(request_id)


def prompt_of(tokens: KindCounts) -> int:
    """The prompt tokens a fleet row was billed for (every input kind a replica handled)."""
    return tokens.uncached + tokens.implicit_hit + tokens.explicit_create + tokens.explicit_hit


def add_replica_row(acc: dict[tuple[str, str | None], ReplicaTotals], item: LineItem) -> None:
    """Count a fleet row in its (model, replica)'s totals; other sources are no replica's work."""
    if item.source not in FLEET_SOURCES:
        return
    key = (item.model, item.replica_id)
    totals = acc.get(key)
    if totals is None:
        totals = acc[key] = ReplicaTotals(item.model, item.replica_id)
    totals.add(item.request_id, prompt_of(item.tokens), item.tokens.output, item.usage_estimated)


def replica_totals_of(items: Iterable[LineItem], lo: int | None, hi: int | None) -> list[ReplicaTotals]:
    """The reference ``replica_totals`` over line items in memory (``[lo, hi)``, epoch ms)."""
    acc: dict[tuple[str, str | None], ReplicaTotals] = {}
    for it in items:
        if in_range(it.ts_ms, lo, hi):
            add_replica_row(acc, it)
    return sorted_totals(acc)


def sorted_totals(acc: dict[tuple[str, str | None], ReplicaTotals]) -> list[ReplicaTotals]:
    return [acc[k] for k in sorted(acc, key=lambda k: (k[0], k[1] or ""))]


class Ledger(Protocol):
    async def record(self, item: LineItem) -> bool: ...

    async def query(
        self,
        tenant: str | None = None,
        model: str | None = None,
        since: TimeArg = None,
        until: TimeArg = None,
        group_by: Sequence[str] = ("tenant", "model"),
    ) -> list[UsageRow]: ...

    async def replica_totals(self, since_ms: int | None, until_ms: int | None) -> list[ReplicaTotals]:
        """Fleet rows written in ``[since_ms, until_ms)`` (epoch ms), by (model, replica)."""
        ...

    async def close(self) -> None: ...
