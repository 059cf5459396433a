"""Business events → the exact set of tags whose entries they remove (pure).

``{"type": "ProductSpecUpdated", "product_id": "iPhone15", "changed_fields": ["battery"]}`` with the
policy mapping ``slot_field: product_id, slot: product, fields: {battery: [query_battery_duration,
query_battery_capacity]}`` removes the entries naming ``product = iphone15`` whose intent is one of
those two (and entries naming the product without an intent), nothing else: the iPhone 15's screen-size
answer stays. A changed field the mapping does not name affects no intent and is reported back
(``ignored_fields``), so a typo in an event producer shows instead of silently removing everything.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cache.semantic.tags import ALL, NO_INTENT, intent_tag, slot_tag
from config.semantic import EventMapping

MAX_CHANGED_FIELDS = 256


class EventError(ValueError):
    """An event this policy cannot apply; ``param`` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class Removal:
    tag: str
    intents: frozenset[str] | None  # index members with these intents are removed; None: all
    bump: tuple[str, ...]  # epoch fields incremented under this tag


@dataclass(slots=True)
class Plan:
    removals: list[Removal] = field(default_factory=list)
    ignored_fields: set[str] = field(default_factory=set)


def plan_event(
    event: Mapping[str, Any],
    mapping: EventMapping,
    all_intents: tuple[str, ...],
    secret: bytes,
    canonical_value: Callable[[str, str], str],
) -> Plan:
    """The removals ``event`` asks for under ``mapping``; ``canonical_value(slot, raw)`` normalises a
    slot value the way the route's extractors write it."""
    changed = event.get("changed_fields")
    if changed is None:
        changed = []
    if not isinstance(changed, list) or not all(isinstance(f, str) for f in changed):
        raise EventError("'changed_fields' must be a list of strings", "changed_fields")
    if len(changed) > MAX_CHANGED_FIELDS:
        raise EventError(f"at most {MAX_CHANGED_FIELDS} changed fields per event", "changed_fields")
    plan = Plan()
    intents: set[str] = set()
    every = not changed and mapping.slot is not None
    for f in changed:
        mapped = mapping.fields.get(f)
        if mapped is None:
            plan.ignored_fields.add(f)
        elif ALL in mapped:
            every = True
        else:
            intents.update(mapped)
    if mapping.slot is None:
        targets = all_intents if every else tuple(sorted(intents))
        plan.removals = [Removal(intent_tag(secret, i), None, (ALL,)) for i in targets]
        return plan
    assert mapping.slot_field is not None
    raw = event.get(mapping.slot_field)
    if not isinstance(raw, str) or not raw.strip():  # 123 is refused, as the message says (issue 31)
        raise EventError(f"'{mapping.slot_field}' must be a non-empty string", mapping.slot_field)
    tag = slot_tag(secret, mapping.slot, canonical_value(mapping.slot, raw))
    if every:
        plan.removals = [Removal(tag, None, (*all_intents, NO_INTENT))]
    elif intents:
        chosen = frozenset(intents | {NO_INTENT})
        plan.removals = [Removal(tag, chosen, tuple(sorted(chosen)))]
    return plan
