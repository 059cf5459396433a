"""``/metrics`` in vLLM's names, read from a replica's counters at scrape time.

A custom collector keeps the per-request cost at zero (nothing but plain integer increments in the
hot path); each replica has its own ``CollectorRegistry`` so several can live in one process.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from sim.state import Replica

# The text format vLLM's prometheus_client serves; understood by every scraper.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class ReplicaCollector(Collector):
    def __init__(self, replica: Replica) -> None:
        self.replica = replica

    def collect(self) -> Iterator[Metric]:
        rep = self.replica
        labels = ["model_name"]
        values = [rep.model_name]
        c = rep.counters

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            g = GaugeMetricFamily(name, doc, labels=labels)
            g.add_metric(values, value)
            return g

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            m = CounterMetricFamily(name, doc, labels=labels)
            m.add_metric(values, value)
            return m

        yield gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    rep.running)  # fmt: skip
        yield gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    rep.waiting)  # fmt: skip
        yield gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", rep.kv_usage())
        # Name used by vLLM before v0.10, for scrapers that still read it.
        yield gauge("vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.",
                    rep.kv_usage())  # fmt: skip
        if rep.cfg.publish_cache_config:
            info = GaugeMetricFamily(
                "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                labels=["block_size", "num_gpu_blocks", "enable_prefix_caching"],
            )  # fmt: skip
            info.add_metric([str(rep.cfg.block_size), str(rep.cfg.kv_capacity_blocks), "True"], 1.0)
            yield info
        if rep.engine is not None:  # counted by the scheduler when it admits a request, as vLLM does
            st = rep.engine.stats
            queries, hits, preemptions = st.prefix_queries, st.prefix_hits, st.preemptions
        else:
            queries, hits, preemptions = c.prompt_tokens, c.cached_tokens, 0
        yield counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                      queries)  # fmt: skip
        yield counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                      hits)  # fmt: skip
        yield counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", preemptions)
        yield counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
        yield counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
        yield counter("vllm:request_success", "Count of successfully processed requests.", c.completed)
        for name, doc, hist in (
            ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", rep.ttft),
            ("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
             rep.e2e),
            ("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
             rep.queue_time),
            ("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.",
             rep.prefill_time),
            ("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.",
             rep.decode_time),
            ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", rep.itl),
        ):  # fmt: skip
            h = HistogramMetricFamily(name, doc, labels=labels)
            h.add_metric(values, hist.cumulative(), sum_value=hist.sum)
            yield h


def make_registry(replica: Replica) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ReplicaCollector(replica))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
