"""Filters run before the policy picks, each narrowing the candidates (as llm-d's filter plugins do):
health, the LoRA adapter, the per-replica slot cap, a batch line's planned replica and share, the
explicit pin, an online request's preference for the replicas a running batch leaves alone. One file a
filter; this table registers them, in any order: each names the filters whose output it reads
(``Registered.after``), and ``FILTERS`` is their topological sort, computed once here
(``router.filters.base.ordered``)."""

from __future__ import annotations

from router.filters.adapter import SERVES_ADAPTER
from router.filters.base import Filter, FilterContext, Registered, ordered
from router.filters.healthy import HEALTHY
from router.filters.online_reserve import ONLINE_RESERVE
from router.filters.pin import EXPLICIT_PIN
from router.filters.planned import PLANNED
from router.filters.slots import BELOW_SLOT_CAP

# By file name: the order here carries no meaning.
REGISTERED: tuple[Registered, ...] = (
    SERVES_ADAPTER,
    HEALTHY,
    ONLINE_RESERVE,
    EXPLICIT_PIN,
    PLANNED,
    BELOW_SLOT_CAP,
)
ORDER = ordered(REGISTERED)
FILTERS: tuple[Filter, ...] = tuple(f.narrow for f in ORDER)

__all__ = ["FILTERS", "ORDER", "REGISTERED", "Filter", "FilterContext", "Registered"]
