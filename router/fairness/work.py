"""A request's predicted work, the unit fair queuing shares: what it will cost the fleet's GPUs.

``work = prefill tokens no replica holds + decode_weight x max output tokens``, in prefill-token
equivalents. Requests are not equal: counting requests, a tenant sending 8k-token prompts takes eight
times the GPU of one sending 1k-token prompts for the same share. The prefill part is what the prefix
index says is not cached anywhere (the longest match over the pool's replicas: where the queue will
release it, ``router.fairness.queue`` prefers that replica). The decode part is the request's own
bound (``max_tokens``, else the policy's default estimate): a generation's length is unknown before
it runs, and the bound is what the client committed to.

``decode_weight`` (``fairness.decode_weight``, default 5): one output token of one sequence costs
the engine a share of a step; from the engine model's constants (``sim.engine.EngineCosts``,
Llama-3-8B on an A100: 9.7 ms a step, 30 us a decoding sequence, 66 us a prefill token), a step
decoding 32 sequences costs 10.7 ms, 0.33 ms a sequence's token: 5 prefill tokens' worth.
"""

from __future__ import annotations


def predicted_work(prompt_tokens: int, matched_tokens: int, max_tokens: int, decode_weight: float) -> float:
    """Prefill-token equivalents of one request (at least 1: every request costs a step's share)."""
    uncached = max(0, prompt_tokens - max(0, matched_tokens))
    return max(1.0, uncached + decode_weight * max(0, max_tokens))
