"""A circuit breaker for one replica: passive outlier detection from real requests' outcomes.

Pure state machine (no I/O, no timers): the caller passes ``now`` and asks ``poll(now)`` when the
open period may have passed. States:

- ``closed``: requests flow. ``transport_failures`` consecutive transport failures (connect refused,
  timeouts, dropped connections) or ``status_failures`` consecutive 5xx answers open it. The two are
  counted apart because a refused connection is a strong signal (the process is gone) while a 5xx can
  be one bad request; any success resets both counts.
- ``open``: the replica is out of the routing set until ``open_until``. The wait doubles each time a
  probe fails, capped at ``max_open_s``, so a flapping replica is retried less and less often, and a
  transient failure costs at most ``open_s``.
- ``half_open``: one request at a time is let through as a probe; ``close_after`` answers below 500
  close the breaker, one failure opens it again with the doubled wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from config.policy import BreakerConfig

BreakerStateName = Literal["closed", "open", "half_open"]
FailureKind = Literal["transport", "status"]

STATE_VALUE: dict[str, int] = {"closed": 0, "half_open": 1, "open": 2}


@dataclass(slots=True)
class Breaker:
    cfg: BreakerConfig
    state: BreakerStateName = "closed"
    transport_failures: int = 0
    status_failures: int = 0
    probe_successes: int = 0
    probe_in_flight: bool = False
    opened_times: int = 0  # consecutive openings without closing: the backoff exponent
    open_until: float = 0.0

    @property
    def allows_routing(self) -> bool:
        """Whether the router may pick this replica now (a half-open breaker admits one probe)."""
        if self.state == "closed":
            return True
        return self.state == "half_open" and not self.probe_in_flight

    def open_period(self) -> float:
        return min(self.cfg.max_open_s, self.cfg.open_s * (2 ** max(0, self.opened_times - 1)))

    def poll(self, now: float) -> bool:
        """Move ``open`` to ``half_open`` once its period has passed; True when the state changed."""
        if self.state == "open" and now >= self.open_until:
            self.state = "half_open"
            self.probe_successes = 0
            self.probe_in_flight = False
            return True
        return False

    def dispatch(self) -> bool:
        """A request is about to be sent. False means refuse it: the breaker is open, or a half-open
        probe is already in flight (the caller fails the attempt fast and retries elsewhere)."""
        if self.state == "closed":
            return True
        if self.state == "half_open" and not self.probe_in_flight:
            self.probe_in_flight = True
            return True
        return False

    def answered(self) -> bool:
        """The replica answered with a status below 500. Resets the 5xx count; in half-open, counts as a
        successful probe. True when the state changed (the breaker closed)."""
        self.status_failures = 0
        if self.state == "half_open":
            self.probe_in_flight = False
            self.probe_successes += 1
            if self.probe_successes >= self.cfg.close_after:
                self.state = "closed"
                self.opened_times = 0
                self.transport_failures = 0
                return True
        return False

    def completed(self) -> None:
        """A whole answer arrived (body or stream to its end): resets the transport failure count.

        Kept apart from ``answered`` so a replica that answers headers and then drops every stream
        still accumulates transport failures."""
        self.transport_failures = 0

    def failure(self, kind: FailureKind, now: float) -> bool:
        """A transport failure or a 5xx. True when the state changed (the breaker opened)."""
        if self.state == "open":
            return False
        if self.state == "half_open":
            self._open(now)
            return True
        if kind == "transport":
            self.transport_failures += 1
        else:
            self.status_failures += 1
        if (
            self.transport_failures >= self.cfg.transport_failures
            or self.status_failures >= self.cfg.status_failures
        ):
            self._open(now)
            return True
        return False

    def _open(self, now: float) -> None:
        self.state = "open"
        self.opened_times += 1
        self.open_until = now + self.open_period()
        self.transport_failures = self.status_failures = 0
        self.probe_in_flight = False
        self.probe_successes = 0
