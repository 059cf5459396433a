"""Filters run before the policy picks, in this order, each narrowing the candidates (as llm-d's
filter plugins do): health, the LoRA adapter, the per-replica slot cap, a batch line's planned replica
and share, the explicit pin, an online request's preference for the replicas a running batch leaves
alone. One file a filter; this table registers them."""

from __future__ import annotations

from router.filters.adapter import serves_adapter
from router.filters.base import Filter, FilterContext
from router.filters.healthy import healthy
from router.filters.online_reserve import online_reserve
from router.filters.pin import explicit_pin
from router.filters.planned import planned
from router.filters.slots import below_slot_cap

FILTERS: tuple[Filter, ...] = (healthy, serves_adapter, below_slot_cap, planned, explicit_pin, online_reserve)

__all__ = ["FILTERS", "Filter", "FilterContext"]
