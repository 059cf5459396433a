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

The engine's own queue can order by class too (``models[].engine_priority``): ``engine_priority``
gives the integer the replica's body carries as ``priority``, by band, the highest class earliest and
the batch band latest, with the sign the engine reads. ``vllm``: vLLM's ``--scheduling-policy
priority`` schedules lower values first (``vllm/v1/core/sched/request_queue.py``,
``PriorityRequestQueue``, ordered by ``Request.__lt__``: priority, then arrival), so the band's rank
(0 for the highest class); it is also SGLang's order under ``--schedule-low-priority-values-first``.
``sglang``: SGLang's ``--enable-priority-scheduling`` schedules *higher* values first unless that
flag is given (``python/sglang/srt/server_args.py``: "Requests with higher priority integer values
will be scheduled first by default"), so ``bands - 1 - rank`` (the batch band 0). Non-negative either
way; a vLLM replica also serving requests without the field sees them at 0, the highest class's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

BATCH_BAND = "batch"
ENGINE_PRIORITY = ("none", "vllm", "sglang")


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


def engine_priority(style: str, rank: int, bands: int) -> int | None:
    """The engine's ``priority`` for a request of band ``rank`` among ``bands`` (the classes and the
    batch band), in the engine's sign (see the module); None for ``none`` (nothing is sent)."""
    if style == "vllm":
        return rank
    if style == "sglang":
        return bands - 1 - rank
    if style == "none":
        return None
    raise ValueError(f"engine_priority must be one of {ENGINE_PRIORITY}, got {style!r}")
