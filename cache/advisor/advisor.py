"""The advisor: one bounded sketch per (tenant, model), sampled observation, windows, the advice document.

Request path (phase 2 wires it after routing): ``if advisor.sampled(): advisor.observe(...)``. The
unsampled path costs one random draw; a sampled observation is O(prompt) (about 150 µs for a
1,400-token prompt on this machine, ``python -m bench.advisor``), so the average stays at a few µs at
the default 1 % rate.

Memory is bounded by construction: at most ``max_sketches`` sketches (the least recently observed is
dropped past it), each within ``SketchShape.memory_bound_bytes``; plus one price-free snapshot per
(tenant, model) of its last complete window. A sketch older than ``window_s`` is frozen into that
snapshot and restarted, so advice follows the tenant's current layout within a window.

Findings come from the current sketch once it has ``min_requests`` observations, else from the last
complete window. Nothing here does I/O; ``clock`` and ``rand`` are injectable for tests.

Pricing off the event loop. Findings replay the ring of recent requests through the billing rules
(``cache.advisor.replay``): 0.3-2.4 s for a full ring of long prompts. Run on the event loop, that
replay stalled every request of the process for as long (``/health`` unanswered for 1.7 s,
``tests/integration/test_advisor_stall.py``). ``advice_async`` runs it in a worker thread
(``asyncio.to_thread``) on the ``Snapshot``, which is immutable (tuples, frozen dataclasses, read-only
arrays that the sketch never writes again), so ``observe`` goes on appending to the live sketch while
the worker reads. A thread, not a process pool: the replay holds the GIL, but the interpreter hands it
to the loop every switch interval (5 ms), so the loop's longest wait stays a few switch intervals
(``/health``'s longest gap measured by the same test: see docs/advisor.md), with no pickling of a
2 MB ring and no process to keep. One computation at a time (a lock): a second replay in parallel
would only share the same GIL. While one runs, requests are answered from the cached findings (the
document says ``computing`` and what they were priced on); only a (tenant, model) with no findings of
its current window yet waits for its computation (off the loop).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from cache.advisor.findings import Finding, Pricing, price, requests_per_day
from cache.advisor.sketch import Sketch, SketchShape, Snapshot, sketch_seed
from cache.billing.pricing import ModelPrices, Rules, prices_from_config, rules_from_config
from config.advisor import AdvisorConfig

if TYPE_CHECKING:
    from config.policy import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class ModelSpec:
    shape: SketchShape
    rules: Rules
    prices: ModelPrices


def specs_from_policy(policy: Policy) -> dict[str, ModelSpec]:
    """Per model pool: sketch sizes from ``advisor`` and its routing blocks, rules and prices from billing."""
    cfg = policy.advisor
    out = {}
    for pool in policy.models:
        rules = rules_from_config(policy.billing, pool.name)
        routing = pool.routing
        shape = SketchShape(
            block_size=routing.block_size,
            positions=max(1, routing.max_prefix_tokens // routing.block_size),
            table_slots=cfg.table_slots,
            chunk_bytes=cfg.chunk_bytes,
            max_prompt_bytes=cfg.max_prompt_bytes,
            explicit_ttl_s=rules.explicit_ttl_s,
            explicit_min_tokens=rules.explicit_min_tokens,
            implicit_min_tokens=rules.implicit_min_tokens,
            recent_requests=cfg.recent_requests,
            recent_chunks=cfg.recent_chunks,
        )
        out[pool.name] = ModelSpec(shape, rules, prices_from_config(policy.billing, pool.name))
    return out


@dataclass(frozen=True, slots=True)
class AdvisorStats:
    sketches: int
    windows_kept: int
    observed: int
    sketches_dropped: int
    memory_bound_bytes: int


Key = tuple[str, str]  # tenant, model
REPRICE_S = 60.0  # findings are priced again at least this often while traffic comes


@dataclass(frozen=True, slots=True)
class Priced:
    """A snapshot's findings and what they were priced on."""

    started_at: float  # the window's start
    requests: int
    at: float  # the snapshot's end
    findings: tuple[Finding, ...]

    def fresh_for(self, snap: Snapshot) -> bool:
        """Whether these findings stand for ``snap``: same window, under a tenth more requests, and priced
        less than ``REPRICE_S`` before it."""
        return (
            self.started_at == snap.started_at
            and snap.requests < max(self.requests + 1, self.requests * 1.1)
            and snap.ended_at - self.at < REPRICE_S
        )


