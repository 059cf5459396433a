"""One model pool's router: its replicas, its policy, its prefix index, and the load it handed out.

The gateway calls ``route`` once per attempt and then ``release_prefill`` at the first byte and
``release`` at the end (success, error or cancel). Both releases are idempotent so that every exit path
of the gateway can call them without double counting.

A decision runs the filters of ``router.filters`` (health, the per-replica slot cap, a batch line's
planned replica, the explicit pin) over the pool's replicas, then hashes the prompt and asks the policy to pick among what is left.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, replace

from config.routing import RoutingConfig
from router.blocks import block_hashes, root_hash, route_key
from router.capacity import CapacityLearner, CounterWindow
from router.engine_prompt import EnginePrompt
from router.exact_index import ExactIndex
from router.explain import explain
from router.filters import FILTERS, FilterContext
from router.index import IndexStats, PrefixIndex
from router.policies import make_policy
from router.policies.base import PickContext, RoutingPolicy
from router.prefill import learn_end, learn_first_byte, prefill_due_s, rate_of
from router.prompt import prompt_pieces
from router.replica import ReplicaState
from router.tokenizers import Tokenizer, Tokens, from_ids, make_tokenizer, tokenize
from router.types import Decision, NoReplicaAvailable, RouteRequest

# What a predicted hit that missed unlearns: "proven" (only entries sent before the match's deepest
# block, on engines whose block is no coarser than the router's; else as "oldest"), "oldest" (that many
# of the least recently sent), "none". bench.routing_matrix's variants set the other two.
UNLEARN = "proven"

__all__ = ["NoReplicaAvailable", "PoolRouter", "RouterStats", "make_policy"]


@dataclass(frozen=True, slots=True)
class RouterStats:
    index: IndexStats
    decisions: int
    predicted_cached_tokens: int  # sum of matched_tokens over observed decisions
    observed_cached_tokens: int  # sum of what replicas reported for the same decisions
    precise_decisions: int = 0  # decisions where at least one candidate was matched by its events


class PoolRouter:
    def __init__(
        self,
        replicas: Sequence[ReplicaState],
        cfg: RoutingConfig,
        policy: RoutingPolicy | None = None,
        *,
        tokenizer: Tokenizer | None = None,
        clock: Callable[[], float] = time.monotonic,
        slot_limit: int = 0,
    ):
        self.cfg = cfg
        self.slot_limit = slot_limit  # limits.max_concurrent_per_replica (0: none); a reload may change it
        self.policy: RoutingPolicy = policy or make_policy(cfg)
        self.tokenizer: Tokenizer = tokenizer or make_tokenizer(cfg.tokenizer)
        self.clock = clock
        self.index = PrefixIndex(cfg.index_ttl_s, ghosts=cfg.learn_capacity)
        # The index's bound per replica, learned from cached_tokens (router.capacity); None: fixed bounds.
        self.capacity: CapacityLearner | None = (
            CapacityLearner(cfg.block_size) if cfg.learn_capacity else None
        )
        self.replicas: list[ReplicaState] = []
        self._by_id: dict[str, ReplicaState] = {}
        self.decisions = 0
        self.precise_decisions = 0
        # Precise mode: the exact index (fed by gateway.fleet.kv_events) and the engine's own prompt hashing.
        self.exact: ExactIndex | None = None
        self.engine_prompt: EnginePrompt | None = None
        if cfg.index == "precise" and cfg.tokenizer.path and cfg.engine_block_size:
            self.engine_prompt = EnginePrompt(
                cfg.tokenizer.path,
                cfg.chat_template,
                cfg.engine_block_size,
                hash_seed=cfg.hash_seed,
                max_tokens=cfg.max_prefix_tokens,
            )
        self._predicted = 0
        self._observed = 0
        # learn_capacity without cached_tokens: each replica's prefix-cache hit counter between scrapes,
        # until one of its answers carries cached_tokens (then those are the evidence).
        self._windows: dict[str, CounterWindow] = {}
        self._reports_cached: set[str] = set()
        # Build each decision's ``explanation`` (router.explain): the gateway's decision log turns it on.
        self.explain = False
        self.set_replicas(replicas)

    # -- fleet ----------------------------------------------------------------------------------------
    def set_replicas(self, replicas: Sequence[ReplicaState]) -> None:
        """Replace the fleet (discovery). Replicas that stay keep their counters and index entries.

        A staying replica keeps its ``ReplicaState`` object (decisions in flight point at it) and takes the
        new url, kind, weight and capacity; a removed one is dropped from the index. ``healthy`` is not
        copied: its one writer is the fleet's health (``gateway.upstream.health``).
        """
        ids = [r.id for r in replicas]
        if len(ids) != len(set(ids)):
            raise ValueError("replica ids must be unique")
        new: list[ReplicaState] = []
        for r in replicas:
            old = self._by_id.get(r.id)
            if old is not None and old is not r:
                old.url, old.kind, old.weight, old.kv_capacity_blocks = (
                    r.url,
                    r.kind,
                    r.weight,
                    r.kv_capacity_blocks,
                )
                r = old
            new.append(r)
            start = r.kv_capacity_blocks or self.cfg.default_kv_capacity_blocks
            est = self.capacity.estimate(r.id) if self.capacity is not None else None
            if est is None or est.start != start:
                self.index.add_replica(r.id, self._start_capacity(r.id, start, bool(r.kv_capacity_blocks)))
            else:  # a staying replica keeps what its answers taught
                self.index.add_replica(r.id, est.bound)
        for gone in set(self._by_id) - set(ids):
            self.index.drop_replica(gone)
            self._windows.pop(gone, None)
            self._reports_cached.discard(gone)
            if self.capacity is not None:
                self.capacity.drop(gone)
            if self.exact is not None:
                self.exact.drop_replica(gone)
        self.replicas = new
        self._by_id = {r.id: r for r in new}

    def set_capacity(self, replica_id: str, kv_capacity_blocks: int) -> bool:
        """The replica's KV capacity in blocks, once learnt (e.g. from its metrics): re-bounds its index,
        and restarts its learned estimate there (a published capacity is a starting point)."""
        r = self._by_id.get(replica_id)
        if r is None or kv_capacity_blocks < 1:
            return False
        r.kv_capacity_blocks = kv_capacity_blocks
        self.index.add_replica(replica_id, self._start_capacity(replica_id, kv_capacity_blocks, True))
        return True

    def capacity_bound(self, replica_id: str) -> int | None:
        """The bound the index now keeps for a replica: learned, else the configured or default one."""
        r = self._by_id.get(replica_id)
        if r is None:
            return None
        est = self.capacity.estimate(replica_id) if self.capacity is not None else None
        return est.bound if est is not None else r.kv_capacity_blocks or self.cfg.default_kv_capacity_blocks

    def replica(self, replica_id: str) -> ReplicaState | None:
        return self._by_id.get(replica_id)

    def healthy(self, exclude: Container[str] = ()) -> list[ReplicaState]:
        return [r for r in self.replicas if r.healthy and r.id not in exclude]

    def update_reported(
        self,
        replica_id: str,
        running: float | None,
        waiting: float | None,
        kv_usage: float | None = None,
        now: float | None = None,
    ) -> bool:
        """Store a replica's scraped load (``now`` on this router's clock). False for an unknown replica."""
        r = self._by_id.get(replica_id)
        if r is None:
            return False
        r.reported_running, r.reported_waiting, r.reported_kv_usage = running, waiting, kv_usage
        r.in_flight_at_report = r.in_flight
        r.reported_at = self.clock() if now is None else now
        return True

    # -- decisions ------------------------------------------------------------------------------------
    def route(self, request: RouteRequest, exclude: Container[str] = ()) -> Decision:
        """Pick a replica and count the request against it at once (in flight + uncached prefill).

        Raises ``NoReplicaAvailable`` when no healthy replica is left, ``ReplicasBusy`` when every one
        is at its slot cap."""
        fctx = FilterContext(request, exclude, self.cfg, self.slot_limit)
        candidates = self.replicas
        for narrow in FILTERS:
            candidates = narrow(candidates, fctx)
        now = self.clock()
        self._drop_stale_reports(candidates, now)
        ctx = PickContext(
            request=request, candidates=candidates, block_size=self.cfg.block_size, index=self.index, now=now
        )
        if self.capacity is not None:
            ctx.proven = self.capacity.proven(candidates)
        hashes: tuple[int, ...] = ()
        engine: tuple[int, ...] = ()
        approx: dict[str, int] = {}
        if self.policy.needs_prefix:
            # Precise mode tokenizes once, as the engine does, and its approximate index hashes those ids.
            engine_tokens = None
            if self.engine_prompt is not None and self.exact is not None:
                engine_tokens = self.engine_prompt.ids_and_count(request.endpoint, request.body)
            ids = engine_tokens[0] if engine_tokens is not None else None
            hashes = self._prefix(request, ctx, engine_tokens)
            ctx.block_hashes = hashes
            ctx.matched_blocks = approx = self.index.match(hashes, now)
            if ids:
                engine = self._precise(request, ctx, candidates, now, ids)
        if fctx.decided_by is not None:
            replica, reason = candidates[0], fctx.decided_by
        else:
            replica, reason = self.policy.pick(ctx)
        bs = self.cfg.block_size
        matched = min(ctx.matched_blocks.get(replica.id, 0) * bs, ctx.prompt_tokens)
        available = min(max(ctx.matched_blocks.values(), default=0) * bs, ctx.prompt_tokens)
        explanation = None
        if self.explain:  # before this decision counts its own load on the replica
            explanation = explain(
                ctx.candidates,
                ctx.matched_blocks,
                ctx.block_size,
                ctx.hashed_tokens,
                ctx.prompt_tokens,
                ctx.weights,
                ctx.added,
                replica,
                reason,
                self.policy.name,
                available,
                fctx.decided_by is not None,
                ctx.evicted,
            )
        decision = Decision(
            replica=replica,
            reason=reason,
            policy=self.policy.name,
            prompt_tokens=ctx.prompt_tokens,
            matched_tokens=matched,
            uncached_tokens=ctx.prompt_tokens - matched,
            block_hashes=hashes,
            route_key=ctx.route_key,
            block_size=self.cfg.block_size,
            engine_block_hashes=engine,
            approx_matched_blocks=approx.get(replica.id, 0) if engine else None,
            available_tokens=available,
            routed_at=now,
            explanation=explanation,
        )
        replica.in_flight += 1
        replica.queued_prefill_tokens += decision.uncached_tokens
        decision.queued_at_route = replica.queued_prefill_tokens
        if request.placement is not None:  # a batch line's slot goes where the line goes
            request.placement.move(replica.id)
        if hashes and not engine:
            known = approx.get(replica.id, 0)
            if known:
                decision.matched_sent_at = self.index.sent_at(replica.id, hashes[known - 1])
            if self.capacity is not None:
                decision.ghost_depths = self.index.ghost_depths(replica.id, hashes, known)
                if self.capacity.uses_depths:
                    index, rid = self.index, replica.id
                    d0 = index.depth(rid, hashes[0]) if known else 0
                    dlast = index.depth(rid, hashes[known - 1]) if known else 0
                    decision.listed_depths = (known, d0, dlast, index.size(rid))
        if hashes:
            # Speculative: the replica will hold this prefix once it has prefilled it.
            self.index.insert(replica.id, hashes, now, known=approx.get(replica.id, 0))
        if engine and self.exact is not None:
            self.exact.speculate(replica.id, engine, now)
        self.decisions += 1
        return decision

    def matches(self, request: RouteRequest) -> tuple[int, dict[str, int]]:
        """The prompt's tokens and, per replica, the tokens of it the (approximate) index says that
        replica holds: read only, nothing is counted or learnt (``router.fairness`` predicts a waiting
        request's work and TTFT with it). ``{}`` for a policy that does not look at the prompt."""
        if not self.policy.needs_prefix:
            return 0, {}
        ctx = PickContext(request=request, candidates=self.replicas, block_size=self.cfg.block_size)
        hashes = self._prefix(request, ctx)
        bs, limit = self.cfg.block_size, ctx.hashed_tokens
        matched = self.index.match(hashes, self.clock())
        return ctx.prompt_tokens, {rid: min(n * bs, limit) for rid, n in matched.items() if n}

    def release_prefill(self, decision: Decision) -> None:
        """The replica answered its first byte: its prefill for this request is done."""
        if not decision._prefill_released:
            decision._prefill_released = True
            decision.replica.queued_prefill_tokens -= decision.uncached_tokens
            rid = decision.replica.id
            if (
                self.capacity is not None
                and decision.block_hashes
                and not decision.engine_block_hashes
                and rid not in self._reports_cached
            ):  # the replica's hit counter has counted this prefill
                self._windows.setdefault(rid, CounterWindow()).add(
                    decision.matched_tokens, decision.ghost_depths
                )

    def observe_hit_counter(self, replica_id: str, total: float) -> None:
        """A scrape's reading of the replica's prefix-cache hit counter (tokens, cumulative): with
        ``learn_capacity``, for a replica whose answers carry no ``cached_tokens``, the prefills it
        finished since the last reading are the evidence of ``observe_usage``, summed."""
        learner = self.capacity
        if learner is None or replica_id not in self._by_id or replica_id in self._reports_cached:
            return
        ev = self._windows.setdefault(replica_id, CounterWindow()).close(learner, total)
        if ev is None:
            return
        bound = learner.observe(replica_id, ev)
        if bound is not None:
            self.index.add_replica(replica_id, bound)

    def prefill_due_s(self, decision: Decision) -> float | None:
        """Seconds from now until the replica is predicted to have prefilled ``decision`` (``router.prefill``),
        for an answer that will not say (non-streamed); None when there is nothing left to release."""
        if decision._prefill_released or not decision.uncached_tokens:
            return None
        rate = rate_of(decision.replica, self.cfg.prefill_tokens_per_s)
        return prefill_due_s(decision.queued_at_route, self.clock() - decision.routed_at, rate)

    def first_byte(self, decision: Decision) -> None:
        """A streamed answer's first byte: a sample of the replica's prefill rate, and its prefill is done."""
        if not decision._prefill_released:
            elapsed = self.clock() - decision.routed_at
            learn_first_byte(decision.replica, decision.queued_at_route, elapsed)
        self.release_prefill(decision)

    def answered_whole(self, decision: Decision) -> None:
        """A whole (non-streamed) answer arrived: its prefill ran at least as fast as that."""
        elapsed = self.clock() - decision.routed_at
        learn_end(decision.replica, decision.queued_at_route, elapsed, self.cfg.prefill_tokens_per_s)

    def release(self, decision: Decision) -> None:
        """The request finished (any way): it no longer loads the replica."""
        self.release_prefill(decision)
        if not decision._released:
            decision._released = True
            decision.replica.in_flight -= 1

    def forget_failed(self, decision: Decision) -> None:
        """The request never reached the replica (connect error, 5xx before prefill): unlearn what this
        decision added to the index speculatively, i.e. the blocks past the match it found."""
        if decision.block_hashes and decision.replica.id in self._by_id:
            start = decision.approx_matched_blocks
            if start is None:
                start = decision.matched_tokens // decision.block_size
            self.index.forget_from(decision.replica.id, decision.block_hashes, start)
        if decision.engine_block_hashes and self.exact is not None:
            self.exact.forget_speculative(decision.replica.id, decision.engine_block_hashes)

    def observe_usage(self, decision: Decision, cached_tokens: int | None) -> None:
        """The replica's own ``cached_tokens`` for a decision: accounted against the index's prediction,
        and the truth for the approximate index. Fewer cached tokens than predicted (beyond the one
        engine block an engine recomputes when the whole prompt hits; the engine's block is learned as
        the grain of the reported counts) mean the replica evicted blocks its index still lists: up to
        as many of its entries sent before the match's deepest block are unlearned (an LRU cache
        evicted those first; the conversations sent since are not proven gone), so the index shrinks to
        what the replica really keeps. On engine blocks coarser than the router's (the grain) as many
        of the least recently sent instead: the proven rule cost 0.009 there (``UNLEARN``, round 5). With ``learn_capacity``
        both directions also move the replica's capacity estimate (``router.capacity``)."""
        if cached_tokens is None or not decision.block_hashes:
            return
        cached = max(0, cached_tokens)
        self._predicted += decision.matched_tokens
        self._observed += cached
        rid = decision.replica.id
        if rid not in self._reports_cached and rid in self._by_id:
            self._reports_cached.add(rid)
            self._windows.pop(rid, None)
        if decision.engine_block_hashes or rid not in self._by_id:
            return  # precise mode: the replica's events keep its index true
        learner = self.capacity
        if learner is None:
            missing = (decision.matched_tokens - cached) // decision.block_size - 1
        else:
            ev = learner.evidence(decision.matched_tokens, cached, decision.ghost_depths)
            missing = ev.missing
            if decision.listed_depths and learner.uses_depths:
                bound = learner.observe_depths(
                    rid, ev, cached, decision.listed_depths, decision.ghost_depths, len(decision.block_hashes)
                )
            else:
                bound = learner.observe(rid, ev, self.index.size(rid))
            if bound is not None:
                self.index.add_replica(rid, bound)
        if missing <= 0 or UNLEARN == "none":
            return
        keep = frozenset(decision.block_hashes)
        sent = decision.matched_sent_at
        fine = learner is not None and 0 < learner.grain <= decision.block_size
        if UNLEARN == "proven" and fine and sent is not None:
            self.index.unlearn_older(rid, missing, sent, keep)
        else:
            self.index.unlearn_oldest(rid, missing, keep)

    def learn(self, replica_id: str, hashes: Sequence[int]) -> bool:
        """Another gateway process sent these blocks to ``replica_id``: the index learns them as if this
        one had. No load is counted (the replica's scraped load carries the other process's requests).
        False for a replica this pool does not have, or a policy that keeps no index."""
        if replica_id not in self._by_id or not self.policy.needs_prefix or not hashes:
            return False
        self.index.insert(replica_id, hashes, self.clock())
        return True

    def stats(self) -> RouterStats:
        return RouterStats(
            self.index.stats(), self.decisions, self._predicted, self._observed, self.precise_decisions
        )

    def attach_exact(self, exact: ExactIndex | None) -> None:
        """Precise mode: the exact index the KV-event listener keeps (None detaches: approximate only)."""
        self.exact = exact

    # -- internals ------------------------------------------------------------------------------------
    def _start_capacity(self, replica_id: str, blocks: int, published: bool) -> int:
        return self.capacity.start(replica_id, blocks, published) if self.capacity is not None else blocks

    def _prefix(
        self, request: RouteRequest, ctx: PickContext, engine: tuple[list[int], int] | None = None
    ) -> tuple[int, ...]:
        cfg = self.cfg
        tokens: Tokens
        if engine is not None and engine[0]:
            ids, count = engine
            tokens = replace(from_ids(ids), count=count)  # the ids of the hashed prefix, the prompt's count
        else:
            prompt = prompt_pieces(request.endpoint, request.body)
            tokens = tokenize(self.tokenizer, prompt, cfg.max_prefix_tokens)
        root = root_hash(request.model, request.tenant_salt)
        hashes = block_hashes(tokens, root, cfg.block_size, cfg.max_prefix_tokens)
        ctx.route_key = route_key(tokens, hashes, root, cfg.block_size, cfg.route_key_tokens)
        ctx.prompt_tokens = tokens.count
        ctx.hashed_tokens = min(tokens.count, cfg.max_prefix_tokens)
        return hashes

    def _precise(
        self,
        request: RouteRequest,
        ctx: PickContext,
        candidates: Sequence[ReplicaState],
        now: float,
        ids: list[int],
    ) -> tuple[int, ...]:
        """Engine hashes of the prompt, and each live replica's match from its events instead of the
        approximate guess (in ``block_size`` units). Replicas without events keep the approximate match."""
        exact, engine_prompt = self.exact, self.engine_prompt
        if exact is None or engine_prompt is None:
            return ()
        live = [r.id for r in candidates if exact.is_live(r.id)]
        if not live:
            return ()
        engine = engine_prompt.hashes_of(ids, request.tenant_salt)
        if not engine:
            return ()
        per = engine_prompt.block_size // self.cfg.block_size
        matched = dict(ctx.matched_blocks)
        for rid in live:
            n = exact.match(rid, engine, now) * per
            if n:
                matched[rid] = n
            else:
                matched.pop(rid, None)
        ctx.matched_blocks = matched
        self.precise_decisions += 1
        return engine

    def _drop_stale_reports(self, candidates: Sequence[ReplicaState], now: float) -> None:
        stale = self.cfg.report_stale_s
        for r in candidates:
            if r.reported_at is not None and now - r.reported_at > stale:
                r.reported_running = r.reported_waiting = r.reported_kv_usage = None
                r.reported_at = None
