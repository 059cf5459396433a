"""Metrics of the operational machinery (breakers, admission, reloads, discovery), registered once per
registry beside ``GatewayMetrics`` so a reload, which builds a new state, keeps counting in the same
series. Labels are replica ids from the policy or discovery, fixed results and scopes: never prompts.
"""

from __future__ import annotations

import weakref

from prometheus_client import CollectorRegistry, Counter, Gauge

NS = "prefix_gateway"


class OpsMetrics:
    def __init__(self, registry: CollectorRegistry):
        r = registry
        self.breaker_state = Gauge(
            f"{NS}_breaker_state",
            "Circuit breaker per replica: 0 closed, 1 half-open, 2 open.",
            ["replica"],
            registry=r,
        )
        self.breaker_transitions = Counter(
            f"{NS}_breaker_transitions_total",
            "Circuit breaker state changes per replica, by the state entered.",
            ["replica", "to"],
            registry=r,
        )
        self.routable = Gauge(
            f"{NS}_replica_routable",
            "1 when the replica takes new requests (active check ok, breaker not open, not drained).",
            ["replica"],
            registry=r,
        )
        self.reloads = Counter(
            f"{NS}_config_reloads_total",
            "Policy reloads by result (ok, invalid, error, unchanged).",
            ["result"],
            registry=r,
        )
        self.admission_rejected = Counter(
            f"{NS}_admission_rejected_total",
            "Requests answered 503 because no slot freed in time, by scope (process, replica).",
            ["scope"],
            registry=r,
        )
        self.admission_queued = Gauge(
            f"{NS}_admission_queued",
            "Requests waiting for a slot now, by scope (process, replica).",
            ["scope"],
            registry=r,
        )
        self.discovery_changes = Counter(
            f"{NS}_discovery_changes_total",
            "Replicas added or removed by discovery, per model.",
            ["model", "change"],
            registry=r,
        )
        self.discovery_errors = Counter(
            f"{NS}_discovery_errors_total",
            "Failed resolutions of a discovery name (the last known replicas are kept).",
            ["model"],
            registry=r,
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, OpsMetrics] = weakref.WeakKeyDictionary()


def ops_metrics(registry: CollectorRegistry) -> OpsMetrics:
    """The one ``OpsMetrics`` of a registry (created on first use)."""
    m = _BY_REGISTRY.get(registry)
    if m is None:
        m = _BY_REGISTRY[registry] = OpsMetrics(registry)
    return m
