"""When a replica finishes a request's prefill, predicted where it gives no signal (non-streamed answers).

A streamed answer's first byte is the replica's own signal that its prefill for the request is done,
and the router releases the request's queued prefill then (``PoolRouter.release_prefill``). A
non-streamed answer has none: vLLM and SGLang send the response headers together with the whole body,
once generation ends, so "the headers arrived" is the end of the request, not of its prefill. Left to
the end, a non-streamed request's prefill stays in ``queued_prefill_tokens`` for its whole decode, and
``prefix_affinity`` (which scores replicas by that queue) sees work that is long done.

The prediction: the replica prefills what this process queued on it in order, at a rate ``r`` tokens a
second, so a request whose decision left ``Q`` tokens queued there (its own uncached tokens and
everything queued ahead) is prefilled ``Q / r`` seconds after its decision. ``r`` starts at
``routing.prefill_tokens_per_s`` and is learnt per replica:

- from streamed first bytes: ``Q / (first byte - decision)`` is a sample of the same quantity the
  prediction uses (queue and prefill together), averaged with weight ``ALPHA``; samples below
  ``MIN_SAMPLE_TOKENS`` are dropped (the HTTP round trip, not prefill, dominates them);
- from whole answers: prefill ended before the answer did, so ``r >= Q / (end - decision)``; an
  estimate below that bound is raised to it (this holds with non-streamed traffic only).

A wrong ``r`` costs, either way (``python -m bench.routing_offline --non-stream``, docs/benchmarks.md):
5x too low releases late, towards the old release at the end of the request (never later:
``release``); 5x too high releases prefill the engine has not done, the queue looks empty and a
workload of agents went to one replica (imbalance 4.0). Released at the end, the router's queue was
off from the engine's by 1,184-22,977 tokens on average over five workloads; at the predicted end with
the engine's rate, by 54-579 (streamed first bytes: 60-537).
"""

from __future__ import annotations

from router.replica import ReplicaState

ALPHA = 0.2  # weight of a new first-byte sample in the replica's rate
MIN_SAMPLE_TOKENS = 256  # queued tokens below which a first byte says more of latency than of prefill


def rate_of(replica: ReplicaState, default_tokens_per_s: float) -> float:
    """The replica's prefill rate in tokens a second: learnt, else the configured default."""
    learnt = replica.prefill_tokens_per_s
    return learnt if learnt is not None else default_tokens_per_s


def prefill_due_s(queued_tokens: int, elapsed_s: float, rate: float) -> float:
    """Seconds from now until ``queued_tokens`` (queued at a decision ``elapsed_s`` ago) are prefilled."""
    return max(0.0, queued_tokens / rate - elapsed_s)


def learn_first_byte(replica: ReplicaState, queued_tokens: int, elapsed_s: float) -> None:
    """A streamed first byte ``elapsed_s`` after a decision that left ``queued_tokens`` queued there."""
    if queued_tokens < MIN_SAMPLE_TOKENS or elapsed_s <= 0:
        return
    sample = queued_tokens / elapsed_s
    old = replica.prefill_tokens_per_s
    replica.prefill_tokens_per_s = sample if old is None else old + ALPHA * (sample - old)


def learn_end(replica: ReplicaState, queued_tokens: int, elapsed_s: float, default: float) -> None:
    """A whole answer ended ``elapsed_s`` after its decision: its prefill ran at least this fast."""
    if queued_tokens < MIN_SAMPLE_TOKENS or elapsed_s <= 0:
        return
    bound = queued_tokens / elapsed_s
    if rate_of(replica, default) < bound:
        replica.prefill_tokens_per_s = bound
