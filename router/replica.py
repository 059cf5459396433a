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

    def load(self) -> float:
        """Load used for balancing: our own in-flight count, or the replica's report when it is larger.

        Another gateway pod's requests show only in the report; ours show at once in ``in_flight``.
        """
        reported = (self.reported_running or 0.0) + (self.reported_waiting or 0.0)
        return max(float(self.in_flight), reported)
