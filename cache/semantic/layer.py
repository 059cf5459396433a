"""The semantic cache for one gateway process: what the request path calls (lookup, fill, events).

    analysis = layer.analyse(model, endpoint, payload)           # pure; None: no semantic cache here
    found = await layer.lookup(model, analysis, tenant_salt)       # after the exact cache missed
    if found.entry is not None: ...serve it (x-cache: semantic-hit)
    ...upstream answer...
    await layer.fill(found, response)                              # only for a complete answer
    await layer.apply_event({"type": "ProductSpecUpdated", ...})   # POST /admin/cache/events

``tie(model, analysis, found)`` is what ties the request's *exact* cache entry to the entities its
question names: the same tags an entry of its fingerprint would have (intent and slot values; with
no intent when the fingerprint is incomplete, so any event about those values reaches it), and their
epochs read before the answer is generated. The gateway stores the exact entry through
``store.put`` with it, and coalesced followers compare their tie with their leader's. A request
whose question the route cannot read, or in which no rule finds an intent or a slot value, has no
tie: an event cannot reach its exact entry (TTL is then the only bound).

``Lookup.outcome`` is ``hit``, ``miss`` or ``bypass``; ``Lookup.reason`` the label of a bypass (an
admission reason, a question-shape reason, a fingerprint's missing part, ``embedder_<reason>``).
Nothing here raises on a backend failure: a store or embedder error is a bypass or a miss.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from cache.entry import Entry, make_entry, storable
from cache.semantic.embedder import Embedder, EmbedderError
from cache.semantic.embedding import Candidate, CandidateIndex, VectorError, unit
from cache.semantic.fingerprint import question_key
from cache.semantic.guards import veto
from cache.semantic.invalidation import EventError, Removal
from cache.semantic.route import Analysis, SemanticRoute
from cache.semantic.store import Epochs, Removed, SemanticStore
from cache.semantic.tags import TagRef


@dataclass(slots=True)
class Lookup:
    outcome: Literal["hit", "miss", "bypass"]
    reason: str
    mode: str = "off"
    entry: Entry | None = None
    similarity: float | None = None
    vetoes: list[str] = field(default_factory=list)  # guard that refused each closer candidate
    # What a fill needs (a miss only):
    model: str | None = None
    route: SemanticRoute | None = None
    key: str | None = None
    refs: tuple[TagRef, ...] = ()
    basis: Epochs | None = None
    partition: str | None = None
    candidate: Candidate | None = None


@dataclass(frozen=True, slots=True)
class Tie:
    """The entity tags of one request and their epochs when it was read (``basis`` None: unreadable)."""

    refs: tuple[TagRef, ...]
    basis: Epochs | None

    def touched(self, bumped: frozenset[tuple[str, str]]) -> bool:
        """Whether an event that bumped these (tag, field) epochs invalidates this request's answer."""
        return any((r.tag, r.field) in bumped for r in self.refs)


@dataclass(slots=True)
class EventResult:
    removed: int  # every layer's; -1: the store was unreachable
    tags: int
    ignored_fields: list[str]
    by_layer: dict[str, int] = field(default_factory=dict)  # semantic, exact, in_flight


def _bypass(reason: str, mode: str = "off") -> Lookup:
    return Lookup("bypass", reason, mode)


