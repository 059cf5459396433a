"""What the router knows of one replica: identity, health and load."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, eq=False)
class ReplicaState:
    """Mutable per-process view of a replica.

    ``in_flight`` and ``queued_prefill_tokens`` are counted by this process at decision time, so that a
    burst does not herd onto one replica before any replica metric could tell. ``reported_*`` come from
    the replica's own ``/metrics`` and include the load of every other gateway process.
    """

    id: str
    url: str
    kind: str = "vllm"
    weight: float = 1.0
    kv_capacity_blocks: int | None = None
    healthy: bool = True
    in_flight: int = 0
    queued_prefill_tokens: int = 0
    reported_running: float | None = None
    reported_waiting: float | None = None
    reported_kv_usage: float | None = None
    reported_at: float | None = None  # router clock time of the last report
    in_flight_at_report: int = 0  # our own in-flight count when that report was read
    adapters: frozenset[str] = frozenset()  # LoRA adapters it serves (its /v1/models, or loaded by us)
    prefill_tokens_per_s: float | None = None  # learnt prefill rate (router.prefill); None: the default

    def load(self) -> float:
        """Load used for balancing: our own in flight now, plus what the replica's last report shows of
        everyone else's (the report minus our own in flight at the time it was read).

        A report is up to a scrape interval old; taken as a whole (``max(ours, report)``) it keeps counting
        requests of ours that finished since, which overstates the load exactly where a single gateway
        sends its traffic and breaks the bounded-load guarantee (``python -m bench.routing``, scrape
        ablation). Only the other pods' part needs the report: ours is exact at decision time.
        """
        if self.reported_running is None and self.reported_waiting is None:
            return float(self.in_flight)
        reported = (self.reported_running or 0.0) + (self.reported_waiting or 0.0)
        return self.in_flight + max(0.0, reported - self.in_flight_at_report)
