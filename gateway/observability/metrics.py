"""Every Prometheus metric of one gateway process, declared in one table, in a registry of its own
(several apps may share a process in tests).

Label values are bounded: models and replicas come from the policy or discovery, tenants from its
tenant list (others are ``other``), statuses are numbers, reasons and kinds are fixed words; never
prompt text. ``child(metric, *labels)`` caches the labelled child, so the request path does not pay
prometheus_client's label lookup (a lock and a tuple hash) for every observation.

The counters every request adds to (requests, cache outcomes, routing decisions, cache bypasses, billed
tokens and cost) are ``Tally``s: a dict of the series' values that the request path adds to in one
Python call, read by the registry at scrape time as the same counter family (``_total`` and
``_created`` per series, as prometheus_client's ``Counter`` writes them). A ``Counter`` child's ``inc``
is six calls (two observability checks, a lock's enter and exit, the value's own ``inc``) plus two for
``child``; at seven increments a request that was 56 of its ~960 Python calls (``python -m bench.profile
--calls``). A tally is written on the event loop only, so it needs no lock.

The same for the rest of what every request observes (issue 30, round 9): the in-flight gauge is a
``Level`` (a dict of series, ``add(replica, by=±1)``: one call where a ``Gauge`` child's ``inc`` and
``dec`` were 5-6 each plus ``child``), and the three per-request histograms (duration, time to first
byte, match fraction) are ``Spread``s (per series a list of bucket counts and the sum; ``observe``
is one call and a ``bisect``, where a ``Histogram`` child's was 10 plus ``child``'s 2). Together 40
of the ~720 calls a request. Each renders what its prometheus_client twin renders for the same
observations (``tests/unit/test_metrics_tally.py``).
"""

from __future__ import annotations

import bisect
import contextlib
import math
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from cache.advisor.render import GAUGE_FINDINGS, GAUGE_SAVING_MICROS, GAUGE_SAVING_TOKENS

NS = "prefix_gateway"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FRACTION_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)
STORE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class Tally(Collector):
    """A labelled counter kept as a dict of series, rendered at scrape time (see the module's doc).

    ``inc(*labels, by=1)`` adds to one series; label values are strings, as many as ``labelnames``
    (checked when a series is first seen), and ``by`` is never negative, as for a ``Counter``.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], *, registry: CollectorRegistry
    ):
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        self.created: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def inc(self, *labels: str, by: float = 1) -> None:
        if by < 0:
            raise ValueError("counters can only be incremented by non-negative amounts")
        values = self.values
        if labels in values:
            values[labels] += by
            return
        _check_labels(self.name, self.labelnames, labels)
        self.created[labels] = time.time()  # before the value: a series is never seen without its time
        values[labels] = float(by)

    def value(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        off = _created_off()
        for labels, v in list(self.values.items()):
            family.add_metric(labels, v, created=None if off else self.created[labels])
        yield family


def _created_off() -> bool:
    """prometheus_client's own switch for the ``_created`` series (its metrics read it at import)."""
    return os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() in ("true", "1", "t")


def _check_labels(name: str, labelnames: tuple[str, ...], labels: tuple[Any, ...]) -> None:
    if len(labels) != len(labelnames) or not all(isinstance(v, str) for v in labels):
        raise ValueError(f"{name}: label values must be {len(labelnames)} strings, got {labels!r}")


class Level(Collector):
    """A labelled gauge kept as a dict of series (what is in flight), rendered at scrape time.

    ``add(*labels, by=1)`` moves one series (a series starts at 0 when first seen, as a ``Gauge``
    child does when made); ``remove(*labels)`` drops it. Written on the event loop only: no lock.
    """

    def __init__(
        self, name: str, documentation: str, labelnames: Sequence[str], *, registry: CollectorRegistry
    ):
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.values: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def add(self, *labels: str, by: float = 1) -> None:
        values = self.values
        if labels in values:
            values[labels] += by
            return
        _check_labels(self.name, self.labelnames, labels)
        values[labels] = float(by)

    def value(self, *labels: str) -> float:
        return self.values.get(labels, 0.0)

    def remove(self, *labels: str) -> None:
        del self.values[labels]  # KeyError for a series never seen, as a ``Gauge``'s ``remove``

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for labels, v in list(self.values.items()):
            family.add_metric(labels, v)
        yield family


