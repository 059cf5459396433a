"""Usage reconciliation: the ledger's tokens per replica against the replica's own counters.

``reconcile`` answers ``GET /admin/usage/reconcile`` (and so ``prefix-gateway usage --reconcile``):
the counters live in the running gateway's scrape (``gateway.fleet.counters``), not in any file, so
the command asks the gateway rather than opening the ledger itself. ``reconcile_loop`` checks each
window as it completes: the drift of every replica and kind is the gauge
``prefix_gateway_usage_drift_tokens``; one above ``billing.reconcile.drift_threshold_pct`` is a warning
(``usage_drift``, no tenant, no prompt: ids and counts only) and counts in
``prefix_gateway_usage_drift_exceeded_total``. The ledger is read once per distinct span (every
replica of a scrape round shares the round's time), through its time index (SQLite) or the stream
(Redis): a window is minutes of rows, not days. Both receive what they read (the ledger, the counters,
the reconcile settings: a getter in the loop, since a reload may change them), not the ``Process``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cache.billing.ledger import Ledger, ReplicaTotals
from gateway.fleet.counters import CounterLog, Key, Reading, compare

if TYPE_CHECKING:
    from config.billing import ReconcileConfig
    from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("prefix_gateway")

KINDS = ("prompt_tokens", "generation_tokens")


def _summed(lines: list[dict[str, Any]], field: str) -> dict[str, int]:
    out = dict.fromkeys(KINDS, 0)
    for line in lines:
        part = line.get(field)
        if isinstance(part, dict):
            for k in KINDS:
                out[k] += int(part[k])
    return out


async def reconcile(
    ledger: Ledger, counters: CounterLog, cfg: ReconcileConfig, since_ms: int | None, until_ms: int | None
) -> dict[str, Any]:
    """Every replica with counters or rows: counted, billed, estimated rows (named), drift."""
    spans: dict[Key, tuple[Reading, Reading]] = {}
    for key in counters.replicas():
        span = counters.span(key, since_ms, until_ms)
        if span is not None:
            spans[key] = span
    billed: dict[tuple[int, int], dict[tuple[str, str | None], ReplicaTotals]] = {}
    for start, end in set(spans.values()):
        rows = await ledger.replica_totals(start.ts_ms, end.ts_ms)
        billed[(start.ts_ms, end.ts_ms)] = {(t.model, t.replica): t for t in rows}
    lo = min((s.ts_ms for s, _ in spans.values()), default=since_ms)
    hi = max((e.ts_ms for _, e in spans.values()), default=until_ms)
    lines = []
    for key, (start, end) in sorted(spans.items()):
        lines.append(
            compare(key, start, end, billed[(start.ts_ms, end.ts_ms)].get(key), cfg.drift_threshold_pct)
        )
    # Rows of replicas without counters over the whole span (one not scraped, one that exports none,
    # one gone), and rows written before rows carried their replica.
    unattributed: dict[str, Any] | None = None
    for t in await ledger.replica_totals(lo, hi):
        if t.replica is None:
            unattributed = compare((t.model, "-"), None, None, t, cfg.drift_threshold_pct)
            unattributed["replica"] = None
        elif (t.model, t.replica) not in spans:
            lines.append(compare((t.model, t.replica), None, None, t, cfg.drift_threshold_pct))
    counted = [line for line in lines if line["drift"] is not None]
    return {
        "since_ms": lo,
        "until_ms": hi,
        "window_s": cfg.window_s,
        "drift_threshold_pct": cfg.drift_threshold_pct,
        "replicas": lines,
        "unattributed": unattributed,
        "totals": {
            "replica_counters": _summed(counted, "replica_counters"),
            "ledger": _summed(counted, "ledger"),
            "estimated": {
                **_summed(counted, "estimated"),
                "rows": sum(line["estimated"]["rows"] for line in counted),
            },
            "drift": _summed(counted, "drift"),
        },
        "exceeded": any(line["exceeded"] for line in lines),
    }


async def check_windows(
    ledger: Ledger, counters: CounterLog, cfg: ReconcileConfig, m: GatewayMetrics, checked: dict[Key, int]
) -> None:
    """Reconcile each replica's last complete window not checked yet: gauge, warning, counter."""
    cache: dict[tuple[int, int], dict[tuple[str, str | None], ReplicaTotals]] = {}
    for key in counters.replicas():
        window = counters.last_window(key)
        if window is None or checked.get(key) == window[1].ts_ms:
            continue
        start, end = window
        span = (start.ts_ms, end.ts_ms)
        if span not in cache:
            cache[span] = {(t.model, t.replica): t for t in await ledger.replica_totals(*span)}
        line = compare(key, start, end, cache[span].get(key), cfg.drift_threshold_pct)
        checked[key] = end.ts_ms
        if line["drift"] is None:
            continue
        model, replica = key
        for kind in KINDS:
            m.child(m.usage_drift, model, replica, kind).set(line["drift"][kind])
        if line["exceeded"]:
            for kind in KINDS:
                share = line["drift_pct"][kind]
                if share is None or share > cfg.drift_threshold_pct:
                    m.child(m.usage_drift_exceeded, model, replica, kind).inc()
            log.warning(
                "usage drift above the threshold: the replica's counters and the ledger disagree",
                extra={
                    "event": "usage_drift",
                    "model": model,
                    "replica": replica,
                    "since_ms": start.ts_ms,
                    "until_ms": end.ts_ms,
                    "drift": line["drift"],
                    "drift_pct": line["drift_pct"],
                    "replica_counters": line["replica_counters"],
                    "ledger": line["ledger"],
                    "estimated_rows": line["estimated"]["rows"],
                    "threshold_pct": cfg.drift_threshold_pct,
                },
            )


async def reconcile_loop(
    ledger: Ledger, counters: CounterLog, cfg: Callable[[], ReconcileConfig], metrics: GatewayMetrics
) -> None:
    """Check the windows completed since the last pass, several times a window (a window is complete
    once the scrape has read its closing edge)."""
    checked: dict[Key, int] = {}
    while True:
        await asyncio.sleep(max(0.5, cfg().window_s / 4))
        try:
            await check_windows(ledger, counters, cfg(), metrics, checked)
        except Exception as exc:  # a ledger away (Redis): the next pass tries again
            log.warning(
                "usage reconciliation could not read the ledger",
                extra={"event": "usage_reconcile_failed", "error": type(exc).__name__},
            )
