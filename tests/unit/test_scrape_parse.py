"""Reading a replica's load from its /metrics page: the regex filter keeps exactly the lines needed."""

from __future__ import annotations

from bench.scrape_parse import _unfiltered, page
from gateway.fleet.scrape import parse_load


def test_gauges_are_summed_over_engines_and_capacity_read() -> None:
    text = (
        "# HELP vllm:num_requests_running running\n"
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        "vllm:num_requests_waiting 2\n"
        'vllm:kv_cache_usage_perc{engine="0"} 0.5\n'
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="100"} 1.0\n'
    )
    load = parse_load(text)
    assert (load.running, load.waiting, load.kv_usage, load.kv_capacity_tokens) == (7.0, 2.0, 0.5, 1600)


def test_longer_names_with_the_same_start_are_not_read() -> None:
    text = (
        "vllm:num_requests_running_by_tenant 50\n"
        'vllm:num_requests_waiting_total{x="1"} 9\n'
        "vllm:num_requests_running 1\n"
        "xvllm:num_requests_waiting 8\n"
    )
    load = parse_load(text)
    assert load.running == 1.0 and load.waiting is None


def test_older_vllm_and_sglang_names() -> None:
    assert parse_load("vllm:gpu_cache_usage_perc 0.25\n").kv_usage == 0.25
    sg = parse_load("sglang:num_running_reqs 5\nsglang:num_queue_reqs 1\nsglang:max_total_num_tokens 4096\n")
    assert (sg.running, sg.waiting, sg.kv_capacity_tokens) == (5.0, 1.0, 4096)


def test_a_whole_vllm_like_page_reads_as_the_unfiltered_parser_does() -> None:
    text = page(models=2)
    assert parse_load(text) == _unfiltered(text)
    assert parse_load(text).running == 14.0


def test_token_counters_of_vllm_and_sglang_are_read_and_summed() -> None:
    """Usage reconciliation reads the replica's own token counters, summed over label sets."""
    text = (
        "# HELP vllm:prompt_tokens Number of prefill tokens processed.\n"
        "# TYPE vllm:prompt_tokens counter\n"
        'vllm:prompt_tokens_total{model_name="m",engine="0"} 1200.0\n'
        'vllm:prompt_tokens_total{model_name="m",engine="1"} 34.0\n'
        'vllm:prompt_tokens_created{model_name="m",engine="0"} 1.7e9\n'
        'vllm:generation_tokens_total{model_name="m"} 56.0\n'
        "vllm:num_requests_running 1\n"
    )
    load = parse_load(text)
    assert (load.prompt_tokens_total, load.generation_tokens_total) == (1234.0, 56.0)
    assert load == _unfiltered(text)
    sg = parse_load("sglang:prompt_tokens_total 10\nsglang:generation_tokens_total 3\n")
    assert (sg.prompt_tokens_total, sg.generation_tokens_total) == (10.0, 3.0)
    assert parse_load("vllm:num_requests_running 1\n").prompt_tokens_total is None


def test_the_prefix_cache_hit_counter_is_read_and_summed() -> None:
    """router.capacity learns from it when answers carry no cached_tokens."""
    load = parse_load(
        "# TYPE vllm:prefix_cache_hits counter\n"
        'vllm:prefix_cache_hits_total{model_name="m",engine="0"} 640.0\n'
        'vllm:prefix_cache_hits_total{model_name="m",engine="1"} 64.0\n'
        'vllm:prefix_cache_queries_total{model_name="m",engine="0"} 9999.0\n'
    )
    assert load.prefix_cache_hits_total == 704.0
    assert parse_load("vllm:num_requests_running 1\n").prefix_cache_hits_total is None
