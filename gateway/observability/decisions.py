"""The recent routing decisions of this process, for ``GET /admin/routing/explain``.

A bounded ring buffer of ``limits.explain_decisions`` requests (oldest out first), each with the
explanation of every attempt's decision (``router.explain``: score terms, weights, why the winner won)
and what the chosen replica then reported cached. Keyed by the gateway's request id
(``x-gateway-request-id``); the client's ``x-request-id`` finds every kept request that carried it.
Ids evicted from the buffer are remembered (ids only, ``EVICTED_MEMORY`` times the limit) so that the
endpoint can say "evicted" rather than "unknown". With ``fairness.enabled`` each attempt also says how it
went through the pool's fair queue (``fair_queue``: class, seconds waited, the event that released it:
``direct``, ``arrival``, ``end``, ``prefill`` (a queued prefill released: a first byte), ``tick`` or ``give_back``). Nothing of the prompt is
kept: replica ids and numbers.

One explanation costs a decision about 7 µs with 4 candidates (tuples; the records are built when read);
``explain_decisions: 0`` turns it off (the routers then build none).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from router.explain import Explanation

EVICTED_MEMORY = 8  # ids remembered after eviction, as a multiple of the buffer's size


@dataclass(slots=True, eq=False)
class Recorded:
    request_id: str
    client_request_id: str | None
    model: str
    at: float  # wall clock of the first decision
    attempts: list[tuple[Explanation, str]] = field(default_factory=list)  # (explanation, attempt outcome)
    queued: list[tuple[str, float, str] | None] = field(default_factory=list)  # per attempt: FairQueue
    cached_tokens: int | None = None  # what the last attempt's replica reported (usage.cached_tokens)

    def as_json(self) -> dict[str, Any]:
        last = self.attempts[-1][0] if self.attempts else None
        return {
            "request_id": self.request_id,
            "client_request_id": self.client_request_id,
            "model": self.model,
            "at": self.at,
            "replica": last.chosen if last is not None else None,
            "available_tokens": last.available_tokens if last is not None else None,
            "reported_cached_tokens": self.cached_tokens,
            "attempts": [
                {**e.as_json(), "outcome": outcome, **_fair_queue(q)}
                for (e, outcome), q in zip(self.attempts, self.queued, strict=True)
            ],
        }


def _fair_queue(q: tuple[str, float, str] | None) -> dict[str, Any]:
    """The attempt's way through the fair queue (``fairness.enabled``): its class, seconds waited and
    the event that released it (``gateway.process.fair_admission``)."""
    if q is None:
        return {}
    return {"fair_queue": {"class": q[0], "waited_s": q[1], "released_by": q[2]}}


class DecisionLog:
    def __init__(self) -> None:
        self._kept: OrderedDict[str, Recorded] = OrderedDict()
        self._evicted: OrderedDict[str, str | None] = OrderedDict()  # request id -> client request id

    def __len__(self) -> int:
        return len(self._kept)

    def record(
        self,
        request_id: str,
        client_request_id: str | None,
        model: str,
        explanation: Explanation,
        limit: int,
        queued: tuple[str, float, str] | None = None,
    ) -> None:
        """An attempt's decision (a request's retries append to its record), with its way through the
        fair queue (class, seconds waited, what released it) when it took one."""
        if limit <= 0:
            return
        rec = self._kept.get(request_id)
        if rec is None:
            rec = self._kept[request_id] = Recorded(request_id, client_request_id, model, time.time())
        rec.attempts.append((explanation, "sent"))
        rec.queued.append(queued)
        while len(self._kept) > limit:
            gone, old = self._kept.popitem(last=False)
            self._evicted[gone] = old.client_request_id
            while len(self._evicted) > EVICTED_MEMORY * limit:
                self._evicted.popitem(last=False)

    def outcome(self, request_id: str, outcome: str) -> None:
        """The last attempt ended so (``failed: <kind>``: the request was retried or failed)."""
        rec = self._kept.get(request_id)
        if rec is not None and rec.attempts:
            rec.attempts[-1] = (rec.attempts[-1][0], outcome)

    def reported(self, request_id: str, cached_tokens: int) -> None:
        rec = self._kept.get(request_id)
        if rec is not None:
            rec.cached_tokens = cached_tokens

    def find(self, key: str) -> list[Recorded] | None:
        """The kept requests of a gateway request id or a client request id ([] when only evicted ones
        had it; None when none ever did, as far as this process remembers)."""
        rec = self._kept.get(key)
        if rec is not None:
            return [rec]
        found = [r for r in self._kept.values() if r.client_request_id == key]
        if found:
            return found
        if key in self._evicted or key in self._evicted.values():
            return []
        return None
