"""The gateway process: everything that outlives a reload, opened and closed in pairs.

A ``Process`` owns the metrics registry and its listener (``server.metrics_port``), the lifecycle
hooks, the fleet's health (breakers, active verdicts, drains), the Redis client and its pool (when the
policy names Redis, behind one deadline and breaker: ``cache.redis_guard``), the billing ledger,
OpenTelemetry's tracer provider (when the policy turns tracing on), admission, the layout advisor's
sketches, the background tasks (health checks, load scrape, LoRA adapters, discovery, the policy file
watch, KV events), LoRA adapter loads in flight, the offline batches (``batch.enabled``: their job store,
file store and service, whose loop runs them), the draining flag, the operator's file policy, and the
current ``State``: the policy-derived part, which a reload swaps (``swap``).

``open`` and ``close`` run from the app's cleanup context (aiohttp ``cleanup_ctx``): every resource
is registered on an exit stack as it is opened, so ``close`` closes them in reverse order, each once,
whatever failed. Batches are opened last and stopped first: their lines use the request path (the
upstream session, the ledger), and ``stop_batches`` also runs when the drain begins, so another pod (or
this one's restart) can take their leases over at once.

The subsystems it starts receive what they use, not the ``Process``: the current pools and upstream
session as getters (``current_pools``, ``current_session``: a reload swaps both), the fleet's health,
the named tasks (``gateway.fleet.tasks.Tasks``), the settings they read; a reload is typed by what it
drives (``reload.Reloadable``). No fleet or batch module and none of the process's loops names its type
(``tests/unit/test_capabilities.py``), and the request path is typed by what its stages read
(``pipeline.services.Services``, which this class satisfies structurally): the type-only import cycle
through it, 41 modules at 248333a, is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import redis.asyncio as aioredis
from aiohttp import web

from cache.advisor.advisor import Advisor
from cache.billing.budgets import BudgetCounters
from cache.redis_guard import BreakerState, RedisGuard
from cache.store_redis import connect
from config.checks import shares_salted_state
from config.policy import Policy
from gateway.batch.bridge import PoolFleet, request_path
from gateway.batch.files import FileStore
from gateway.batch.metrics import BatchCollector
from gateway.batch.service import BatchService
from gateway.batch.store import open_store
from gateway.fleet import probes, scrape
from gateway.fleet.adapters import AdapterLoader, adapters_loop
from gateway.fleet.counters import CounterLog
from gateway.fleet.discovery import Discovery, start_discovery
from gateway.fleet.kv_events import Listener, start_kv_events, stop_kv_events
from gateway.fleet.pools import Pool
from gateway.fleet.sharing import SharedIndex, open_shared_index
from gateway.fleet.tasks import Tasks
from gateway.observability.decisions import DecisionLog
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.tracing import Tracing, open_tracing
from gateway.pipeline.handler import call
from gateway.pipeline.hooks import TRACE_HOOKS, registered_hooks
from gateway.pipeline.lifecycle import Hooks
from gateway.pipeline.tenant import TenantResolver, server_secret
from gateway.process.admission import Admission
from gateway.process.exposition import exposition, metrics_token, open_listener
from gateway.process.fair_admission import FairAdmission
from gateway.process.metering import Metering, open_metering
from gateway.process.reconcile import reconcile_loop
from gateway.process.reload import reload, watch_file
from gateway.process.state import State, build_state, replaced
from gateway.upstream.health import FleetHealth
from router.pool import PoolRouter

log = logging.getLogger("prefix_gateway")

ShutdownHook = Callable[[], Awaitable[Any]]


@dataclass(eq=False)
class Process:
    initial: Policy  # the policy the process starts with (``state.policy`` is the current one)
    policy_path: str | None = None  # the file a reload (SIGHUP, file watch, admin) reads again
    # The operator's policy: the initial one, then each one read from the file again. An uploaded
    # policy never replaces it. Public endpoints list its models; it allows the upload's variables.
    file_policy: Policy = field(init=False)
    secret: bytes | None = None  # salt secret; from the environment at open when not given
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    hooks: Hooks = field(default_factory=registered_hooks)  # the table of gateway.pipeline.hooks
    resolver: Any = None  # discovery's DNS resolver (None: loop.getaddrinfo); injectable in tests
    worker: int = 0  # index among --workers N: its metrics listener is server.metrics_port + worker
    admission: Admission = field(init=False)
    fair: FairAdmission = field(init=False)  # the queues of saturated pools (fairness.enabled)
    fleet: FleetHealth = field(init=False)
    advisor: Advisor = field(init=False)
    redis: aioredis.Redis | None = None
    metering: Metering | None = None
    # Tenant budgets' counters (billing on): in Redis when the policy names it, else here (cache.billing.budgets).
    budgets: BudgetCounters | None = None
    # The replicas' token counters at window edges (the scrape's), for usage reconciliation.
    usage_counters: CounterLog = field(default_factory=CounterLog)
    batch: BatchService | None = None  # batch.enabled: the Files and Batches API and the runs
    state: State = field(init=False)
    draining: bool = False
    server: web.Server | None = None  # the HTTP server (connection counts for /admin/debug)
    metrics_url: str | None = None  # the /metrics listener (server.metrics_port), once open
    tasks: Tasks = field(default_factory=Tasks)  # the named background tasks
    # model name -> (discovery config it was resolved with, addresses in resolver order)
    discovered: dict[str, tuple[Any, list[str]]] = field(default_factory=dict)
    kv_listeners: list[Listener] = field(default_factory=list)
    shared: SharedIndex | None = None  # placements shared with the other gateway processes
    reload_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    adapter_loader: AdapterLoader = field(default_factory=AdapterLoader)  # LoRA loads in flight
    decisions: DecisionLog = field(default_factory=DecisionLog)  # recent decisions (/admin/routing/explain)
    span_exporter: Any = None  # replaces OTLP when tracing is on (tests: the SDK's in-memory exporter)
    tracing: Tracing | None = None
    # Run in order after in-flight requests drained (or the drain period ended), before the upstream
    # session closes: e.g. flushing something. Exceptions are logged.
    shutdown_hooks: list[ShutdownHook] = field(default_factory=list)
    _retired: list[tuple[asyncio.Task[Any], Callable[[], Awaitable[Any]]]] = field(default_factory=list)
    _batch_loop: asyncio.Task[None] | None = None
    _batch_watch: asyncio.Task[None] | None = None
    _stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)

    def __post_init__(self) -> None:
        self.file_policy = self.initial
        self.admission = Admission(self.metrics)
        self.fair = FairAdmission(self.metrics)
        self.fleet = FleetHealth(self.initial.breaker, self.metrics)
        self.advisor = Advisor.from_policy(self.initial)

    # -- open / close ---------------------------------------------------------------------------------
    async def open(self) -> None:
        policy, stack = self.initial, self._stack
        if self.secret is None:
            self.secret = server_secret(policy.tenancy, required=shares_salted_state(policy))
        if policy.redis.url is not None:
            r = policy.redis
            guard = RedisGuard(
                op_timeout_ms=r.op_timeout_ms,
                breaker_failures=r.breaker_failures,
                probe_interval_ms=r.probe_interval_ms,
                on_state=self._redis_breaker,
            )
            self.redis = connect(r.url, r.socket_timeout_s, r.max_connections, guard)  # type: ignore[arg-type]
            stack.push_async_callback(self.redis.aclose)
        self.metering = await open_metering(policy, self.metrics, self.redis)
        if self.metering is not None:
            self.budgets = BudgetCounters(
                redis=self.redis,
                ledger=self.metering.ledger,
                key_prefix=policy.redis.key_prefix,
                outage_pct=policy.tenancy.budgets.outage_pct,
                on_error=self._budget_redis_error,
            )
            stack.push_async_callback(self.budgets.close)  # after the metering's last rows are counted
            stack.push_async_callback(self.metering.close)
        self.tracing = open_tracing(policy.tracing, self.span_exporter)
        if self.tracing is not None:
            stack.push_async_callback(self.tracing.close)
        else:
            self.hooks.drop(TRACE_HOOKS)  # each would return at once on every request
        self.state, pending = self.build(policy, previous=None)
        for apply in pending:
            apply()
        stack.push_async_callback(self._close_state)
        self.fleet.attach(p.router for p in self.state.pools.values())
        stack.callback(self.fleet.close)
        self.shared = await open_shared_index(policy, self.metrics, self._router_of)
        if self.shared is not None:
            stack.push_async_callback(self.shared.close)
        stack.push_async_callback(self._run_shutdown_hooks)
        stack.push_async_callback(self._stop_tasks)
        self.start_loops(policy)
        start_discovery(self.discovery())
        stack.push_async_callback(self._stop_kv_events)
        self.kv_listeners = await start_kv_events(
            self.current_pools, self.current_session, self.metrics, self.tasks
        )
        server = policy.server
        if server.metrics_port is not None:
            port = server.metrics_port + self.worker if server.metrics_port else 0
            runner, self.metrics_url = await open_listener(
                self.exposition, server.metrics_host, port, metrics_token(server.metrics_token_env)
            )
            stack.push_async_callback(runner.cleanup)
        if policy.batch.enabled:
            await self._open_batches(policy)

    async def _open_batches(self, policy: Policy) -> None:
        cfg, stack = policy.batch, self._stack
        store = await open_store(cfg, self.redis, policy.redis.key_prefix)
        stack.push_async_callback(store.close)
        fleet = PoolFleet(self.current_pools, self._tenants)
        self.batch = BatchService(
            cfg,
            store=store,
            files=FileStore(cfg.dir, cfg.limits),
            fleet=fleet,
            send=request_path(functools.partial(call, self), self._tenants),
            load=fleet.waiting,
            max_line_bytes=policy.limits.max_body_bytes,
        )
        collector = BatchCollector(self.batch)
        self.metrics.registry.register(collector)
        stack.callback(self.metrics.registry.unregister, collector)
        if self.worker == 0:  # one slot pool for each replica's batch share (see workers)
            self._batch_loop = asyncio.ensure_future(self.batch.run())
        if self.batch.watches():  # batch.online_replicas: every process learns where batches run
            self._batch_watch = asyncio.ensure_future(self.batch.watch())
        stack.push_async_callback(self.stop_batches)

    async def stop_batches(self) -> None:
        """Stop running batches (lines in flight cut off, leases released); the API still answers.
        Idempotent: runs when the drain begins and again at close."""
        if self.batch is None:
            return
        await self.batch.close()
        if self._batch_loop is not None:
            await self._batch_loop
        if self._batch_watch is not None:
            await self._batch_watch

    async def close(self) -> None:
        await self._stack.aclose()

    # -- what the subsystems receive ------------------------------------------------------------------
    def current_pools(self) -> Mapping[str, Pool]:
        return self.state.pools

    def current_session(self) -> aiohttp.ClientSession:
        return self.state.upstream.session

    def _tenants(self) -> TenantResolver:
        return self.state.tenants

    def discovery(self) -> Discovery:
        """Discovery's view of this process (built per call: the resolver may be replaced in tests)."""
        return Discovery(
            self.current_pools, self.fleet, self.metrics, self.tasks, self.discovered, self.resolver
        )

    def exposition(self) -> Awaitable[web.Response]:
        """The Prometheus exposition of this process (``/metrics``)."""
        return exposition(self.metrics, self.state, self.metering, self.advisor, self.batch)

    async def _stop_kv_events(self) -> None:
        listeners, self.kv_listeners = self.kv_listeners, []
        await stop_kv_events(listeners, self.tasks)

    def _router_of(self, pool: str) -> PoolRouter | None:
        found = self.state.pools.get(pool)
        return found.router if found is not None else None

    def _budget_redis_error(self, op: str, exc: BaseException) -> None:
        """A budget counter's Redis call failed: counted here until Redis takes it (fails open, bounded)."""
        self.metrics.child(self.metrics.redis_errors, "budgets", op).inc()

    def _redis_breaker(self, state: BreakerState) -> None:
        """The Redis breaker opened (every Redis call now fails at once, its caller failing open or
        as its fail_mode says) or closed (a probe answered)."""
        m = self.metrics
        m.redis_breaker_state.set(2 if state == "open" else 0)
        m.child(m.redis_breaker_transitions, state).inc()
        if state == "open":
            log.warning(
                "Redis missed its deadlines: calls fail at once until a probe answers",
                extra={"event": "redis_breaker_open", "op_timeout_ms": self.initial.redis.op_timeout_ms},
            )
        else:
            log.info("Redis answers again: calls are sent", extra={"event": "redis_breaker_closed"})

    async def _close_state(self) -> None:
        await self.state.upstream.close()
        if self.state.cache is not None:
            await self.state.cache.close()

    async def _run_shutdown_hooks(self) -> None:
        for hook in self.shutdown_hooks:
            try:
                await hook()
            except Exception:
                log.exception("shutdown hook failed", extra={"event": "shutdown_hook_error"})

    # -- a reload's build and swap --------------------------------------------------------------------
    def build(self, policy: Policy, previous: State | None) -> tuple[State, list[Callable[[], None]]]:
        """The state of ``policy`` with what this process owns, carrying over from ``previous``."""
        assert self.secret is not None
        return build_state(
            policy,
            secret=self.secret,
            fleet=self.fleet,
            metrics=self.metrics,
            redis=self.redis,
            discovered=self.discovered,
            pools_now=lambda: self.state.pools,
            previous=previous,
        )

    def swap(self, new: State, pending: list[Callable[[], None]]) -> None:
        """Make ``new`` current (nothing awaited between here and the caller's build), then close what
        the old state owned and the new one does not carry, once the old state's requests had the
        drain period to finish."""
        old = self.state
        self.state = new
        for apply in pending:
            apply()
        self.fleet.reconfigure(new.policy.breaker)
        self.fleet.attach(p.router for p in new.pools.values())
        self.advisor.reconfigure(new.policy)
        drain_s = max(old.policy.server.drain_timeout_s, 1.0)
        for close in replaced(old, new):
            self.retire(close, drain_s)

    # -- background tasks -----------------------------------------------------------------------------
    def start_loops(self, policy: Policy) -> None:
        """(Re)start the loops whose settings come from the policy (they read the pools afresh)."""
        tasks, pools, session = self.tasks, self.current_pools, self.current_session
        for name in ("health", "scrape", "watch", "adapters", "reconcile"):
            tasks.stop(name)
        if policy.health.enabled:
            h = policy.health
            tasks.start(
                "health",
                probes.health_loop(pools, session, self.fleet, h.interval_s, h.timeout_s, h.fails_to_eject),
            )
        if policy.scrape.enabled:
            sc = policy.scrape
            tasks.start(
                "scrape", scrape.scrape_loop(pools, session, self.usage_counters, sc.interval_s, sc.timeout_s)
            )
        rc = policy.billing.reconcile
        self.usage_counters.configure(rc.window_s, rc.windows_kept)
        if policy.scrape.enabled and rc.enabled and self.metering is not None:
            tasks.start(
                "reconcile",
                reconcile_loop(
                    self.metering.ledger,
                    self.usage_counters,
                    lambda: self.state.policy.billing.reconcile,
                    self.metrics,
                ),
            )
        if any(m.lora.discover for m in policy.models):
            tasks.start("adapters", adapters_loop(pools, session))
        if policy.reload.watch_interval_s > 0 and self.policy_path is not None:
            tasks.start(
                "watch",
                watch_file(
                    self.policy_path,
                    lambda: self.file_policy.tenancy.keys_file,
                    lambda: reload(self, source="watch"),
                    policy.reload.watch_interval_s,
                ),
            )

    def retire(self, close: Callable[[], Awaitable[Any]], after_s: float) -> None:
        """Call ``close()`` after ``after_s`` seconds (or at shutdown, whichever comes first)."""

        async def later() -> None:
            await asyncio.sleep(after_s)
            await close()

        entry = (asyncio.ensure_future(later()), close)
        self._retired.append(entry)
        entry[0].add_done_callback(lambda _t: self._retired.remove(entry) if entry in self._retired else None)

    async def _stop_tasks(self) -> None:
        await self.tasks.close()
        retired, self._retired = self._retired, []
        for task, close in retired:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            with contextlib.suppress(Exception):
                await close()


PROCESS = web.AppKey("process", Process)


def process_context(process: Process) -> Callable[[web.Application], AsyncIterator[None]]:
    """The app's cleanup context: open the process at startup, close it at cleanup (after the drain)."""

    async def ctx(_app: web.Application) -> AsyncIterator[None]:
        try:
            await process.open()
            yield
        finally:
            await process.close()

    return ctx


def add_shutdown_hook(app: web.Application, hook: Callable[[web.Application], Awaitable[Any]]) -> None:
    """Run ``hook(app)`` at shutdown, after the drain and before the upstream session closes."""
    app[PROCESS].shutdown_hooks.append(lambda: hook(app))
