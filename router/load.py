"""The bounded-load test of CHWBL placement and the explicit pin: may this replica take one more request?

CHWBL's bound (Mirrokni et al.): after taking the request a replica may hold at most
``ceil(c * (total + 1) / n)`` of the candidates' load. A replica also stops taking work while its
queued uncached prefill tokens exceed a cap. The ring's bounded walk (``chwbl``, ``session``) and the pin
filter ask the same question, so it is answered here once (``prefix_affinity`` scores cost instead).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from router.replica import ReplicaState


def load_bound(total_load: float, n: int, load_factor: float) -> int:
    """Most load one replica may hold after taking this request: ``ceil(c * (total + 1) / n)``."""
    return math.ceil(load_factor * (total_load + 1) / n)


def bound_of(candidates: Sequence[ReplicaState], load_factor: float) -> int:
    return load_bound(sum(r.load() for r in candidates), len(candidates), load_factor)


def fits(replica: ReplicaState, bound: float, max_queued_prefill_tokens: int) -> bool:
    """Taking one more request keeps ``replica`` within ``bound`` and under the prefill-queue cap."""
    return replica.load() + 1 <= bound and replica.queued_prefill_tokens <= max_queued_prefill_tokens
