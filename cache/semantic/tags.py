"""Invalidation tags: which index entries and epoch counters one semantic entry belongs to (pure).

A tag is one slot value (``product = iphone15``) or one intent. Its id is an HMAC under the layer's tag
secret, so a Redis key or a metric never shows a slot value (an order number is personal data) and
one event reaches every tenant's entries about that value. Each entry is indexed under every slot value
its question names and under its intent; it also records, per tag, the *epoch* it was computed under:

* ``(slot tag, intent)``: bumped by an event about that slot value for that intent (``-``: an entry
  without an intent, which any event about the value reaches);
* ``(intent tag, "*")``: bumped by an event about the whole intent.

An entry whose recorded epochs differ from the current ones is stale and never served, which closes
the race where a request that started before an event stores its (old) answer after it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

NO_INTENT = "-"
ALL = "*"


@dataclass(frozen=True, slots=True, order=True)
class TagRef:
    tag: str  # tag id (hex)
    field: str  # intent name, NO_INTENT or ALL


def tag_id(secret: bytes, kind: str, *parts: str) -> str:
    mac = hmac.new(secret, kind.encode(), hashlib.sha256)
    for p in parts:
        raw = p.encode()
        mac.update(len(raw).to_bytes(4, "big"))
        mac.update(raw)
    return mac.hexdigest()[:32]


def slot_tag(secret: bytes, slot: str, value: str) -> str:
    return tag_id(secret, "s", slot, value)


def intent_tag(secret: bytes, intent: str) -> str:
    return tag_id(secret, "i", intent)


def entry_refs(secret: bytes, intent: str | None, slots: tuple[tuple[str, str], ...]) -> tuple[TagRef, ...]:
    """The tags (with their epoch field) of an entry with this intent that names these slot values."""
    field = intent or NO_INTENT
    refs = {TagRef(slot_tag(secret, s, v), field) for s, v in slots}
    if intent:
        refs.add(TagRef(intent_tag(secret, intent), ALL))
    return tuple(sorted(refs))