class SemanticLayer:
    def __init__(
        self,
        routes: Mapping[str, SemanticRoute],
        store: SemanticStore,
        embedders: Mapping[str, Embedder] | None = None,
        default_ttl_s: int = 3600,
    ) -> None:
        self.routes = dict(routes)
        self.store = store
        self.embedders = dict(embedders or {})
        self.default_ttl_s = default_ttl_s
        self.indexes: dict[str, CandidateIndex] = {}
        for model, route in self.routes.items():
            emb = route.cfg.embedding
            if route.cfg.mode == "embedding" and emb is not None:
                self.indexes[model] = CandidateIndex(emb.max_candidates, emb.max_partitions)

    def analyse(self, model: str, endpoint: str, body: Mapping[str, Any]) -> Analysis | None:
        route = self.routes.get(model)
        if route is None or route.cfg.mode == "off":
            return None
        return route.analyse(endpoint, body)

    async def lookup(self, model: str, analysis: Analysis, salt: str | bytes) -> Lookup:
        route = self.routes[model]
        mode = route.cfg.mode
        if not analysis.decision.allowed or analysis.fingerprint is None or analysis.question is None:
            return _bypass(analysis.decision.reason, mode)
        if mode == "fingerprint":
            found = await self._fingerprint(route, analysis, salt)
        else:
            found = await self._embedding(model, route, analysis, salt)
        found.model = model
        return found

    async def _fingerprint(self, route: SemanticRoute, analysis: Analysis, salt: str | bytes) -> Lookup:
        fp = analysis.fingerprint
        assert fp is not None
        key = analysis.key(salt, route.cfg.version)
        if key is None:
            return _bypass(fp.missing or "incomplete", "fingerprint")
        refs = route.refs(fp)
        entry, basis = await asyncio.gather(self.store.get(key), self.store.epochs(refs))
        if entry is not None:
            return Lookup("hit", "fingerprint", "fingerprint", entry)
        if basis is None:
            return _bypass("store_error", "fingerprint")
        return Lookup("miss", "fingerprint", "fingerprint", route=route, key=key, refs=refs, basis=basis)

    async def _embedding(
        self, model: str, route: SemanticRoute, analysis: Analysis, salt: str | bytes
    ) -> Lookup:
        emb = route.cfg.embedding
        embedder = self.embedders.get(model)
        assert emb is not None and analysis.question is not None and analysis.guards is not None
        if embedder is None:
            return _bypass("embedder_missing", "embedding")
        try:
            vector = unit(await embedder.embed(analysis.question.raw.strip()))
        except EmbedderError as exc:
            return _bypass(f"embedder_{exc.reason}", "embedding")
        except VectorError:
            return _bypass("embedder_malformed", "embedding")
        version = route.cfg.version
        partition = analysis.partition(salt, version)
        index = self.indexes[model]
        vetoes: list[str] = []
        verified = analysis.guards.meaning if emb.guards.slots else None
        for sim, cand in index.search(partition, vector, emb.threshold, verified):
            why = veto(analysis.guards, cand.guards, emb.guards)
            if why is not None:
                vetoes.append(why)
                continue
            entry = await self.store.get(cand.key)
            if entry is None:
                index.discard(partition, cand.key)
                continue
            return Lookup("hit", "embedding", "embedding", entry, similarity=sim, vetoes=vetoes)
        refs = route.refs(analysis.fingerprint) if analysis.fingerprint is not None else ()
        basis = await self.store.epochs(refs)
        if basis is None:
            return _bypass("store_error", "embedding")
        key = question_key(salt, version, analysis.question.context, analysis.text)
        cand = Candidate(key, vector, analysis.guards, refs)
        return Lookup(
            "miss", "embedding", "embedding", vetoes=vetoes, route=route, key=key, refs=refs,
            basis=basis, partition=partition, candidate=cand,
        )  # fmt: skip

    async def fill(self, found: Lookup, response: dict[str, Any], ttl_s: int | None = None) -> str:
        """Store the answer of a miss; returns ``stored`` or why not (a metric label)."""
        if found.outcome != "miss" or found.key is None or found.basis is None or found.route is None:
            return "not_a_miss"
        ok, why = storable(response)
        if not ok:
            return why
        cfg_ttl = found.route.cfg.ttl_s or self.default_ttl_s
        ttl = cfg_ttl if ttl_s is None else min(cfg_ttl, max(1, ttl_s))
        entry = make_entry(response, source="semantic")
        result = await self.store.put(found.key, entry, ttl, found.refs, found.basis)
        if result == "stored" and found.candidate is not None and found.partition is not None:
            assert found.model is not None
            self.indexes[found.model].add(found.partition, found.candidate)
        return result

    async def tie(self, model: str, analysis: Analysis, found: Lookup | None = None) -> Tie | None:
        """The tie of this request's exact entry (see the module docstring); a semantic miss already
        read it, anything else reads the epochs now. None: nothing ties the request to an entity."""
        if found is not None and found.outcome == "miss" and found.basis is not None:
            return Tie(found.refs, found.basis) if found.refs else None
        fp = analysis.fingerprint
        refs = self.routes[model].refs(fp) if fp is not None else ()
        if not refs:
            return None
        return Tie(refs, await self.store.epochs(refs))

    async def apply_event(self, event: Mapping[str, Any], in_flight: Iterable[Tie] = ()) -> EventResult:
        """Remove the entries a business event makes wrong; ``EventError`` for an event no route maps.
        ``in_flight``: the ties of this process's generations in flight, of which the result counts
        those the event keeps out of the cache (their basis is outdated now)."""
        if not isinstance(event, Mapping):
            raise EventError("an event is a JSON object")
        kind = event.get("type")
        if not isinstance(kind, str) or not kind:
            raise EventError("'type' must be a non-empty string", "type")
        routes = [r for r in self.routes.values() if r.cfg.mode != "off" and r.handles(kind)]
        if not routes:
            raise EventError(f"no route maps events of type {kind!r}", "type")
        removals: dict[tuple[str, frozenset[str] | None], Removal] = {}
        ignored: set[str] = set()
        for route in routes:
            plan = route.plan(event)
            ignored |= plan.ignored_fields
            for rm in plan.removals:
                removals.setdefault((rm.tag, rm.intents), rm)
        done = await self.store.remove(list(removals.values())) if removals else Removed()
        tags = len({t for t, _ in removals})
        if done is None:
            return EventResult(-1, tags, sorted(ignored))
        bumped = frozenset((rm.tag, f) for rm in removals.values() for f in rm.bump)
        flying = sum(1 for t in in_flight if t.touched(bumped))
        by_layer = {"semantic": done.semantic, "exact": done.exact, "in_flight": flying}
        return EventResult(done.semantic + done.exact, tags, sorted(ignored), by_layer)
