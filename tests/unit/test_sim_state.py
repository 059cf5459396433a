"""Replica bookkeeping and the /metrics exposition, without sockets."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from sim.config import Faults, SimConfig
from sim.engine import EngineRequest
from sim.metrics import make_registry, render
from sim.state import TTFT_BUCKETS, Histogram, Replica


def test_histogram_is_cumulative() -> None:
    h = Histogram((0.1, 1.0))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v)
    assert h.cumulative() == [("0.1", 2), ("1.0", 3), ("+Inf", 4)]
    assert h.sum == 3.65
    h.reset()
    assert h.cumulative() == [("0.1", 0), ("1.0", 0), ("+Inf", 0)]


def test_exposition_parses_and_carries_vllm_names() -> None:
    rep = Replica(SimConfig(models=("m1", "m2"), mode="simple", kv_capacity_blocks=10))
    rep.counters.prompt_tokens, rep.counters.cached_tokens, rep.counters.generation_tokens = 100, 48, 7
    rep.kv_blocks_in_use = 5
    rep.ttft.observe(0.3)
    families = {f.name: f for f in text_string_to_metric_families(render(make_registry(rep)).decode())}
    value = {
        s.name: s.value for f in families.values() for s in f.samples if s.labels.get("model_name") == "m1"
    }
    assert value["vllm:prefix_cache_queries_total"] == 100
    assert value["vllm:prefix_cache_hits_total"] == 48
    assert value["vllm:prompt_tokens_total"] == 100
    assert value["vllm:generation_tokens_total"] == 7
    assert value["vllm:kv_cache_usage_perc"] == 0.5
    assert value["vllm:num_requests_running"] == 0 and value["vllm:num_requests_waiting"] == 0
    assert value["vllm:time_to_first_token_seconds_count"] == 1
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert families["vllm:prefix_cache_hits"].type == "counter"
    buckets = [s for s in families["vllm:time_to_first_token_seconds"].samples if s.name.endswith("_bucket")]
    assert len(buckets) == len(TTFT_BUCKETS) + 1
    (info,) = families["vllm:cache_config_info"].samples
    assert info.labels["num_gpu_blocks"] == "10" and info.labels["block_size"] == "16"


def test_usage_is_capped_and_reset_keeps_running_state() -> None:
    rep = Replica(SimConfig(mode="simple", kv_capacity_blocks=4))
    rep.kv_blocks_in_use = 9
    assert rep.kv_usage() == 1.0
    rep.kv.insert([1, 2])
    rep.counters.requests = 3
    rep.requests_log.append({"x": 1})
    rep.reset()
    st = rep.stats()
    assert st["requests"] == 0 and st["kv_cached_blocks"] == 0 and not rep.requests_log
    assert rep.kv_blocks_in_use == 9  # running requests give their blocks back themselves


def test_replica_copies_its_config() -> None:
    cfg = SimConfig(faults=Faults(slow_factor=2.0))
    a, b = Replica(cfg), Replica(cfg)
    a.set_faults(Faults(hang=True))
    assert b.faults == Faults(slow_factor=2.0) and cfg.faults == Faults(slow_factor=2.0)
    assert a.stats()["faults"]["hang"] is True


def test_engine_mode_exports_the_engine_under_vllm_names() -> None:
    """Engine mode: gauges, prefix-cache counters and preemptions come from the engine itself, and the
    request phase histograms carry vLLM's names."""
    rep = Replica(SimConfig(mode="engine", kv_capacity_blocks=12, max_num_seqs=8))
    assert rep.engine is not None
    eng = rep.engine
    a, b = EngineRequest(list(range(4)), 64, 60), EngineRequest(list(range(100, 104)), 64, 60)
    eng.add(a)
    eng.add(b)
    now = 0.0
    while not eng.idle:  # two long answers outgrow 12 blocks: the second is preempted
        out = eng.step(now)
        now += out.duration_s
        for r in out.finished:
            rep.finished(r)
    eng.add(EngineRequest([*list(range(4)), 7], 80, 1), now)  # 4 leading blocks cached (a's prompt)
    running = EngineRequest([9], 16, 5)
    eng.add(running, now)
    eng.step(now)
    families = {f.name: f for f in text_string_to_metric_families(render(make_registry(rep)).decode())}
    value = {s.name: s.value for f in families.values() for s in f.samples}
    assert value["vllm:num_preemptions_total"] == eng.stats.preemptions >= 1
    assert value["vllm:prefix_cache_queries_total"] == 64 + 64 + 80 + 16
    assert value["vllm:prefix_cache_hits_total"] == 64
    assert value["vllm:num_requests_running"] == 1  # the 1-token request finished in its prefill step
    assert value["vllm:kv_cache_usage_perc"] == eng.pool.usage() > 0
    for name in ("request_queue_time", "request_prefill_time", "request_decode_time"):
        assert families[f"vllm:{name}_seconds"].type == "histogram"
        assert value[f"vllm:{name}_seconds_count"] == 2
    assert value["vllm:inter_token_latency_seconds_count"] == 2
    assert rep.stats()["preemptions"] == eng.stats.preemptions and rep.stats()["busy_s"] == eng.stats.busy_s
