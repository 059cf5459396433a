"""The gateway's KV-event listeners, feeding each precise pool's exact index (``router.exact_index``)
from its replicas' vLLM KV-cache events, in either of vLLM's two set-ups:

- ``kv_events.mode: connect``: each replica binds its publisher (``"endpoint": "tcp://*:5557"``) and
  every gateway process connects a SUB socket of its own to every replica (``Listener`` named
  ``connect``): every worker of ``--workers N`` and every pod gets every event, with no shared state. A
  socket per replica, so replicas need no topics of their own; discovery adds and removes sockets.
- ``kv_events.mode: bind``: the gateway binds one SUB socket per ``kv_events.bind`` and every replica
  connects to it, each under its own topic (``routing.kv_events.topics``, default the replica id). With
  several worker processes only the first binds; the others log it and route approximately.

Per replica the sequence numbers are checked: a gap asks the replica's replay socket (``kv_events.replay``,
or ``replay_port`` in connect mode) for the missed batches; when that is not configured or does not
answer in time, the replica's entries are purged (the router uses its approximate index for it until
its next batch). A sequence that restarts from 0 means the replica restarted: purge, then follow. On
the first batch of a replica with a replay socket (a process that joins, a replica that discovery
adds) the listener also asks for everything from 0, to learn what the replica stored before.

Lifecycle: ``start_kv_events`` at the end of startup returns the listeners, ``stop_kv_events`` stops
them at cleanup. They receive what they use of the process (the current pools and upstream session,
its metrics, its tasks), not the ``Process``. A listener reads the current pools at every message, so a
policy reload keeps the indexes (per pool name) and re-attaches them to the new routers; changing
``kv_events.bind`` needs a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import aiohttp

from config.routing import KvEventsConfig
from gateway.fleet.pools import CurrentPools, CurrentSession
from gateway.fleet.tasks import Tasks
from gateway.fleet.vllm_info import parse_cache_config
from router.exact_index import ExactIndex
from router.kv_events import (
    ApplyStats,
    Batch,
    DecodeError,
    SeqTracker,
    SeqVerdict,
    apply_events,
    decode_batch,
)

try:  # the 'precise' extra; only needed when a pool routes precisely
    import zmq
    import zmq.asyncio
except ImportError:  # pragma: no cover - the dev extra installs it
    zmq = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics

log = logging.getLogger("prefix_gateway")
END_SEQ = -1
_POLL_MS = 1000


@dataclass(slots=True)
class Route:
    pool: str
    replica_id: str
    block_size: int | None
    replay: str | None
    topic: bytes | None = None  # the topic its replay answers carry (None: any, a socket of its own)
    endpoint: str | None = None  # connect mode: the replica's publisher


CONNECT = "connect"  # the name of the listener that connects to the replicas' bound publishers


UNKNOWN_TOPICS_LOGGED = 64  # distinct unknown topics warned about per socket (then only counted)


@dataclass
class Listener:
    """One bound SUB socket (``bind``), or one SUB socket connected to each replica (``connect``), and
    everything they feed. Routes and sequence trackers are keyed by topic on a bound socket, by
    ``pool/replica`` on connected ones."""

    pools: CurrentPools  # read afresh: a reload swaps them
    session: CurrentSession
    metrics: GatewayMetrics
    bind: str  # the bound endpoint, or CONNECT
    ctx: zmq.asyncio.Context
    sock: zmq.asyncio.Socket | None  # the bound socket (None: connect mode)
    indexes: dict[str, ExactIndex] = field(default_factory=dict)  # pool name -> its exact index
    trackers: dict[bytes, SeqTracker] = field(default_factory=dict)
    stats: dict[str, ApplyStats] = field(default_factory=dict)
    routes: dict[bytes, Route] = field(default_factory=dict)
    mismatched: set[str] = field(default_factory=set)  # replicas whose hashes can never match ours
    subs: dict[bytes, tuple[str, zmq.asyncio.Socket]] = field(default_factory=dict)  # connect: endpoint, SUB
    _poller: zmq.asyncio.Poller | None = None
    unknown: set[bytes] = field(default_factory=set)  # topics warned about (bounded: UNKNOWN_TOPICS_LOGGED)
    _signature: int = 0
    replay_timeout_s: float = 1.0

    @property
    def connects(self) -> bool:
        return self.sock is None

    # -- the pools this socket serves (re-read after a reload) -------------------------------------------
    def refresh(self) -> None:
        """Re-read the pools when the state (reload) or a pool's replicas (discovery) changed."""
        pools = self.pools()
        signature = hash(
            (
                id(pools),
                *((name, id(p.router), *(r.id for r in p.router.replicas)) for name, p in pools.items()),
            )
        )
        if signature == self._signature:
            return
        self._signature = signature
        routes: dict[bytes, Route] = {}
        for name, pool in pools.items():
            rc = pool.cfg.routing
            ke = rc.kv_events
            if rc.index != "precise" or ke is None or _listener_of(ke) != self.bind:
                continue
            idx = self.indexes.get(name)
            if idx is None:
                idx = self.indexes[name] = ExactIndex(ke.speculative_ttl_s)
            idx.speculative_ttl_s = ke.speculative_ttl_s
            self.replay_timeout_s = ke.replay_timeout_s
            pool.router.attach_exact(idx)
            for r in pool.router.replicas:
                replay = ke.replay_of(r.id, r.url)
                if self.connects:
                    key = f"{name}/{r.id}".encode()
                    routes[key] = Route(
                        name, r.id, rc.engine_block_size, replay, None, ke.endpoint_of(r.id, r.url)
                    )
                else:
                    topic = ke.topic_of(r.id).encode()
                    routes[topic] = Route(name, r.id, rc.engine_block_size, replay, topic)
        self.routes = routes
        if self.connects:
            self._connect()

    def _connect(self) -> None:
        """Connect mode: one SUB socket per replica (a new one when its endpoint changed), none for a
        replica that is gone (its sequence is forgotten: a replica that comes back is replayed)."""
        for key, route in self.routes.items():
            assert route.endpoint is not None
            held = self.subs.get(key)
            if held is not None and held[0] == route.endpoint:
                continue
            if held is not None:
                held[1].close(0)
                self.trackers.pop(key, None)
            sock = self.ctx.socket(zmq.SUB)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RCVHWM, 100_000)
            sock.setsockopt(zmq.SUBSCRIBE, b"")
            sock.connect(route.endpoint)  # ZMQ connects in the background and reconnects after a restart
            self.subs[key] = (route.endpoint, sock)
        for key in set(self.subs) - set(self.routes):
            self.subs.pop(key)[1].close(0)
            self.trackers.pop(key, None)
        poller = zmq.asyncio.Poller()
        for _, sock in self.subs.values():
            poller.register(sock, zmq.POLLIN)
        self._poller = poller

    # -- the loop ----------------------------------------------------------------------------------------
    async def run(self) -> None:
        metrics = self.metrics
        try:
            while True:
                self.refresh()
                if self.sock is not None:
                    if await self.sock.poll(_POLL_MS):
                        await self.handle(await self.sock.recv_multipart(), metrics)
                    continue
                if not self.subs or self._poller is None:
                    await asyncio.sleep(_POLL_MS / 1000)
                    continue
                ready = dict(await self._poller.poll(_POLL_MS))
                for key, (_, sock) in list(self.subs.items()):
                    if sock in ready:
                        await self.handle(await sock.recv_multipart(), metrics, key)
        finally:
            self.close()

    async def inspect(self, timeout_s: float = 2.0) -> None:
        """Once at start: each replica's ``vllm:cache_config_info``. A replica whose block size or hash
        algorithm differs from the pool's routing can never match the gateway's hashes: an error is
        logged and its events are ignored (it is routed approximately). Its KV capacity bounds the
        approximate index when the policy gives none."""
        pools = self.pools()
        targets = []
        for route in self.routes.values():
            pool = pools[route.pool]
            replica = pool.router.replica(route.replica_id)
            if replica is not None:
                targets.append((pool, replica))
        session = self.session()
        texts = await asyncio.gather(*(_metrics_text(session, r.url, timeout_s) for _, r in targets))
        for (pool, r), text in zip(targets, texts, strict=True):
            info = parse_cache_config(text) if text else None
            if info is None:
                continue
            rc = pool.cfg.routing
            problems = []
            if info.block_size != rc.engine_block_size:
                problems.append(f"block size {info.block_size}, engine_block_size {rc.engine_block_size}")
            if info.hash_algo is not None and info.hash_algo != rc.hash_algo:
                problems.append(f"hash algo {info.hash_algo}, hash_algo {rc.hash_algo}")
            if problems:
                self.mismatched.add(r.id)
                log.error(
                    "kv events: replica cannot be matched precisely, routing it approximately",
                    extra={"event": "kv_events_mismatch", "replica": r.id, "problems": problems},
                )
            if r.kv_capacity_blocks is None:
                pool.router.set_capacity(r.id, max(1, info.num_blocks * info.block_size // rc.block_size))

    async def catch_up(self) -> None:
        """At start, ask each replica with a replay socket for its whole buffer (concurrently, each
        bounded by ``replay_timeout_s``): what it stored before this gateway bound is then known before
        the first request, and the replica is live without waiting for its next event."""
        metrics = self.metrics
        todo = [(t, r) for t, r in self.routes.items() if r.replay and r.replica_id not in self.mismatched]
        results = await asyncio.gather(*(self.replay(r, 0, None) for _, r in todo))
        for (topic, route), batches in zip(todo, results, strict=True):
            if batches is None:
                continue
            index = self.indexes[route.pool]
            index.mark_live(route.replica_id)
            tracker = self.trackers.setdefault(topic, SeqTracker())
            for seq, batch in batches:
                self.apply(route, index, batch)
                tracker.advance(seq, batch.ts)
            metrics.child(metrics.kv_event_gaps, route.replica_id, "caught_up").inc()

    async def handle(self, frames: list[bytes], metrics: GatewayMetrics, key: bytes | None = None) -> None:
        """One published message; ``key``: the replica's socket it came on (connect mode), else its topic."""
        if len(frames) != 3 or len(frames[1]) != 8:
            metrics.child(metrics.kv_event_errors, "frames").inc()
            return
        topic, seq = key or frames[0], int.from_bytes(frames[1], "big", signed=True)
        route = self.routes.get(topic)
        if route is None:
            metrics.child(metrics.kv_event_errors, "unknown_topic").inc()
            if topic not in self.unknown and len(self.unknown) < UNKNOWN_TOPICS_LOGGED:
                self.unknown.add(topic)
                known = sorted(t.decode(errors="replace") for t in self.routes)
                log.warning(
                    "KV events arrive under a topic no replica of a precise pool publishes: they are "
                    "dropped, and that replica is routed by the approximate index only; make "
                    "routing.kv_events.topics (default: the replica id) match the replicas' "
                    f"--kv-events-config topics (known here: {known})",
                    extra={
                        "event": "kv_events_unknown_topic",
                        "topic": topic.decode(errors="replace")[:128],
                        "known": known,
                        "bind": self.bind,
                    },
                )
            return
        if route.replica_id in self.mismatched:
            metrics.child(metrics.kv_event_errors, "mismatched_replica").inc()
            return
        try:
            batch = decode_batch(frames[2])
        except DecodeError:
            metrics.child(metrics.kv_event_errors, "decode").inc()
            return
        index = self.indexes[route.pool]
        tracker = self.trackers.setdefault(topic, SeqTracker())
        verdict = tracker.check(seq, batch.ts)
        rid = route.replica_id
        if verdict is SeqVerdict.DUPLICATE:
            return
        if verdict is SeqVerdict.RESTART:
            index.purge(rid)
            metrics.child(metrics.kv_event_gaps, rid, "restart").inc()
        if seq > 0 and verdict is not SeqVerdict.APPLY and (verdict is SeqVerdict.GAP or route.replay):
            # Missed batches: after a gap, before the first batch seen, or of a restarted replica.
            start = tracker.expected if verdict is SeqVerdict.GAP and tracker.expected is not None else 0
            missed = await self.replay(route, start, seq) if route.replay else None
            if missed is None:
                if verdict is SeqVerdict.GAP:
                    index.purge(rid)
                    metrics.child(metrics.kv_event_gaps, rid, "purged").inc()
            else:
                for _, b in missed:
                    self.apply(route, index, b)
                metrics.child(metrics.kv_event_gaps, rid, "replayed").inc()
        self.apply(route, index, batch)
        tracker.advance(seq, batch.ts)
        metrics.child(metrics.kv_event_batches, rid).inc()
        metrics.child(metrics.kv_event_blocks, rid).set(index.stats().held.get(rid, 0))

    def apply(self, route: Route, index: ExactIndex, batch: Batch) -> None:
        stats = self.stats.setdefault(route.replica_id, ApplyStats())
        before = stats.block_size_mismatch
        apply_events(index, route.replica_id, batch.events, route.block_size, stats)
        if stats.block_size_mismatch > before and before == 0:
            log.warning(
                "kv events: block size differs from engine_block_size",
                extra={
                    "event": "kv_events_block_size",
                    "replica": route.replica_id,
                    "seen": sorted(stats.block_sizes),
                },
            )

    async def replay(self, route: Route, start: int, end: int | None) -> list[tuple[int, Batch]] | None:
        """Batches ``start <= seq < end`` (``end`` None: all the replica buffered) from its replay socket,
        in order, or None when incomplete or unanswered in time."""
        assert route.replay is not None
        dealer = self.ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        got: dict[int, Batch] = {}
        try:
            dealer.connect(route.replay)
            await dealer.send_multipart([b"", start.to_bytes(8, "big")])
            deadline = time.monotonic() + self.replay_timeout_s
            for _ in range(1_000_000):  # bounded: the publisher's buffer holds at most its buffer_steps
                left = deadline - time.monotonic()
                if left <= 0 or not await dealer.poll(int(left * 1000) + 1):
                    return None
                frames = await dealer.recv_multipart()
                if len(frames) != 4:
                    return None
                _, t, seq_b, payload = frames
                seq = int.from_bytes(seq_b, "big", signed=True)
                if seq == END_SEQ:
                    break
                if (route.topic is None or t == route.topic) and seq >= start and (end is None or seq < end):
                    got[seq] = decode_batch(payload)
        except (zmq.ZMQError, DecodeError):
            return None
        finally:
            dealer.close(0)
        seqs = sorted(got)
        if end is not None and seqs != list(range(start, end)):
            return None
        if end is None and seqs and seqs != list(range(seqs[0], seqs[-1] + 1)):
            return None
        return [(s, got[s]) for s in seqs]

    def close(self) -> None:
        if self.sock is not None and not self.sock.closed:
            self.sock.close(0)
        for _, sock in self.subs.values():
            sock.close(0)
        self.subs.clear()


async def _metrics_text(session: aiohttp.ClientSession, url: str, timeout_s: float) -> str | None:
    try:
        async with session.get(url + "/metrics", timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return await resp.text() if resp.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, OSError, UnicodeDecodeError):
        return None


def _listener_of(ke: KvEventsConfig) -> str:
    return CONNECT if ke.mode == "connect" else ke.bind


def _binds(pools: CurrentPools) -> Iterable[str]:
    """The listeners the precise pools need: each distinct bound endpoint, and CONNECT."""
    seen: list[str] = []
    for pool in pools().values():
        rc = pool.cfg.routing
        if rc.index == "precise" and rc.kv_events is not None and _listener_of(rc.kv_events) not in seen:
            seen.append(_listener_of(rc.kv_events))
    return seen


async def start_kv_events(
    pools: CurrentPools, session: CurrentSession, metrics: GatewayMetrics, tasks: Tasks
) -> list[Listener]:
    """Bind a SUB socket per distinct ``kv_events.bind`` of the precise pools, connect one to each
    replica of the pools in connect mode, and start listening (a task each, in ``tasks``)."""
    listeners: list[Listener] = []
    ctx: zmq.asyncio.Context | None = None
    binds = list(_binds(pools))
    if binds and zmq is None:
        raise RuntimeError(
            "routing index 'precise' needs pyzmq and msgpack (pip install 'prefix-gateway[precise]')"
        )
    for bind in binds:
        ctx = ctx or zmq.asyncio.Context()
        if bind == CONNECT:
            listeners.append(await _started(tasks, Listener(pools, session, metrics, bind, ctx, None)))
            continue
        sock = ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, 100_000)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        try:
            sock.bind(bind)
        except zmq.ZMQError as exc:
            sock.close(0)
            log.warning(
                "kv events: cannot bind, routing approximately",
                extra={"event": "kv_events_bind_failed", "bind": bind, "error": str(exc)},
            )
            continue
        listeners.append(await _started(tasks, Listener(pools, session, metrics, bind, ctx, sock)))
    if not listeners and ctx is not None:
        ctx.term()
    return listeners


async def _started(tasks: Tasks, listener: Listener) -> Listener:
    listener.refresh()
    await listener.inspect()
    await listener.catch_up()
    tasks.start(f"kv_events:{listener.bind}", listener.run())
    return listener


async def stop_kv_events(listeners: list[Listener], tasks: Tasks) -> None:
    """Stop these listeners: cancel their loops, close the sockets."""
    for listener in listeners:
        task = tasks.stop(f"kv_events:{listener.bind}")
        if task is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        listener.close()
    if listeners:
        listeners[0].ctx.term()
