"""The replicas' own token counters at window edges, and their comparison with the ledger.

The scrape (``gateway.fleet.scrape``) reads each replica's ``vllm:prompt_tokens_total`` and
``vllm:generation_tokens_total`` (SGLang: ``sglang:...``) once per round; ``CounterLog`` keeps the
latest reading of each (model, replica) and, as an edge, the first reading of every window
(``billing.reconcile.window_s``), ``windows_kept`` of them: a few kilobytes per replica, where keeping
every scrape (one a second) would be 86,400 a day. A reconciliation compares, over the span between
two readings, the counters' increase with the ledger's rows of that replica written in the same span
(``reconcile``): the drift is ``counted - billed``, per kind.

What a drift means (docs/billing.md, "Reconciliation"): positive, the replica did work no row bills
(an attempt a retry replaced after the replica had counted its prompt, another pod's requests with a
per-pod SQLite ledger, traffic that bypassed the gateway, embeddings); negative, rows bill more than
the replica counted (an estimate above what it did); either sign at a busy edge, a request the replica
counted in one window and the gateway billed in the next (its row is written when its answer ends).
A counter lower at the end than at the start is a restarted replica: no drift for that span.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from cache.billing.ledger import ReplicaTotals

Key = tuple[str, str]  # (model, replica id)


@dataclass(frozen=True, slots=True)
class Reading:
    """A replica's counters at one scrape round (``ts_ms``: the round's time, wall clock)."""

    ts_ms: int
    prompt: int
    generation: int


@dataclass(slots=True)
class _Series:
    latest: Reading
    edges: deque[Reading]


@dataclass(slots=True)
class CounterLog:
    window_s: float = 300.0
    windows_kept: int = 288
    _series: dict[Key, _Series] = field(default_factory=dict)

    def configure(self, window_s: float, windows_kept: int) -> None:
        """A reloaded policy's window; edges already kept stay (a reconciliation reads any two)."""
        self.window_s, self.windows_kept = window_s, windows_kept
        for s in self._series.values():
            if s.edges.maxlen != windows_kept:
                s.edges = deque(s.edges, maxlen=windows_kept)

    def observe(self, model: str, replica: str, ts_ms: int, prompt: int, generation: int) -> None:
        reading = Reading(ts_ms, prompt, generation)
        s = self._series.get((model, replica))
        if s is None:
            self._series[(model, replica)] = _Series(reading, deque([reading], maxlen=self.windows_kept))
            return
        s.latest = reading
        window_ms = self.window_s * 1000
        if ts_ms // window_ms > s.edges[-1].ts_ms // window_ms:
            s.edges.append(reading)

    def latest_ms(self) -> int | None:
        """The time of the latest scrape round that read any replica's counters."""
        return max((s.latest.ts_ms for s in self._series.values()), default=None)

    def replicas(self) -> list[Key]:
        return sorted(self._series)

    def readings(self, key: Key) -> list[Reading]:
        """The edges kept, then the latest reading if it is not the last edge."""
        s = self._series.get(key)
        if s is None:
            return []
        out = list(s.edges)
        if s.latest is not out[-1]:
            out.append(s.latest)
        return out

    def span(self, key: Key, since_ms: int | None, until_ms: int | None) -> tuple[Reading, Reading] | None:
        """The readings a reconciliation of ``[since, until]`` uses: from the last reading at or before
        ``since`` (the first kept when none is that old) to the last at or before ``until`` (None: the
        latest). None without two distinct readings."""
        rs = self.readings(key)
        if until_ms is not None:
            rs = [r for r in rs if r.ts_ms <= until_ms]
        if len(rs) < 2:
            return None
        end = rs[-1]
        start = rs[0]
        if since_ms is not None:
            start = next((r for r in reversed(rs) if r.ts_ms <= since_ms), rs[0])
        if start.ts_ms >= end.ts_ms:
            return None
        return start, end

    def last_window(self, key: Key) -> tuple[Reading, Reading] | None:
        """The last complete window: the last two edges."""
        s = self._series.get(key)
        if s is None or len(s.edges) < 2:
            return None
        return s.edges[-2], s.edges[-1]


def pct(drift: int, counted: int) -> float | None:
    """The drift as a share of the replica's count (None when it counted nothing but rows bill some)."""
    if counted <= 0:
        return 0.0 if drift == 0 else None
    return 100.0 * abs(drift) / counted


def compare(
    key: Key,
    start: Reading | None,
    end: Reading | None,
    billed: ReplicaTotals | None,
    threshold_pct: float,
) -> dict[str, Any]:
    """One replica's line of a reconciliation: counted, billed (estimated rows apart, named), drift."""
    model, replica = key
    b = billed or ReplicaTotals(model, replica)
    line: dict[str, Any] = {
        "model": model,
        "replica": replica,
        "since_ms": start.ts_ms if start else None,
        "until_ms": end.ts_ms if end else None,
        "ledger": {"rows": b.rows, "prompt_tokens": b.prompt_tokens, "generation_tokens": b.output_tokens},
        "estimated": {
            "rows": b.estimated_rows,
            "prompt_tokens": b.estimated_prompt_tokens,
            "generation_tokens": b.estimated_output_tokens,
            "request_ids": list(b.estimated_ids),
        },
        "replica_counters": None,
        "drift": None,
        "drift_pct": None,
        "counter_reset": False,
        "exceeded": False,
    }
    if start is None or end is None:
        return line  # no counters for this replica (not scraped, or exports none)
    counted = {
        "prompt_tokens": end.prompt - start.prompt,
        "generation_tokens": end.generation - start.generation,
    }
    if min(counted.values()) < 0:
        line["counter_reset"] = True  # the replica restarted within the span
        return line
    drift = {
        "prompt_tokens": counted["prompt_tokens"] - b.prompt_tokens,
        "generation_tokens": counted["generation_tokens"] - b.output_tokens,
    }
    shares = {k: pct(drift[k], counted[k]) for k in drift}
    line.update(
        replica_counters=counted,
        drift=drift,
        drift_pct=shares,
        exceeded=any(v is None or v > threshold_pct for v in shares.values()),
    )
    return line
