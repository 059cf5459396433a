"""The batch runner's metrics, read at each scrape from what the service already counts.

A Prometheus collector over the service's ``RunStats`` (every run of this process: lines by outcome,
retries, lines stolen by idle replicas, tokens of the answered lines, whose cached share is the hit
rate of batch traffic) and its slot pools (batch lines in flight per model and replica), so the line
path pays nothing for them and no count is kept twice. Labels are bounded: outcome and kind are fixed
words, models and replicas come from the policy or discovery. The count of batches by status is the
store's (every pod's batches), a gauge the ``/metrics`` handler sets from ``JobStore.count_by_status``
(``prefix_gateway_batches``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.observability.metrics import NS

if TYPE_CHECKING:
    from gateway.batch.service import BatchService


class BatchCollector(Collector):
    def __init__(self, service: BatchService):
        self.service = service

    def collect(self) -> Iterator[Metric]:
        s = self.service.stats
        lines = CounterMetricFamily(
            f"{NS}_batch_lines", "Batch lines answered by this process, by outcome.", labels=["outcome"]
        )
        lines.add_metric(["completed"], s.completed)
        lines.add_metric(["failed"], s.failed)
        yield lines
        yield CounterMetricFamily(
            f"{NS}_batch_retries", "Batch line sends retried (408, 429, 5xx, transport).", value=s.retried
        )
        yield CounterMetricFamily(
            f"{NS}_batch_stolen_lines",
            "Batch lines moved to an idle replica from one with many left or a stalled one.",
            value=s.stolen,
        )
        tokens = CounterMetricFamily(
            f"{NS}_batch_tokens",
            "Tokens of answered batch lines by kind (cached / prompt: the hit rate of batch traffic).",
            labels=["kind"],
        )
        for kind, n in (
            ("prompt", s.prompt_tokens),
            ("cached", s.cached_tokens),
            ("completion", s.completion_tokens),
        ):
            tokens.add_metric([kind], n)
        yield tokens
        flight = GaugeMetricFamily(
            f"{NS}_batch_in_flight",
            "Batch lines in flight per replica (this process; at most the batch share).",
            labels=["model", "replica"],
        )
        for model, pool in self.service.slots.items():
            for replica, n in pool.in_use().items():
                if replica is not None:
                    flight.add_metric([model, replica], n)
        yield flight
