"""One route's semantic-cache configuration, compiled once per policy load (pure).

``SemanticRoute.analyse(endpoint, body)`` is the whole pure part of a lookup: the question and its
context, the admission decision, the fingerprint, and in embedding mode the guard features. Nothing in
an ``Analysis`` is logged or stored except keys and tag ids (HMACs) and the metric labels
(``decision.reason``, ``fingerprint.missing``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cache.semantic.admission import Admission, Decision
from cache.semantic.extractors import Extractor, build
from cache.semantic.extractors.kinds import KindExtractor
from cache.semantic.fingerprint import Fingerprint, IntentRules, fingerprint, fingerprint_key, partition_id
from cache.semantic.guards import GuardFeatures, guard_features
from cache.semantic.inflect import variants
from cache.semantic.invalidation import EventError, Plan, plan_event
from cache.semantic.lexicon import Expansion, expand, kind_words, yields
from cache.semantic.normalize import Normalizer, base_normalize, has_cjk
from cache.semantic.question import Question, split_question
from cache.semantic.tags import TagRef, entry_refs
from cache.semantic.terms import TermMatcher
from cache.semantic.typos import TypoCorrector
from cache.semantic.vocab import (
    known_words,
    name_targets,
    safe_fillers,
    same_meaning_words,
    taken_terms,
    typo_targets,
)
from cache.semantic.wordbag import intent_words
from config.semantic import ExtractorConfig, SemanticConfig


@dataclass(frozen=True, slots=True)
class Analysis:
    decision: Decision  # bypass reasons include the question's shape (not_chat, too_long, ...)
    question: Question | None = None
    text: str = ""  # the normalised question
    fingerprint: Fingerprint | None = None
    guards: GuardFeatures | None = None  # embedding mode only

    def key(self, salt: str | bytes, version: int) -> str | None:
        """The fingerprint key, or None (bypassed, or an incomplete fingerprint)."""
        if not self.decision.allowed or self.question is None or self.fingerprint is None:
            return None
        return fingerprint_key(salt, version, self.question.context, self.fingerprint)

    def partition(self, salt: str | bytes, version: int) -> str:
        assert self.question is not None
        return partition_id(salt, version, self.question.context)


def _with_units(e: ExtractorConfig, lex: Expansion) -> ExtractorConfig:
    """A dictionary extractor with the lexicon's unit wordings added to its values' aliases."""
    if e.kind != "dictionary" or not any((e.slot, v) in lex.aliases for v in e.values):
        return e
    values = {v: [*aliases, *lex.aliases.get((str(e.slot), v), ())] for v, aliases in e.values.items()}
    return e.model_copy(update={"values": values})


class SemanticRoute:
    """The compiled ``SemanticConfig`` of one model."""

    def __init__(self, cfg: SemanticConfig, tag_secret: bytes) -> None:
        self.cfg = cfg
        self.secret = tag_secret
        # Each synonym term in the other number too, where the policy leaves it unclaimed (``inflect``).
        extra = variants(((g.canonical, g.terms) for g in cfg.synonyms), taken_terms(cfg))
        groups = [(g.canonical, (*g.terms, *extra.get(g.canonical, ()))) for g in cfg.synonyms]
        # The built-in lexicon's wordings of the policy's own synonyms and units, where the policy leaves
        # them unclaimed (``lexicon``); whether a wording holds an entity is read by the policy's own rules.
        plain = Normalizer(groups)
        found = [build(e, plain) for e in (*cfg.slots, *cfg.constraints)]
        self.lexicon = expand(
            cfg, (t for ts in extra.values() for t in ts), lambda t: any(e.extract(plain(t)) for e in found)
        )
        typos = TypoCorrector(
            [base_normalize(t) for t in typo_targets(cfg)],
            [base_normalize(t) for t in (*known_words(cfg), *self.lexicon.terms())],
            [base_normalize(t) for t in name_targets(cfg)],
            same_meaning_words(cfg),
        )
        sources = {t: "inflection" for ts in extra.values() for t in ts}
        sources |= {t: "built-in lexicon" for ts in self.lexicon.synonyms.values() for t in ts}
        # the policy's Chinese words a synonym term may start inside without taking their characters
        protect = [
            *safe_fillers(cfg),
            *(
                a
                for e in (*cfg.slots, *cfg.constraints)
                for v, aliases in e.values.items()
                for a in (v, *aliases)
            ),
        ]
        self.normalize = Normalizer(
            ((c, (*ts, *self.lexicon.synonyms.get(c, ()))) for c, ts in groups), typos, sources, protect
        )
        n = self.normalize
        self.kinds = kind_words(cfg)
        self.slots: list[Extractor] = [
            KindExtractor(build(_with_units(e, self.lexicon), n), self.kinds) for e in cfg.slots
        ]
        self.constraints: list[Extractor] = [build(_with_units(e, self.lexicon), n) for e in cfg.constraints]
        self._slot_extractors: dict[str, list[Extractor]] = {}
        for e_cfg, ext in zip(cfg.slots, self.slots, strict=True):
            for s in e_cfg.slots():
                self._slot_extractors.setdefault(s, []).append(ext)
        intent_of: dict[str, str] = {}
        for rule in cfg.intents:
            for t in rule.terms:
                term = n(t)
                if intent_of.setdefault(term, rule.name) != rule.name:
                    raise ValueError(f"intent term {t!r} belongs to {intent_of[term]!r} and {rule.name!r}")
        self.intents = IntentRules(
            TermMatcher(intent_of),
            intent_of,
            {r.name: tuple(r.required_slots) for r in cfg.intents},
            {r.name: dict(r.constraints) for r in cfg.intents},
            yields(
                {r.name: r.terms for r in cfg.intents},
                {c: (*ts, *self.lexicon.synonyms.get(c, ())) for c, ts in groups},
            ),
        )
        self.intent_names = tuple(r.name for r in cfg.intents)
        self.fillers = TermMatcher(n(t) for t in safe_fillers(cfg))  # never a word that changes the answer
        self.words = intent_words(cfg) if cfg.intent_words else None
        self.admission = Admission(cfg.admission, n)
        guards = cfg.embedding.guards if cfg.embedding is not None else None
        self.negations = TermMatcher(n(t) for t in guards.negation_terms) if guards is not None else None
        self._events = {e.type: e for e in cfg.events}

    def analyse(self, endpoint: str, body: Mapping[str, Any]) -> Analysis:
        q = split_question(endpoint, body, self.cfg.max_text_chars)
        if isinstance(q, str):
            return Analysis(Decision("bypass", q))
        text = self.normalize(q.raw)
        decision = self.admission.decide(text)
        # A bypassed question still gets its fingerprint: it never keys a semantic entry (``key`` is
        # None), but the entities it names tie the request's exact entry to their events.
        fp = fingerprint(
            text,
            lang="zh" if has_cjk(q.raw) else "en",
            slots=self.slots,
            constraints=self.constraints,
            intents=self.intents,
            fillers=self.fillers,
            max_residual_words=self.cfg.max_residual_words,
            words=self.words,
        )
        if not decision.allowed or self.negations is None:
            return Analysis(decision, q, text, fp)
        correct = self.normalize.typos.correct if self.normalize.typos else None
        return Analysis(decision, q, text, fp, guard_features(q.raw, text, fp, self.negations, correct))

    def refs(self, fp: Fingerprint) -> tuple[TagRef, ...]:
        """The invalidation tags of an entry stored for this fingerprint."""
        return entry_refs(self.secret, fp.intent if fp.complete else None, fp.found)

    def canonical_value(self, slot: str, raw: str) -> str:
        """A slot value from an event, written the way this route's extractors write it."""
        text = self.normalize(raw)
        for ext in self._slot_extractors.get(slot, []):
            values = {f.value for f in ext.extract(text) if f.slot == slot}
            if len(values) == 1:
                return values.pop()
        return raw.strip()

    def handles(self, event_type: str) -> bool:
        return event_type in self._events

    def plan(self, event: Mapping[str, Any]) -> Plan:
        mapping = self._events.get(str(event.get("type")))
        if mapping is None:
            raise EventError(f"no event mapping for type {event.get('type')!r}", "type")
        return plan_event(event, mapping, self.intent_names, self.secret, self.canonical_value)
