"""What a vLLM replica says about its KV cache in ``/metrics``: ``vllm:cache_config_info``.

vLLM exports its cache configuration as the labels of an info gauge (``block_size``,
``num_gpu_blocks``, ...; the CPU backend also reports its blocks as ``num_gpu_blocks``). The gateway
uses the block count to bound a replica's index (``PoolRouter.set_capacity``) and the block size to
check ``routing.engine_block_size``.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

INFO = "vllm:cache_config_info"


@dataclass(frozen=True, slots=True)
class CacheInfo:
    block_size: int
    num_blocks: int  # KV blocks of block_size tokens the replica holds
    hash_algo: str | None = None  # --prefix-caching-hash-algo, when the replica says


def is_cache_config(family_name: str) -> bool:
    return family_name in (INFO, INFO.removesuffix("_info"))


def cache_info_of(family: Metric) -> CacheInfo | None:
    """The first sample of a ``vllm:cache_config_info`` family with usable labels, or None."""
    for sample in family.samples:
        labels = sample.labels
        try:
            block_size = int(labels["block_size"])
            blocks = int(labels.get("num_gpu_blocks") or labels.get("num_cpu_blocks") or 0)
        except (KeyError, ValueError):
            continue
        if block_size > 0 and blocks > 0:
            return CacheInfo(block_size, blocks, labels.get("prefix_caching_hash_algo"))
    return None


def parse_cache_config(text: str) -> CacheInfo | None:
    """The replica's cache configuration from its ``/metrics`` text, or None."""
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError:
        return None
    for fam in families:
        if is_cache_config(fam.name):
            info = cache_info_of(fam)
            if info is not None:
                return info
    return None
