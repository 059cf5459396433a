"""The latency model: pure arithmetic, no I/O.

TTFT = queue wait (measured, not computed) + uncached prompt tokens × ``prefill_s_per_token`` +
``overhead_s``; then every output token costs ``decode_s_per_token``. Every delay is multiplied by
``speed × slow_factor``; a factor of 0 means no sleep at all.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.config import SimConfig


@dataclass(frozen=True, slots=True)
class Delays:
    """Modelled delays of one request, in seconds, already scaled."""

    prefill_s: float
    per_token_s: float

    @property
    def none(self) -> bool:
        return self.prefill_s == 0.0 and self.per_token_s == 0.0

    def total(self, output_tokens: int) -> float:
        return self.prefill_s + self.per_token_s * output_tokens


def delays(cfg: SimConfig, uncached_tokens: int, slow_factor: float = 1.0) -> Delays:
    """Delays after the queue for a request with ``uncached_tokens`` to prefill."""
    factor = cfg.speed * slow_factor
    if factor == 0.0:
        return Delays(0.0, 0.0)
    prefill = (uncached_tokens * cfg.prefill_s_per_token + cfg.overhead_s) * factor
    return Delays(prefill, cfg.decode_s_per_token * factor)


def kv_blocks_needed(prompt_tokens: int, max_tokens: int, block_size: int) -> int:
    """Blocks a running request holds (prompt plus room for its output), for the usage gauge."""
    return -(-(prompt_tokens + max_tokens) // block_size)