class Spread(Collector):
    """A labelled histogram kept as, per series, a list of each bucket's count with the sum last,
    rendered at scrape time with cumulative buckets, ``_count``, ``_sum`` and ``_created``.

    ``observe(value, *labels)``: the value lands in the first bucket whose upper bound is at least it
    (``+Inf`` is always the last bound), as a ``Histogram``'s ``observe`` puts it. Values are
    durations and fractions, never NaN (``ValueError``, where a ``Histogram`` would count it in no
    bucket and poison the sum).
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ):
        bounds = [float(b) for b in buckets]
        if bounds != sorted(bounds):
            raise ValueError("Buckets not in sorted order")
        if bounds and bounds[-1] != math.inf:
            bounds.append(math.inf)
        if len(bounds) < 2:
            raise ValueError("Must have at least two buckets")
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self.bounds = tuple(bounds)
        self._le = tuple(floatToGoString(b) for b in bounds)
        self.series: dict[tuple[str, ...], list[float]] = {}  # per bucket, then the sum
        self.created: dict[tuple[str, ...], float] = {}
        registry.register(self)

    def observe(self, value: float, *labels: str) -> None:
        if value != value:  # NaN
            raise ValueError(f"{self.name}: NaN observed")
        series = self.series
        if labels in series:
            counts = series[labels]
        else:
            _check_labels(self.name, self.labelnames, labels)
            self.created[labels] = time.time()  # before the series: never seen without its time
            counts = series[labels] = [0.0] * (len(self.bounds) + 1)
        counts[bisect.bisect_left(self.bounds, value)] += 1
        counts[-1] += value

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def describe(self) -> Iterator[Metric]:
        yield self._family()

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        off = _created_off()
        for labels, counts in list(self.series.items()):
            acc, buckets = 0.0, []
            for le, n in zip(self._le, counts, strict=False):  # the last count is the sum
                acc += n
                buckets.append((le, acc))
            named = dict(zip(self.labelnames, labels, strict=True))
            if self.bounds[0] >= 0:  # with ``_count`` and ``_sum``
                family.add_metric(labels, buckets, counts[-1])
            else:  # a negative bucket: ``_count`` only, as a ``Histogram`` writes it
                family.add_metric(labels, buckets, None)
                family.samples.append(Sample(f"{self.name}_count", named, acc))
            if not off:
                family.samples.append(Sample(f"{self.name}_created", named, self.created[labels]))
        yield family


# attribute, type, name (after the namespace), help, labels[, histogram buckets]
_SPECS: tuple[tuple[Any, ...], ...] = (
    # -- requests and routing
    ("requests", Tally, "requests_total", "Requests answered, by model, replica and HTTP status.",
     ("model", "replica", "status")),
    ("duration", Spread, "request_duration_seconds", "Whole request latency as seen by the gateway.",
     ("model",), LATENCY_BUCKETS),
    ("ttfb", Spread, "time_to_first_byte_seconds", "Time from request to the first byte sent back.",
     ("model",), LATENCY_BUCKETS),
    ("in_flight", Level, "in_flight", "Requests in flight per replica (this process).", ("replica",)),
    ("upstream_errors", Counter, "upstream_errors_total", "Failed upstream attempts by replica and kind.",
     ("replica", "kind")),
    ("decisions", Tally, "routing_decisions_total", "Routing decisions by policy and reason.",
     ("model", "policy", "reason")),
    ("match_fraction", Spread, "prefix_match_fraction",
     "Fraction of the prompt matched in the chosen replica's index.", ("model",), FRACTION_BUCKETS),
    ("predicted_tokens", Counter, "prefix_predicted_tokens_total",
     "Prompt tokens the gateway's index predicted cached, for requests whose replica reported usage.",
     ("replica",)),
    ("reported_cached_tokens", Counter, "prefix_reported_cached_tokens_total",
     "Prompt tokens the replica reported cached (usage.prompt_tokens_details.cached_tokens).", ("replica",)),
    ("available_tokens", Counter, "routing_available_tokens_total",
     "Prompt tokens the index said the fleet held for a request (the longest match over every replica), "
     "by the pool and the replica chosen, for requests whose replica reported usage.", ("pool", "replica")),
    ("achieved_tokens", Counter, "routing_achieved_cached_tokens_total",
     "Prompt tokens the chosen replica reported cached for the same requests.", ("pool", "replica")),
    ("index_blocks", Gauge, "prefix_index_blocks", "Block hashes held in the gateway's index per replica.",
     ("replica",)),
    # -- response cache and limits
    ("cache_requests", Tally, "cache_requests_total", "Response-cache outcomes (the x-cache header).",
     ("result",)),
    ("cache_bypass", Tally, "cache_bypass_total",
     "Requests the response cache did not serve or store, by reason.", ("reason",)),
    ("cache_not_stored", Counter, "cache_not_stored_total", "Answers not stored, by reason.", ("reason",)),
    ("cache_store_seconds", Histogram, "cache_store_seconds", "Latency of response-store calls.", ("op",),
     STORE_BUCKETS),
    ("ratelimited", Counter, "ratelimited_total", "Requests refused by a token bucket.", ("tenant", "kind")),
    ("redis_errors", Counter, "redis_errors_total", "Failed Redis calls (the caller failed open or closed).",
     ("component", "op")),
    ("redis_breaker_state", Gauge, "redis_breaker_state",
     "Redis breaker of this process: 0 closed (calls sent), 2 open (every call fails at once).", ()),
    ("redis_breaker_transitions", Counter, "redis_breaker_transitions_total",
     "Redis breaker state changes, by the state entered.", ("to",)),
    # -- billing
    ("billed_tokens", Tally, "billed_tokens_total", "Tokens in the billing ledger by tenant and kind.",
     ("tenant", "kind")),
    ("billed_cost", Tally, "billed_cost_micros_total", "Billed cost in micro-units of the policy currency.",
     ("tenant",)),
    ("ledger_errors", Counter, "ledger_errors_total", "Failed ledger writes.", ()),
    ("budget_used", Gauge, "budget_used_ratio",
     "A tenant budget's spend (or tokens) in its period over its limit, as this process last read it.",
     ("tenant", "budget")),
    ("budget_soft_limit", Counter, "budget_soft_limit_total",
     "Rows that took a budget past one of its warn_at_pct shares (pct 100: exhausted); one row fleet-wide "
     "with Redis.", ("tenant", "budget", "pct")),
    ("budget_refused", Counter, "budget_refused_total",
     "Requests answered 429 budget_exceeded, by the budget that refused them.", ("tenant", "budget")),
    ("usage_drift", Gauge, "usage_drift_tokens",
     "Last complete reconciliation window per replica: its own token counter's increase minus the "
     "ledger's tokens of its rows, by kind (prompt_tokens, generation_tokens).", ("model", "replica", "kind")),
    ("usage_drift_exceeded", Counter, "usage_drift_exceeded_total",
     "Reconciliation windows whose drift passed billing.reconcile.drift_threshold_pct.",
     ("model", "replica", "kind")),
    ("explicit_entries", Gauge, "explicit_cache_entries",
     "Explicit prompt-cache entries (live, created, hits, expired).", ("state",)),
    # -- protocols: the Responses store, LoRA adapters
    ("responses_stored", Counter, "responses_stored_total",
     "Responses kept for previous_response_id, by result (stored, too_large, error).", ("result",)),
    ("adapter_requests", Counter, "adapter_requests_total",
     "Requests naming a LoRA adapter, by model, adapter and HTTP status.", ("model", "adapter", "status")),
    ("adapter_loads", Counter, "adapter_loads_total",
     "Dynamic LoRA adapter loads on a replica, by model, adapter and result.", ("model", "adapter", "result")),
    # -- replicas: health, breakers, admission
    ("replica_healthy", Gauge, "replica_healthy",
     "1 when the replica takes new requests (active check ok, breaker not open, not drained).", ("replica",)),
    ("breaker_state", Gauge, "breaker_state", "Circuit breaker per replica: 0 closed, 1 half-open, 2 open.",
     ("replica",)),
    ("breaker_transitions", Counter, "breaker_transitions_total",
     "Circuit breaker state changes per replica, by the state entered.", ("replica", "to")),
    ("admission_rejected", Counter, "admission_rejected_total",
     "Requests answered 503 because no slot freed in time, by scope (process, replica).", ("scope",)),
    ("admission_queued", Gauge, "admission_queued",
     "Requests waiting for a slot now, by scope (process, replica).", ("scope",)),
    # -- fairness: the gateway's queue while a pool is saturated (router.fairness)
    ("fair_queued", Gauge, "fair_queue_depth",
     "Requests waiting at the gateway for a saturated pool, by pool, tenant and priority class.",
     ("pool", "tenant", "priority")),
    ("fair_wait", Histogram, "fair_queue_wait_seconds",
     "Time a request waited at the gateway for a saturated pool, by pool, tenant and priority class "
     "(every request of an enabled pool: 0 when it went at once).", ("pool", "tenant", "priority"),
     LATENCY_BUCKETS),
    ("fair_shed", Counter, "fair_shed_total",
     "Requests answered at once instead of queued, by pool, priority class and reason (objective, "
     "tenant_cap, queue_full, preempted, timeout).", ("pool", "priority", "reason")),
    ("fair_headroom", Gauge, "fair_headroom_slots",
     "Slots of each replica kept for the highest class, derived from its recent concurrency "
     "(fairness.auto_headroom), by pool.", ("pool",)),
    ("fair_headroom_model", Gauge, "fair_headroom_model",
     "The highest class's load the derived headroom is taken from (fairness.auto_headroom), by pool and "
     "term: arrival_rate_per_s, service_s (arrival to its attempt's end), concurrency (their product, "
     "Little's law), needed (the count room is kept for: the model's quantile).", ("pool", "term")),
    ("fair_capped", Counter, "fair_priority_capped_total",
     "Requests that asked for a priority above their tenant's ceiling (served at the ceiling).",
     ("tenant",)),
    ("ttft_objective", Counter, "ttft_objective_total",
     "Requests with a TTFT objective, by pool, priority class and outcome (met, missed: at the first "
     "byte; shed: answered 429 at once as predicted unattainable).", ("pool", "priority", "outcome")),
    # -- process: reloads, discovery
    ("reloads", Counter, "config_reloads_total", "Policy reloads by result (ok, invalid, error, unchanged).",
     ("result",)),
    ("discovery_changes", Counter, "discovery_changes_total", "Replicas added or removed by discovery, per model.",
     ("model", "change")),
    ("discovery_errors", Counter, "discovery_errors_total",
     "Failed resolutions of a discovery name (the last known replicas are kept).", ("model",)),
    # -- precise routing: vLLM KV-cache events
    ("kv_event_batches", Counter, "kv_event_batches_total", "KV-event batches applied per replica.",
     ("replica",)),
    ("kv_event_gaps", Counter, "kv_event_gaps_total",
     "Sequence gaps per replica by outcome (replayed, purged, restart).", ("replica", "outcome")),
    ("kv_event_errors", Counter, "kv_event_errors_total",
     "Frames that could not be decoded or had an unknown topic.", ("kind",)),
    ("kv_event_blocks", Gauge, "kv_event_blocks", "Blocks each replica holds according to its events.",
     ("replica",)),
    # -- the shared approximate index (gateway/fleet/sharing)
    ("shared_placements", Counter, "shared_index_placements_total",
     "Placements shared with other gateway processes: sent, received, applied, dropped (queue full, "
     "transport down), unknown (a pool or replica this process does not have).", ("outcome",)),
    ("shared_errors", Counter, "shared_index_errors_total",
     "Failed shared-index transport calls, by transport and operation.", ("transport", "op")),
    ("shared_up", Gauge, "shared_index_up", "1 while the shared-index transport works, else 0.",
     ("transport",)),
    # -- the semantic cache (cache/semantic)
    ("semantic_requests", Counter, "semantic_requests_total", "Semantic-cache lookups by mode and result.",
     ("mode", "result")),
    ("semantic_bypass", Counter, "semantic_bypass_total",
     "Requests the semantic cache neither served nor stored, by reason (admission, question shape, "
     "fingerprint gap, embedder).", ("reason",)),
    ("semantic_vetoes", Counter, "semantic_guard_veto_total",
     "Candidates above the similarity threshold refused by a guard feature.", ("guard",)),
    ("semantic_not_stored", Counter, "semantic_not_stored_total", "Semantic fills not stored, by reason.",
     ("reason",)),
    ("semantic_stale", Gauge, "semantic_stale_refused",
     "Entries an event had invalidated, found at read time and refused instead of served, since the "
     "process started (stale serves are impossible by construction: docs/semantic-cache.md).", ()),
    ("semantic_events", Counter, "semantic_events_total", "Business events applied, by type.", ("type",)),
    ("semantic_invalidated", Counter, "semantic_invalidated_entries_total",
     "Answers business events invalidated, by layer: semantic and exact entries removed, and "
     "in_flight generations kept out of the cache.", ("layer",)),
    ("semantic_similarity", Histogram, "semantic_similarity", "Cosine similarity of embedding-mode hits.",
     (), FRACTION_BUCKETS),
    # -- offline batches: the store's count (set at each scrape); the runner's counters are read from its
    # RunStats at each scrape (gateway/batch/metrics.py)
    ("batches", Gauge, "batches", "Batches in the job store by status (every pod's: take the max across pods).",
     ("status",)),
    # -- the layout advisor (set at each scrape from the advice document; cache/advisor/render.py)
    ("advice_saving_micros", Gauge, GAUGE_SAVING_MICROS.removeprefix(f"{NS}_"),
     "Estimated saving per day if the tenant changed its prompt layout as advised, in micro-units.",
     ("tenant", "kind")),
    ("advice_saving_tokens", Gauge, GAUGE_SAVING_TOKENS.removeprefix(f"{NS}_"),
     "The same saving in token-equivalents at the model's input price.", ("tenant", "kind")),
    ("advice_findings", Gauge, GAUGE_FINDINGS.removeprefix(f"{NS}_"), "Layout findings per tenant and kind.",
     ("tenant", "kind")),
)  # fmt: skip


class GatewayMetrics:
    requests: Tally
    duration: Spread
    ttfb: Spread
    in_flight: Level
    upstream_errors: Counter
    decisions: Tally
    match_fraction: Spread
    predicted_tokens: Counter
    reported_cached_tokens: Counter
    available_tokens: Counter
    achieved_tokens: Counter
    index_blocks: Gauge
    cache_requests: Tally
    cache_bypass: Tally
    cache_not_stored: Counter
    cache_store_seconds: Histogram
    ratelimited: Counter
    redis_errors: Counter
    redis_breaker_state: Gauge
    redis_breaker_transitions: Counter
    billed_tokens: Tally
    billed_cost: Tally
    ledger_errors: Counter
    budget_used: Gauge
    budget_soft_limit: Counter
    budget_refused: Counter
    usage_drift: Gauge
    usage_drift_exceeded: Counter
    explicit_entries: Gauge
    responses_stored: Counter
    adapter_requests: Counter
    adapter_loads: Counter
    replica_healthy: Gauge
    breaker_state: Gauge
    breaker_transitions: Counter
    admission_rejected: Counter
    admission_queued: Gauge
    fair_queued: Gauge
    fair_wait: Histogram
    fair_shed: Counter
    fair_headroom: Gauge
    fair_headroom_model: Gauge
    fair_capped: Counter
    ttft_objective: Counter
    reloads: Counter
    discovery_changes: Counter
    discovery_errors: Counter
    kv_event_batches: Counter
    kv_event_gaps: Counter
    kv_event_errors: Counter
    kv_event_blocks: Gauge
    shared_placements: Counter
    shared_errors: Counter
    shared_up: Gauge
    semantic_requests: Counter
    semantic_bypass: Counter
    semantic_vetoes: Counter
    semantic_not_stored: Counter
    semantic_stale: Gauge
    semantic_events: Counter
    semantic_invalidated: Counter
    semantic_similarity: Histogram
    advice_saving_micros: Gauge
    advice_saving_tokens: Gauge
    advice_findings: Gauge
    batches: Gauge

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        for attr, kind, name, doc, labels, *buckets in _SPECS:
            extra = {"buckets": buckets[0]} if buckets else {}
            setattr(self, attr, kind(f"{NS}_{name}", doc, labels, registry=self.registry, **extra))
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, cached (label values are bounded, so is the cache)."""
        key = (metric, labels)  # a metric hashes by identity
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def forget(self, metric: Any, *labels: str) -> None:
        """Drop one labelled series (a replica gone for good leaves no stale series behind)."""
        self._children.pop((metric, labels), None)
        with contextlib.suppress(KeyError):
            metric.remove(*labels)