class Advisor:
    def __init__(
        self,
        cfg: AdvisorConfig,
        specs: Mapping[str, ModelSpec],
        *,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ):
        self.cfg = cfg
        self.specs = dict(specs)
        self.clock = clock
        self._rand = rand
        self._sketches: OrderedDict[Key, Sketch] = OrderedDict()
        self._windows: OrderedDict[Key, Snapshot] = OrderedDict()
        self.observed = 0
        self.sketches_dropped = 0
        # Findings replay the ring of recent requests (tens of ms to seconds): kept per (tenant, model),
        # priced again as ``Priced.fresh_for`` says, not at each scrape of /metrics.
        self._priced: dict[Key, Priced] = {}
        self._computing: dict[Key, asyncio.Task[Priced]] = {}
        self._one_at_a_time = asyncio.Lock()

    @classmethod
    def from_policy(cls, policy: Policy, **kw: Any) -> Advisor:
        return cls(policy.advisor, specs_from_policy(policy), **kw)

    def reconfigure(self, policy: Policy) -> None:
        """A reloaded policy: new sizes, rules and prices; sketches of changed or removed models restart."""
        specs = specs_from_policy(policy)
        for key in [
            k
            for k, s in self._sketches.items()
            if specs.get(k[1], None) is None or specs[k[1]].shape != s.shape
        ]:
            del self._sketches[key]
        for key in [k for k in self._windows if k[1] not in specs]:
            del self._windows[key]
        self.cfg, self.specs = policy.advisor, specs

    # -- request path ---------------------------------------------------------------------------------

    def sampled(self) -> bool:
        """Whether to observe this request: one random draw against ``sample_rate``."""
        return self.cfg.enabled and self._rand() < self.cfg.sample_rate

    def observe(
        self,
        tenant: str,
        salt: str,
        model: str,
        prompt: bytes,
        prompt_tokens: int,
        block_hashes: Sequence[int],
        *,
        chat: bool = True,
        marked_tokens: int = 0,
        now: float | None = None,
    ) -> None:
        """Record one (sampled) request. ``prompt`` is its rendering (``router.prompt``) as UTF-8 bytes, or
        packed token ids; ``block_hashes`` the router's chained hashes of it; ``marked_tokens`` the length
        of its ``cache_control`` prefix (0 without markers). Unknown models are ignored."""
        spec = self.specs.get(model)
        if spec is None or prompt_tokens <= 0:
            return
        now = self.clock() if now is None else now
        key = (tenant, model)
        sketch = self._sketches.get(key)
        if sketch is not None and now - sketch.started_at >= self.cfg.window_s:
            self._close_window(key, sketch, now)
            sketch = None
        if sketch is None:
            sketch = Sketch(spec.shape, tenant, model, sketch_seed(salt, model), now)
            self._sketches[key] = sketch
            while len(self._sketches) > self.cfg.max_sketches:
                self._sketches.popitem(last=False)
                self.sketches_dropped += 1
        else:
            self._sketches.move_to_end(key)
        sketch.observe(prompt, prompt_tokens, block_hashes, chat=chat, marked_tokens=marked_tokens, now=now)
        self.observed += 1

    def _close_window(self, key: Key, sketch: Sketch, now: float) -> None:
        self._windows[key] = sketch.snapshot(
            self.cfg.min_share, min(now, sketch.started_at + self.cfg.window_s)
        )
        self._windows.move_to_end(key)
        while len(self._windows) > self.cfg.max_sketches:
            self._windows.popitem(last=False)
        self._sketches.pop(key, None)

    # -- reports --------------------------------------------------------------------------------------

    def snapshots(self, tenant: str | None = None, now: float | None = None) -> list[Snapshot]:
        """The snapshot advice is given from, per (tenant, model): current sketch, else the last window."""
        now = self.clock() if now is None else now
        for key, sketch in list(self._sketches.items()):
            if now - sketch.started_at >= self.cfg.window_s:
                self._close_window(key, sketch, now)
        keys = sorted(set(self._sketches) | set(self._windows))
        out = []
        for key in keys:
            if tenant is not None and key[0] != tenant:
                continue
            live = self._sketches.get(key)
            if live is not None and (live.requests >= self.cfg.min_requests or key not in self._windows):
                out.append(live.snapshot(self.cfg.min_share, now))
            else:
                out.append(self._windows[key])
        return out

    def pricing(self, model: str) -> Pricing | None:
        spec = self.specs.get(model)
        if spec is None:
            return None
        c = self.cfg
        return Pricing(spec.rules, spec.prices, c.sample_rate, c.min_requests, c.min_saving_pct, c.min_share)

    def findings(self, tenant: str | None = None, now: float | None = None) -> list[Finding]:
        out = []
        for snap in self.snapshots(tenant, now):
            p = self.pricing(snap.model)
            if p is not None:
                out += self._price(snap, p)
        return out

    def _price(self, snap: Snapshot, p: Pricing) -> list[Finding]:
        return list(self._priced_now(snap, p).findings)

    def _priced_now(self, snap: Snapshot, p: Pricing) -> Priced:
        """Findings of a snapshot, priced again (here, on the caller's thread) unless the cached ones are
        fresh for it. For callers off the event loop (benchmarks, tests); the gateway uses
        ``advice_async``."""
        key = (snap.tenant, snap.model)
        hit = self._priced.get(key)
        if hit is not None and hit.fresh_for(snap):
            return hit
        return self._store(key, _priced(snap, p))

    def _store(self, key: Key, priced: Priced) -> Priced:
        self._priced[key] = priced
        while len(self._priced) > 2 * self.cfg.max_sketches:
            self._priced.pop(next(iter(self._priced)))
        return priced

    def _start(self, key: Key, snap: Snapshot, p: Pricing) -> asyncio.Task[Priced]:
        """The (tenant, model)'s computation: the one under way, else a new one (queued behind any other
        (tenant, model)'s: one replay at a time)."""
        task = self._computing.get(key)
        if task is None:
            task = asyncio.ensure_future(self._compute(key, snap, p))
            self._computing[key] = task
            task.add_done_callback(lambda t: self._done(key, t))
        return task

    async def _compute(self, key: Key, snap: Snapshot, p: Pricing) -> Priced:
        async with self._one_at_a_time:
            priced = await asyncio.to_thread(_priced, snap, p)
        return self._store(key, priced)

    def _done(self, key: Key, task: asyncio.Task[Priced]) -> None:
        if self._computing.get(key) is task:
            del self._computing[key]
        if not task.cancelled() and task.exception() is not None:
            log.error("advisor: pricing failed", exc_info=task.exception())

    async def advice_async(
        self, tenant: str | None = None, now: float | None = None, *, wait: bool = True
    ) -> dict[str, Any]:
        """The advice document, priced off the event loop (module docstring). A (tenant, model) whose
        cached findings are not fresh gets a computation started (or the one under way) and is answered
        from the cached findings meanwhile; one with none of its current window waits for it, unless
        ``wait`` is false (``/metrics``: its findings are then left out until priced)."""
        now = self.clock() if now is None else now
        snaps = self.snapshots(tenant, now)
        waits = []
        for snap in snaps:
            p = self.pricing(snap.model)
            if p is None:
                continue
            key = (snap.tenant, snap.model)
            hit = self._priced.get(key)
            if hit is not None and hit.fresh_for(snap):
                continue
            task = self._start(key, snap, p)
            if wait and (hit is None or hit.started_at != snap.started_at):
                waits.append(task)
        for task in waits:
            await asyncio.shield(task)
        return self._document(snaps, now, lambda snap, p: self._cached(snap))

    def _cached(self, snap: Snapshot) -> Priced | None:
        hit = self._priced.get((snap.tenant, snap.model))
        return hit if hit is not None and hit.started_at == snap.started_at else None

    def advice(self, tenant: str | None = None, now: float | None = None) -> dict[str, Any]:
        """The advice document (``GET /admin/advice``), priced on the caller's thread: numbers, fixed
        words, tenant and model ids only."""
        now = self.clock() if now is None else now
        return self._document(self.snapshots(tenant, now), now, self._priced_now)

    def _document(
        self, snaps: list[Snapshot], now: float, priced: Callable[[Snapshot, Pricing], Priced | None]
    ) -> dict[str, Any]:
        tenants: dict[str, list[dict[str, Any]]] = {}
        total_tokens = total_micros = 0.0
        currency = None
        for snap in snaps:
            p = self.pricing(snap.model)
            if p is None:
                continue
            currency = currency or p.prices.currency
            got = priced(snap, p)
            found = got.findings if got is not None else ()
            tok = sum(f.saving_tokens_per_day for f in found)
            mic = sum(f.saving_micros_per_day for f in found)
            total_tokens += tok
            total_micros += mic
            tenants.setdefault(snap.tenant, []).append(
                {
                    "model": snap.model,
                    "observed": _observed(snap, p.sample_rate),
                    "priced": _priced_doc(got, (snap.tenant, snap.model) in self._computing),
                    "findings": [f.to_dict() for f in found],
                    "saving": {"tokens_per_day": round(tok), "micros_per_day": round(mic)},
                }
            )
        return {
            "generated_at": datetime.fromtimestamp(now, tz=UTC).isoformat(),
            "enabled": self.cfg.enabled,
            "sample_rate": self.cfg.sample_rate,
            "window_s": self.cfg.window_s,
            "currency": currency,
            "tenants": [
                {
                    "tenant": t,
                    "models": models,
                    "saving": {
                        "tokens_per_day": sum(m["saving"]["tokens_per_day"] for m in models),
                        "micros_per_day": sum(m["saving"]["micros_per_day"] for m in models),
                    },
                }
                for t, models in sorted(tenants.items())
            ],
            "saving": {"tokens_per_day": round(total_tokens), "micros_per_day": round(total_micros)},
        }

    def stats(self) -> AdvisorStats:
        return AdvisorStats(
            sketches=len(self._sketches),
            windows_kept=len(self._windows),
            observed=self.observed,
            sketches_dropped=self.sketches_dropped,
            memory_bound_bytes=self.memory_bound_bytes(),
        )

    def memory_bound_bytes(self) -> int:
        """Bound of the sketches' memory: ``max_sketches`` sketches of the largest model shape."""
        largest = max((s.shape.memory_bound_bytes() for s in self.specs.values()), default=0)
        return self.cfg.max_sketches * largest


def _priced(snap: Snapshot, p: Pricing) -> Priced:
    return Priced(snap.started_at, snap.requests, snap.ended_at, tuple(price(snap, p)))


def _priced_doc(got: Priced | None, computing: bool) -> dict[str, Any]:
    """What the findings were priced on (``requests``: of the window, ``at``: its end then; null: not
    yet priced) and whether a new pricing is under way."""
    return {
        "requests": got.requests if got is not None else None,
        "at": datetime.fromtimestamp(got.at, tz=UTC).isoformat() if got is not None else None,
        "computing": computing,
    }


def _observed(snap: Snapshot, sample_rate: float) -> dict[str, Any]:
    n = snap.requests
    return {
        "requests": n,
        "since": datetime.fromtimestamp(snap.started_at, tz=UTC).isoformat(),
        "until": datetime.fromtimestamp(snap.ended_at, tz=UTC).isoformat(),
        "requests_per_day": round(requests_per_day(snap, sample_rate), 1),
        "avg_prompt_tokens": round(snap.prompt_tokens / n, 1) if n else 0.0,
        "avg_repeated_prefix_tokens": round(snap.repeat_tokens / n, 1) if n else 0.0,
        "stable_prefix_tokens": snap.stable_prefix_tokens,
    }
