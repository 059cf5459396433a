"""Priority classes: which band a request waits in, as its header asks and its tenant may.

Classes are named by the policy, highest first (default ``interactive``, ``standard``,
``background``); a request names one in ``x-gateway-priority`` (smg's ``x-smg-priority`` is read
too when the policy accepts it), else gets the default class. A tenant has a ceiling
(``fairness.tenants[].max_priority``, else ``fairness.default_max_priority``): a request asking above
it is served at the ceiling, not refused (the header is advice from the client, the ceiling is the
operator's contract), and the answer's ``x-gateway-priority`` says which class it got. A name that is
no class is a client error (400), never silently the default.

Offline batch lines are not a class a client can ask for: they form one band below every class and
carry no tenant (the batch service already shares replicas between batches, ``batch.limits``), so
no online request ever waits behind a batch line at the gateway.

Each class bounds starvation with ``max_wait_s``: a request that has waited that long goes before
any band's fair order (``router.fairness.queue``), so a low class under a steady high-class load still
moves, at least one release per ``max_wait_s`` of its oldest request.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BATCH_BAND = "batch"


@dataclass(frozen=True, slots=True)
class ClassSpec:
    name: str
    rank: int  # 0: the highest band
    max_wait_s: float  # waited this long, the request goes first (starvation bound)
    ttft_s: float | None = None  # the class's TTFT objective (None: none)


class UnknownClass(ValueError):
    """The request named a class the policy does not define."""


@dataclass(frozen=True, slots=True)
class Resolved:
    spec: ClassSpec
    capped: bool  # the request asked for a class above its tenant's ceiling


def resolve(requested: str | None, classes: Sequence[ClassSpec], default: str, ceiling: str) -> Resolved:
    """The class a request waits in: ``requested`` (a class name, or None for ``default``), no higher
    than ``ceiling``. Raises ``UnknownClass`` for a name that is no class."""
    by_name = {c.name: c for c in classes}
    name = default if requested is None or not requested.strip() else requested.strip().lower()
    spec = by_name.get(name)
    if spec is None:
        raise UnknownClass(name)
    top = by_name[ceiling]
    if spec.rank < top.rank:
        return Resolved(top, True)
    return Resolved(spec, False)


def batch_band(classes: Sequence[ClassSpec], max_wait_s: float) -> ClassSpec:
    """The band of offline batch lines: below every class."""
    return ClassSpec(BATCH_BAND, len(classes), max_wait_s, None)
