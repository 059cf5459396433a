"""What runs beside a request's stages: one file per concern, registered by one table.

The stages (``pipeline.handler``, ``dispatch``, the relays) emit the lifecycle's events
(``pipeline.lifecycle``); the hooks below observe them. A hook reads the request's record and writes
only its own outputs (a ledger row, a metric, a span, a log line, the router's feedback), never a field
a stage reads back: the one exception a stage needs, the trace context an attempt carries, is derived
from the open span when the attempt is sent (``trace.propagation``), not stored by the hook.

``HOOKS`` is the whole registration, in the order the hooks of one event run (an async hook is
awaited before the next). Where the order matters it is said beside the entry; a hook whose resource
the policy leaves out (tracing, a shared index, an advisor that samples nothing) does nothing.
"""

from __future__ import annotations

from gateway.pipeline.hooks import (
    advise,
    billing,
    objectives,
    observe,
    placements,
    refunds,
    routing_feedback,
    trace,
)
from gateway.pipeline.lifecycle import Event, Hook, Hooks

HOOKS: tuple[tuple[Event, Hook], ...] = (
    (Event.ADMITTED, trace.admitted),
    (Event.ROUTING, trace.routing),
    (Event.ROUTED, routing_feedback.count_decision),
    (Event.ROUTED, routing_feedback.record_decision),
    (Event.ROUTED, advise.observe),
    (Event.ROUTED, trace.routed),  # opens the attempt's span, whose context the attempt then carries
    (Event.FIRST_BYTE, routing_feedback.prefill_done),
    (Event.FIRST_BYTE, objectives.objective_outcome),
    (Event.FIRST_BYTE, trace.first_byte),
    (Event.FIRST_BYTE, placements.share),
    (Event.COMPLETED, routing_feedback.observe_usage),
    (Event.COMPLETED, billing.settle),  # awaited: the row is written before the answer's end is sent
    (Event.COMPLETED, trace.answered),
    (Event.FAILED, trace.answered),
    (Event.FINISHED, billing.settle_unfinished),
    (Event.FINISHED, refunds.refund),
    (Event.FINISHED, observe.finished),  # the access log and request metrics, after the row is decided
    (Event.FINISHED, trace.finished),  # last: ends the request's span over everything above
)


TRACE_HOOKS: frozenset[Hook] = frozenset(h for _, h in HOOKS if h.__module__ == trace.__name__)
"""The tracing hooks: each does nothing while the process has no tracing (``process.tracing``, set
once at its start, never by a reload), so a process without it drops them at its start
(``Hooks.drop``): six calls a request (``python -m bench.profile --calls``, issue 30 round 9)."""


def registered_hooks(table: tuple[tuple[Event, Hook], ...] = HOOKS) -> Hooks:
    """A process's hooks: every entry of ``table``, once (``Process.hooks``)."""
    hooks = Hooks()
    for event, hook in table:
        hooks.on(event, hook)
    return hooks
