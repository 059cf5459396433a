"""Prometheus metrics of one gateway process, in a registry of its own (several apps may share a
process in tests). Label values are bounded: models and replicas come from the policy, tenants from
its tenant list (others are ``other``), statuses are numbers; never prompt text.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

NS = "prefix_gateway"

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
FRACTION_BUCKETS = (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


class GatewayMetrics:
    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            f"{NS}_requests_total",
            "Requests answered, by model, replica and HTTP status.",
            ["model", "replica", "status"],
            registry=r,
        )
        self.duration = Histogram(
            f"{NS}_request_duration_seconds",
            "Whole request latency as seen by the gateway.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.ttfb = Histogram(
            f"{NS}_time_to_first_byte_seconds",
            "Time from request to the first byte sent back.",
            ["model"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.in_flight = Gauge(
            f"{NS}_in_flight",
            "Requests in flight per replica (this process).",
            ["replica"],
            registry=r,
        )
        self.upstream_errors = Counter(
            f"{NS}_upstream_errors_total",
            "Failed upstream attempts by replica and kind.",
            ["replica", "kind"],
            registry=r,
        )
        self.replica_healthy = Gauge(
            f"{NS}_replica_healthy",
            "1 when the replica is in the routing set.",
            ["replica"],
            registry=r,
        )
        self.decisions = Counter(
            f"{NS}_routing_decisions_total",
            "Routing decisions by policy and reason.",
            ["model", "policy", "reason"],
            registry=r,
        )
        self.match_fraction = Histogram(
            f"{NS}_prefix_match_fraction",
            "Fraction of the prompt matched in the chosen replica's index.",
            ["model"],
            buckets=FRACTION_BUCKETS,
            registry=r,
        )
        self.predicted_tokens = Counter(
            f"{NS}_prefix_predicted_tokens_total",
            "Prompt tokens the gateway's index predicted cached, for requests whose replica reported usage.",
            ["replica"],
            registry=r,
        )
        self.reported_cached_tokens = Counter(
            f"{NS}_prefix_reported_cached_tokens_total",
            "Prompt tokens the replica reported cached (usage.prompt_tokens_details.cached_tokens).",
            ["replica"],
            registry=r,
        )
        self.index_blocks = Gauge(
            f"{NS}_prefix_index_blocks",
            "Block hashes held in the gateway's index per replica.",
            ["replica"],
            registry=r,
        )
        self.cache_requests = Counter(
            f"{NS}_cache_requests_total",
            "Response-cache outcomes (the x-cache header).",
            ["result"],
            registry=r,
        )
        self.cache_bypass = Counter(
            f"{NS}_cache_bypass_total",
            "Requests the response cache did not serve or store, by reason.",
            ["reason"],
            registry=r,
        )
        self.cache_not_stored = Counter(
            f"{NS}_cache_not_stored_total",
            "Answers not stored, by reason.",
            ["reason"],
            registry=r,
        )
        self.cache_store_seconds = Histogram(
            f"{NS}_cache_store_seconds",
            "Latency of response-store calls.",
            ["op"],
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
            registry=r,
        )
        self.ratelimited = Counter(
            f"{NS}_ratelimited_total",
            "Requests refused by a token bucket.",
            ["tenant", "kind"],
            registry=r,
        )
        self.redis_errors = Counter(
            f"{NS}_redis_errors_total",
            "Failed Redis calls (the caller failed open or closed).",
            ["component", "op"],
            registry=r,
        )
        self.billed_tokens = Counter(
            f"{NS}_billed_tokens_total",
            "Tokens in the billing ledger by tenant and kind.",
            ["tenant", "kind"],
            registry=r,
        )
        self.billed_cost = Counter(
            f"{NS}_billed_cost_micros_total",
            "Billed cost in micro-units of the policy currency.",
            ["tenant"],
            registry=r,
        )
        self.ledger_errors = Counter(f"{NS}_ledger_errors_total", "Failed ledger writes.", registry=r)
        self.explicit_entries = Gauge(
            f"{NS}_explicit_cache_entries",
            "Explicit prompt-cache entries (live, created, hits, expired).",
            ["state"],
            registry=r,
        )
        self._request_children: dict[tuple[str, str, int], object] = {}
        self._decision_children: dict[tuple[str, str, str], object] = {}

    def count_request(self, model: str, replica: str, status: int) -> None:
        key = (model, replica, status)
        child = self._request_children.get(key)
        if child is None:
            child = self._request_children[key] = self.requests.labels(model, replica, str(status))
        child.inc()  # type: ignore[attr-defined]

    def count_decision(self, model: str, policy: str, reason: str, matched: int, prompt: int) -> None:
        key = (model, policy, reason)
        child = self._decision_children.get(key)
        if child is None:
            child = self._decision_children[key] = self.decisions.labels(model, policy, reason)
        child.inc()  # type: ignore[attr-defined]
        if prompt:
            self.match_fraction.labels(model).observe(matched / prompt)
