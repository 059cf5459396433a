"""A request's lifecycle as named events, and the hooks registered on them.

Billing, tenant limits, routing feedback, metrics and the access log are not called by the stages
of the pipeline: each registers hooks here once, when the process is built, and the pipeline emits
the events as they happen. Nothing is stored in the request's data to be called back later.

Events, in the order one request can see them:

- ``admitted``: the request passed tenancy, validation and its tenant's limits; the cache decides next.
- ``routing``: the request goes to the fleet for an attempt (a replica is being picked, a slot awaited).
- ``routed``: a replica was picked for an attempt (``ctx.decision`` is that attempt's).
- ``first_byte``: the replica's first byte arrived (its prefill for this request is done).
- ``completed``: a 200 answer is complete and its end (the JSON body, a stream's ``[DONE]`` or its
  error event) is about to be written: what the ledger must hold is written now, before the client
  can see the end.
- ``failed``: the request ends with an error status (the gateway's or a replica's).
- ``cancelled``: the client went away before the answer ended.
- ``finished``: always last, once the response is written (or abandoned): a generation that did not
  complete is billed, limits are settled, the request is counted and logged.

Hooks run in registration order; an async hook is awaited before the next runs.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Collection
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gateway.pipeline.context import RequestContext


class Event(enum.Enum):
    ADMITTED = "admitted"
    ROUTING = "routing"
    ROUTED = "routed"
    FIRST_BYTE = "first_byte"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    FINISHED = "finished"

    # Enum's ``__hash__`` is a Python function (``hash(self._name_)``): two calls each time ``emit``
    # looks an event up, 12 a request (``python -m bench.profile --calls``). Members are singletons
    # compared by identity, so the identity hash is as good and costs no call.
    __hash__ = object.__hash__


Hook = Callable[["RequestContext"], Awaitable[Any] | None]


class Hooks:
    """The hooks of one process, per event."""

    def __init__(self) -> None:
        # (hook, whether it is a coroutine function): decided once here, not per call (``isawaitable``
        # on every result was most of ``emit``'s own cost in a profile).
        self._hooks: dict[Event, list[tuple[Hook, bool]]] = {e: [] for e in Event}
        # The events some hook observes: a stage may skip emitting one that none does (``admitted``
        # and ``routing`` are the trace hooks' alone, dropped without tracing: 2 calls a request).
        self.live: set[Event] = set()

    def on(self, event: Event, hook: Hook) -> None:
        self._hooks[event].append((hook, inspect.iscoroutinefunction(hook)))
        self.live.add(event)

    def drop(self, hooks: Collection[Hook]) -> None:
        """Unregister ``hooks`` from every event: those a process knows at its start would do nothing
        (``gateway.pipeline.hooks.TRACE_HOOKS`` without tracing), so that no request calls them."""
        for event, registered in self._hooks.items():
            self._hooks[event] = [(h, a) for h, a in registered if h not in hooks]
        self.live = {e for e, registered in self._hooks.items() if registered}

    async def emit(self, event: Event, ctx: RequestContext) -> None:
        for hook, is_async in self._hooks[event]:
            if is_async:
                await hook(ctx)  # type: ignore[misc]
            else:
                result = hook(ctx)
                if result is not None and inspect.isawaitable(result):  # a plain function returning one
                    await result
