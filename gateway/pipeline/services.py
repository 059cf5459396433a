"""What the request path uses of the process that serves it (issue 27, item 3): ``Services``.

A request's context holds the process it is served with (``RequestContext.process``), and the stages
reach through it for the metrics, the hooks, admission, the fair queues, the ledger, budgets, the
advisor, the shared index, tracing, the decision log, the adapter loader and the batches. Typed as
``gateway.process.process.Process``, that one annotation made a type-only import cycle of 33 modules:
the process imports the pipeline (the hooks, ``handler.call``), and every stage imported the process
back through the context. ``Services`` lists those members and nothing else, each typed by a module
below the pipeline (``observability``, ``fleet``, ``cache``, ``router``) or by a small protocol of its
own here where the class that implements it sits above the pipeline: the fair queues
(``process.fair_admission`` imports the pipeline's ``Ticket``), the replica slots
(``process.admission``), the ledger (``process.metering``) and the batches (``batch.service`` drives
lines through ``handler.call``). ``Process`` satisfies it structurally, nothing subclasses it, and
nothing here exists at run time but the protocols themselves (``tests/unit/test_capabilities.py``
checks that the process has every member and that no pipeline module imports the process).

Members are read-only properties: the stages read them and never rebind one, and a read-only member
lets ``Process.fair: FairAdmission`` stand for ``fair: FairQueues`` (a writable attribute would have
to be of the protocol's type exactly). ``state`` is the one ``gateway.process`` type left: the
policy-derived state a request is served with, which the process builds and a reload swaps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Container, Coroutine
    from contextlib import AbstractAsyncContextManager

    from cache.advisor.advisor import Advisor
    from cache.billing.budgets import BudgetCounters
    from cache.billing.explicit import ExplicitRegistry
    from cache.billing.pricing import LineItem
    from config.fairness import FairnessConfig
    from config.policy import LimitsConfig
    from gateway.fleet.adapters import AdapterLoader
    from gateway.fleet.sharing import SharedIndex
    from gateway.observability.decisions import DecisionLog
    from gateway.observability.metrics import GatewayMetrics
    from gateway.observability.tracing import Tracing
    from gateway.pipeline.fairness import Ticket
    from gateway.pipeline.lifecycle import Hooks
    from gateway.process.state import State
    from router.pool import PoolRouter
    from router.types import Decision, OnlineReserve, RouteRequest


class Waiting(Protocol):
    """A place in a queue (``process.admission.Queued``): ``wait`` until woken, else 503."""

    async def wait(self) -> None: ...


class ReplicaSlots(Protocol):
    """Waiting for a replica of a saturated pool to free a slot (``process.admission.Admission``)."""

    def replica_queue(self, pool: str, limits: LimitsConfig) -> AbstractAsyncContextManager[Waiting]: ...

    def replica_released(self, pool: str) -> None: ...


class FairQueues(Protocol):
    """The fair queues of saturated pools (``process.fair_admission.FairAdmission``)."""

    async def route(
        self,
        pool: str,
        router: PoolRouter,
        request: RouteRequest,
        tried: Container[str],
        ticket: Ticket,
        cfg: FairnessConfig,
        limits: LimitsConfig,
        max_tokens: int | None,
    ) -> Decision: ...

    def released(
        self, pool: str, held_s: float | None = None, why: str = "end", band: int | None = None
    ) -> None: ...


class Meter(Protocol):
    """The ledger and the explicit-cache registry (``process.metering.Metering``)."""

    @property
    def registry(self) -> ExplicitRegistry: ...

    async def record(self, item: LineItem) -> bool: ...

    def in_background(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...


class Batches(Protocol):
    """What a request asks of the offline batches (``batch.service.BatchService``)."""

    def online_reserve(self, model: str) -> OnlineReserve | None: ...


class Services(Protocol):
    """The members of the process the request path reads (``gateway.process.process.Process``)."""

    @property
    def state(self) -> State: ...  # the current one: the handler gives it to the request's context

    @property
    def metrics(self) -> GatewayMetrics: ...

    @property
    def hooks(self) -> Hooks: ...

    @property
    def tracing(self) -> Tracing | None: ...

    @property
    def metering(self) -> Meter | None: ...

    @property
    def budgets(self) -> BudgetCounters | None: ...

    @property
    def admission(self) -> ReplicaSlots: ...

    @property
    def fair(self) -> FairQueues: ...

    @property
    def decisions(self) -> DecisionLog: ...

    @property
    def shared(self) -> SharedIndex | None: ...

    @property
    def advisor(self) -> Advisor: ...

    @property
    def adapter_loader(self) -> AdapterLoader: ...

    @property
    def batch(self) -> Batches | None: ...
