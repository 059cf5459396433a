"""What reading a replica's /metrics costs the event loop: the whole page through prometheus_client's
parser vs the regex filter ``gateway.fleet.scrape`` runs first.

    python -m bench.scrape_parse [--models 1] [--repeat 20]

The page is synthetic, built like vLLM's: its gauge, counter and histogram names with their buckets, per
model, a few label sets per histogram (about 1,400 lines per model, most of them buckets), with the
gauges the gateway reads among them. Checks that the filter reads the same load as the whole page.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time

from prometheus_client.parser import text_string_to_metric_families

from gateway.fleet import scrape
from gateway.fleet.scrape import parse_load

HISTOGRAMS = {  # vLLM's histogram families and their bucket counts
    "vllm:time_to_first_token_seconds": 19,
    "vllm:time_per_output_token_seconds": 16,
    "vllm:inter_token_latency_seconds": 16,
    "vllm:e2e_request_latency_seconds": 22,
    "vllm:request_queue_time_seconds": 22,
    "vllm:request_inference_time_seconds": 22,
    "vllm:request_prefill_time_seconds": 22,
    "vllm:request_decode_time_seconds": 22,
    "vllm:request_prompt_tokens": 25,
    "vllm:request_generation_tokens": 25,
    "vllm:request_params_max_tokens": 25,
    "vllm:request_params_n": 7,
    "vllm:iteration_tokens_total": 17,
    "vllm:request_max_num_generation_tokens": 25,
}
COUNTERS = ["vllm:prompt_tokens", "vllm:generation_tokens", "vllm:num_preemptions", "vllm:prefix_cache_queries",
            "vllm:prefix_cache_hits", "vllm:request_success"]  # fmt: skip
PYTHON = [f'python_gc_objects_collected_total{{generation="{g}"}} {g * 17}.0' for g in range(3)]


def page(models: int) -> str:
    out = ["# HELP python_gc_objects_collected_total Objects collected during gc", *PYTHON]
    for m in range(models):
        lab = f'engine="0",model_name="model-{m}"'
        for name, value in (("vllm:num_requests_running", 7), ("vllm:num_requests_waiting", 2),
                            ("vllm:kv_cache_usage_perc", 0.31)):  # fmt: skip
            out += [f"# HELP {name} gauge", f"# TYPE {name} gauge", f"{name}{{{lab}}} {value}"]
        out += ["# TYPE vllm:cache_config_info gauge",
                f'vllm:cache_config_info{{block_size="16",cache_dtype="auto",num_gpu_blocks="27000",{lab}}} 1.0']  # fmt: skip
        for name in COUNTERS:
            out += [
                f"# HELP {name}_total counter",
                f"# TYPE {name}_total counter",
                f"{name}_total{{{lab}}} 12345.0",
            ]
            out.append(f"{name}_created{{{lab}}} 1.7e9")
        for finished in ("stop", "length", "abort"):
            out.append(f'vllm:request_success_total{{finished_reason="{finished}",{lab}}} 10.0')
        for name, buckets in HISTOGRAMS.items():
            out += [f"# HELP {name} histogram", f"# TYPE {name} histogram"]
            for rep in range(4):  # vLLM's per-engine / per-reason repeats of the larger families
                extra = f',shard="{rep}"'
                for b in range(buckets):
                    out.append(f'{name}_bucket{{{lab}{extra},le="{0.001 * 2**b:g}"}} {b * 10}.0')
                out.append(f'{name}_bucket{{{lab}{extra},le="+Inf"}} {buckets * 10}.0')
                out += [f"{name}_count{{{lab}{extra}}} 99.0", f"{name}_sum{{{lab}{extra}}} 12.5"]
                out.append(f"{name}_created{{{lab}{extra}}} 1.7e9")
    return "\n".join(out) + "\n"


def _unfiltered(text: str):
    """parse_load as it was: every family through the parser."""
    saved = scrape._LINES
    scrape._LINES = re.compile(r"^.*$", re.MULTILINE)
    try:
        return scrape.parse_load(text)
    finally:
        scrape._LINES = saved


def timed(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - t0)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    text = page(args.models)
    load = parse_load(text)
    assert load == _unfiltered(text), (load, _unfiltered(text))
    assert load.running == 7 * args.models and load.waiting == 2 * args.models, load
    assert load.kv_capacity_tokens == 27000 * 16, load
    whole = timed(lambda: list(text_string_to_metric_families(text)), args.repeat)
    filtered = timed(lambda: parse_load(text), args.repeat)
    lines = text.count("\n")
    print(f"page: {lines:,} lines, {len(text) / 1024:,.0f} KiB")
    print(f"whole page through prometheus_client: {whole * 1000:.2f} ms (median of {args.repeat})")
    print(f"parse_load (regex filter, then the parser): {filtered * 1000:.3f} ms")
    print(f"ratio: {whole / filtered:.0f}x less event-loop time per replica and scrape")


if __name__ == "__main__":
    main()
