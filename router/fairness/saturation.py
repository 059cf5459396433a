"""When a replica, and a pool, are full: what the gateway counts and what the replicas report.

A replica has ``slots``: the requests this process sends it at once before it counts as full
(``fairness.slots_per_replica``, else ``limits.max_concurrent_per_replica``). Past them the engine
would still take more, but it runs its queue first come first served: a request sent to a full
engine waits there behind whoever came first, where the gateway can no longer choose the order.
Held at the gateway instead, the order is the fair queue's (``router.fairness.queue``). Slots are
counted on this process's own in-flight requests, as the router's slot filter counts them
(``router.filters.slots``), so "the queue releases a request" and "the router finds a replica with
room" agree exactly.

Two reported signals also make a replica full, when the replica publishes them and the policy sets a
bound: its KV cache usage at or above ``kv_usage`` (new requests would preempt running ones: vLLM
recomputes the last admitted request when its blocks cannot grow) and an engine queue
(``vllm:num_requests_waiting``) longer than ``max_waiting`` (other gateway processes, or the engine
itself, already queue there). A report older than ``max_report_age_s`` says nothing.

``reserved`` slots of each replica are kept for the highest class (as smg reserves slots for its top
priority): a lower class sees ``slots - reserved``. With every slot taken by a flood, an interactive
request waits for the next slot to free, a wait that grows with the decode lengths in the batch;
with a reserved slot it usually finds one free (``python -m bench.fairness``, docs/benchmarks.md).

``headroom`` slots are the other way round: room *above* ``slots`` that only the highest class may
take, for engines whose batch (``max_num_seqs``) holds ``slots + headroom``. Measured in model time
(``python -m bench.fairness``, 2 replicas, 8 slots, a flood at 10 x capacity): of the well-behaved
tenants' p99 TTFT of 0.25 s (3.3 x alone), 0.22 s was the wait at the gateway for a flood request to
end and 0.09 s the engine (their requests wait nowhere else: the slots equal the engine's batch, so
no engine queue forms). A reserved slot takes that slot from the flood whenever no interactive
request holds it (-7 % output tokens); headroom leaves the flood its 8 and keeps 2 more for the
interactive class (p99 1.05 x alone, output 1.02 x today's slot FIFO, 0.86 x a FIFO that gives
everyone the 10 slots: the price is headroom idle while no interactive request needs it).

``max_prefill_tokens`` bounds, below the highest class, the prefill this process has queued on a
replica (sent, first token not yet seen: ``ReplicaState.queued_prefill_tokens``). With larger
batches the rest of the interactive requests' time is the engine step they share with the flood's
prefills: at 32 slots and 2 headroom their engine p99 was 0.151 s (2.0 x alone, the gateway wait 0);
with at most 1,024 lower-class prefill tokens queued per replica, 0.093 s (1.23 x), at 0.975 x the
output of a slot FIFO at 34 slots (``python -m bench.fairness --slots 32 --headroom 2 --max-prefill
1024``). That model held the lower classes until an end; released at the first byte that frees the
room, as the gateway does since round 4, the same run gives 1.48 x at 1,024 and 1.22 x at 256
(docs/benchmarks.md, Issue 28 round 4). On the Mooncake trace at 2 x (8 x 32, two tenants of one
class) a bound of 4,096 halved both tenants' p99 TTFT for 0.003-0.021 of hit rate. The engines' scraped signals are no substitute for either bound: scraped once a second,
"waiting > 0" let 1.7 s of backlog form between scrapes (p99 6.0 s, ``--scraped``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from router.replica import ReplicaState


@dataclass(frozen=True, slots=True)
class SaturationLimits:
    slots: int  # requests in flight (this process) a replica takes before it is full; >= 1
    kv_usage: float | None = None  # reported KV usage at or above which it is full (None: not read)
    max_waiting: float | None = None  # reported engine queue above which it is full (None: not read)
    max_report_age_s: float = 10.0
    reserved: int = 0  # slots of each replica only the highest class may take (smg's reserved slots)
    headroom: int = 0  # slots above ``slots`` only the highest class may take (the engine batch holds them)
    max_prefill_tokens: int | None = None  # below the highest class: more prefill queued is full

    def for_band(self, band: int) -> SaturationLimits:
        """The limits a request of ``band`` sees: the highest class has the headroom above the slots
        too; below it, the reserved slots are none of its room."""
        if band == 0:
            if not self.headroom and self.max_prefill_tokens is None:
                return self
            return replace(self, slots=self.slots + self.headroom, headroom=0, max_prefill_tokens=None)
        if not self.reserved and not self.headroom:
            return self
        return replace(self, slots=max(0, self.slots - self.reserved), reserved=0, headroom=0)


@dataclass(frozen=True, slots=True)
class PoolSaturation:
    free_slots: int  # slots free over the healthy replicas that are not full by their reports
    healthy: int
    full_by_report: frozenset[str]  # replicas full by their reported KV usage or engine queue
    queued_prefill_tokens: int  # this process's prefill queued on the healthy replicas

    @property
    def saturated(self) -> bool:
        return self.free_slots <= 0


def full_for(replicas: Iterable[ReplicaState], limits: SaturationLimits, now: float) -> frozenset[str]:
    """Replicas with no free slot under ``limits``: what a release must not route to."""
    return frozenset(r.id for r in replicas if free_slots(r, limits, now) == 0)


def full_by_report(r: ReplicaState, limits: SaturationLimits, now: float) -> bool:
    """The replica's own last report says it is full (fresh reports only)."""
    if r.reported_at is None or now - r.reported_at > limits.max_report_age_s:
        return False
    kv, waiting = r.reported_kv_usage, r.reported_waiting
    if limits.kv_usage is not None and kv is not None and kv >= limits.kv_usage:
        return True
    return limits.max_waiting is not None and waiting is not None and waiting > limits.max_waiting


def prefill_full(r: ReplicaState, limits: SaturationLimits) -> bool:
    """This process's prefill queued on the replica is past the bound (None: not bounded)."""
    return limits.max_prefill_tokens is not None and r.queued_prefill_tokens > limits.max_prefill_tokens


def free_slots(r: ReplicaState, limits: SaturationLimits, now: float) -> int:
    """Requests the replica may take now: 0 when unhealthy, full by its report or by queued prefill."""
    if not r.healthy or full_by_report(r, limits, now) or prefill_full(r, limits):
        return 0
    return max(0, limits.slots - r.in_flight)


def pool_saturation(replicas: Iterable[ReplicaState], limits: SaturationLimits, now: float) -> PoolSaturation:
    free = healthy = queued = 0
    full: set[str] = set()
    for r in replicas:
        if not r.healthy:
            continue
        healthy += 1
        queued += r.queued_prefill_tokens
        if full_by_report(r, limits, now):
            full.add(r.id)
            continue
        if not prefill_full(r, limits):
            free += max(0, limits.slots - r.in_flight)
    return PoolSaturation(free, healthy, frozenset(full), queued)
