"""A request's predicted time to first token, from the router's model of each replica's queue.

The router already keeps, per replica, the prefill it queued there (``queued_prefill_tokens``) and a
learnt prefill rate (``router.prefill``: streamed first bytes; ``routing.prefill_tokens_per_s``
until then). A request sent to replica ``r`` now is predicted to see its first token after

    (queued_prefill(r) + its uncached tokens on r) / rate(r) + overhead_s

(the engine prefills what is queued before it, then its own uncached part; ``overhead_s`` is one
engine step, 9.7 ms in the engine model of ``sim.engine``, Llama-3-8B on an A100). A request
that waits at the gateway first waits for a slot: with ``ahead`` requests to be released before it
and ``slots`` slots over the pool, each held ``service_s`` on average (learnt from the pool's
attempts, ``ServiceTime``), it waits ``(ahead + 1) x service_s / slots`` (a fluid approximation:
slots free evenly). The prediction is the best replica's.

A request whose objective is below the prediction is answered at once (429 ``Retry-After``: the
prediction's excess over the objective, at least one second), never queued to fail later: by then it
would have spent its objective waiting and kept a place another request could meet its own in.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass

from router.fairness.saturation import SaturationLimits, free_slots
from router.prefill import rate_of
from router.replica import ReplicaState

ENGINE_STEP_S = 0.0097  # sim.engine.EngineCosts.step_overhead_s (Vidur's Llama-3-8B / A100 profile)


@dataclass(frozen=True, slots=True)
class ReplicaView:
    """What the prediction reads of one replica for one request."""

    queued_prefill_tokens: int
    uncached_tokens: int  # the request's prompt tokens this replica does not hold
    prefill_tokens_per_s: float
    free: bool  # has a slot free now


def on_replica_s(v: ReplicaView, overhead_s: float) -> float:
    return (v.queued_prefill_tokens + v.uncached_tokens) / v.prefill_tokens_per_s + overhead_s


def predict_s(
    views: Iterable[ReplicaView], *, ahead: int, slots: int, service_s: float, overhead_s: float
) -> float:
    """Predicted TTFT of a request: at once on the best free replica when nothing is ahead of it, else
    after its wait for a slot on the best replica. ``inf`` when there is no replica."""
    views = list(views)
    if not views:
        return math.inf
    free = [v for v in views if v.free]
    if free and ahead == 0:
        return min(on_replica_s(v, overhead_s) for v in free)
    wait = (ahead + 1) * service_s / max(1, slots)
    return wait + min(on_replica_s(v, overhead_s) for v in views)


def predict_on_pool(
    replicas: Sequence[ReplicaState],
    prompt_tokens: int,
    matched: Mapping[str, int],
    *,
    limits: SaturationLimits,
    now: float,
    default_rate: float,
    ahead: int,
    service_s: float,
    overhead_s: float,
    exclude: Container[str] = (),
) -> float:
    """``predict_s`` over a pool's healthy replicas for a prompt of ``prompt_tokens`` of which each
    replica holds ``matched[id]`` (``PoolRouter.matches``)."""
    views = [
        ReplicaView(
            r.queued_prefill_tokens,
            max(0, prompt_tokens - matched.get(r.id, 0)),
            rate_of(r, default_rate),
            free_slots(r, limits, now) > 0,
        )
        for r in replicas
        if r.healthy and r.id not in exclude
    ]
    slots = limits.slots * max(1, len(views))
    return predict_s(views, ahead=ahead, slots=slots, service_s=service_s, overhead_s=overhead_s)


def retry_after_s(predicted_s: float, objective_s: float) -> int:
    """Seconds a shed request is told to wait: the predicted excess, at least 1 (an integer header)."""
    if math.isinf(predicted_s):
        return 60
    return max(1, math.ceil(predicted_s - objective_s))


class ServiceTime:
    """How long a request holds a slot, per pool: an exponential average of the attempts' durations
    (weight ``alpha``), ``default_s`` until the first."""

    __slots__ = ("alpha", "value")

    def __init__(self, default_s: float, alpha: float = 0.1) -> None:
        self.value, self.alpha = default_s, alpha

    def observe(self, seconds: float) -> None:
        if seconds >= 0:
            self.value += self.alpha * (seconds - self.value)
