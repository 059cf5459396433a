"""The semantic-cache section (``cache.semantic``, and per model ``cache.overrides[].semantic``).

Everything the layer in ``cache/semantic/`` does is declared here: how text is normalised (synonyms),
which slots, constraints and intents a question is made of, which wording bypasses the cache, which
business events remove which entries, and the guarded embedding mode. Validation is structural and
complete at load time (regular expressions compile, every slot an intent requires is declared, every
intent an event names exists), so a policy that loads never fails later on the request path.

Synonym canonicals are ``snake_case`` with at least one underscore and synonym terms never contain one:
that makes normalisation idempotent by construction (a term can never match inside, or across the
edge of, a canonical that an earlier pass wrote; see docs/semantic-cache.md).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SemanticMode = Literal["off", "fingerprint", "embedding"]
ValueNormaliser = Literal["lower", "upper", "digits", "alnum", "number", "nospace"]

_IDENT = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_CANONICAL = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)+$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _ident(value: str, what: str) -> str:
    if not _IDENT.match(value):
        raise ValueError(f"{what} {value!r} must be a lower-case identifier ([a-z][a-z0-9_]*, at most 64)")
    return value


def _terms(terms: list[str], what: str, synonym: bool = False) -> list[str]:
    for t in terms:
        if not t.strip():
            raise ValueError(f"{what}: empty term")
        if synonym and "_" in t:
            raise ValueError(f"{what}: term {t!r} contains '_', which is reserved for synonym canonicals")
    return terms


def _regex(pattern: str, what: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{what}: invalid regular expression {pattern!r}: {exc}") from None


class SynonymGroup(_Strict):
    """Terms that mean the same thing, rewritten to ``canonical`` before anything else looks; the built-in lexicon adds its paraphrases of them (check-config: a term that is a slot value or another intent's wording is an error).

    The lexicon (``cache/semantic/lexicon.py``, issue 25, tenth pass) adds a group's customer-service
    paraphrases (``security deposit``, ``押金`` for ``deposit``) only where exactly one group of the policy
    lists one of them and the policy uses the wording nowhere else; ``semantic explain`` says which fired.
    """

    canonical: str = Field(description="snake_case with an underscore, e.g. order_no")
    terms: list[str] = Field(min_length=1, description="words or phrases (any language) rewritten to it")

    @field_validator("canonical")
    @classmethod
    def _canonical(cls, v: str) -> str:
        if not _CANONICAL.match(v):
            raise ValueError(f"canonical {v!r} must be snake_case with at least one '_' (e.g. order_no)")
        return v

    @field_validator("terms")
    @classmethod
    def _check_terms(cls, v: list[str]) -> list[str]:
        return _terms(v, "synonym terms", synonym=True)


class ExtractorConfig(_Strict):
    """One slot (or constraint) extractor: a dictionary of values and their aliases, or a regex.

    ``dictionary``: ``values`` maps each canonical value to the aliases that mean it (the value itself
    is matched too). ``regex``: ``pattern`` (on the normalised text: lower case, NFKC, numbers in words as digits) with named groups;
    each group fills the slot of its name, cleaned by the ``normalise`` steps named for it.
    """

    kind: Literal["dictionary", "regex"] = Field(description="dictionary of values, or a regex")
    slot: str | None = Field(None, description="dictionary: the slot it fills")
    values: dict[str, list[str]] = Field(default_factory=dict, description="dictionary: value → aliases")
    pattern: str | None = Field(None, description="regex: named groups fill the slots of their names")
    normalise: dict[str, list[ValueNormaliser]] = Field(
        default_factory=dict, description="regex: group → value cleaning steps, in order"
    )

    @model_validator(mode="after")
    def _shape(self) -> ExtractorConfig:
        if self.kind == "dictionary":
            if self.slot is None or not self.values or self.pattern is not None or self.normalise:
                raise ValueError(
                    "a dictionary extractor needs 'slot' and 'values' (and no pattern/normalise)"
                )
            _ident(self.slot, "slot")
            for value, aliases in self.values.items():
                if not value.strip():
                    raise ValueError("dictionary values must be non-empty")
                _terms([value, *aliases], f"aliases of {value!r}")
        else:
            if self.pattern is None or self.slot is not None or self.values:
                raise ValueError("a regex extractor needs 'pattern' (and no slot/values: groups name slots)")
            groups = _regex(self.pattern, "pattern").groupindex
            if not groups:
                raise ValueError(f"pattern {self.pattern!r} has no named group (?P<slot>...)")
            for g in groups:
                _ident(g, "group")
            unknown = set(self.normalise) - set(groups)
            if unknown:
                raise ValueError(f"normalise names groups the pattern lacks: {sorted(unknown)}")
        return self

    def slots(self) -> list[str]:
        if self.kind == "dictionary":
            assert self.slot is not None
            return [self.slot]
        assert self.pattern is not None
        return list(re.compile(self.pattern).groupindex)


class IntentRule(_Strict):
    """An intent: recognised when one of ``terms`` occurs; cacheable only with its required slots."""

    name: str = Field(description="identifier, part of the key and of event mappings")
    terms: list[str] = Field(min_length=1, description="wordings that express the intent (normalised)")
    required_slots: list[str] = Field(default_factory=list, description="slots without which: no key")
    constraints: dict[str, str] = Field(
        default_factory=dict, description="constraint values assumed when the question names none"
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _ident(v, "intent")

    @field_validator("terms")
    @classmethod
    def _check_terms(cls, v: list[str]) -> list[str]:
        return _terms(v, "intent terms")


class AdmissionRule(_Strict):
    """Wording that decides whether a question may be cached: first matching rule wins."""

    reason: str = Field(description="identifier; the metric label of the decision")
    action: Literal["bypass", "allow"] = Field(description="bypass: never served from or stored in the cache")
    terms: list[str] = Field(default_factory=list, description="words or phrases (normalised)")
    patterns: list[str] = Field(
        default_factory=list, description="regular expressions on the normalised text"
    )

    @model_validator(mode="after")
    def _check(self) -> AdmissionRule:
        _ident(self.reason, "reason")
        if not self.terms and not self.patterns:
            raise ValueError(f"admission rule {self.reason!r} needs terms or patterns")
        _terms(self.terms, f"terms of {self.reason!r}")
        for p in self.patterns:
            _regex(p, f"patterns of {self.reason!r}")
        return self


def _default_rules() -> list[AdmissionRule]:
    return [
        AdmissionRule(
            reason="comparative",
            action="bypass",
            terms=[
                "vs", "versus", "compare", "compared", "comparison", "better than", "worse than",
                "difference between", "which is better", "which one", "or the",
                "比较", "对比", "相比", "比起", "哪个好", "哪个更", "哪款", "区别", "还是",
            ],
            patterns=[
                r"\b(?:more|less|bigger|smaller|longer|shorter|faster|slower|cheaper|heavier|lighter)\b.*\bthan\b",
                "比.+更", "哪[个款].*(?:更|好|大|小|快|慢|久|便宜|贵|轻|重)",
            ],
        ),
        AdmissionRule(
            reason="predictive",
            action="bypass",
            # Not "will" alone: "How long will the battery last?" and "Will flight BA38 be delayed?" ask
            # what the present tense does (issue 25); a forecast names what changes or comes out.
            terms=[
                "going to", "next year", "next month", "next generation", "predict", "forecast",
                "expected to", "future", "upcoming", "rumor", "rumour",
                "会不会", "将会", "预计", "预测", "明年", "下个月", "下一代", "以后会", "未来", "传闻",
            ],
            patterns=[
                r"\bwill\b.*\b(?:release|released|launch|launched|come out|drop|go down|go up|rise|increase"
                r"|decrease|more expensive|discount|on sale|available|restock|restocked|next|longer|shorter"
                r"|better|worse|faster|slower|cheaper|bigger|smaller|heavier|lighter|higher|lower|more|less)\b",
                r"\bwill (?:there|they)\b",
            ],
        ),
        AdmissionRule(
            reason="time_sensitive",
            action="bypass",
            terms=[
                "today", "tonight", "now", "right now", "currently", "current", "latest", "this week",
                "this month", "yesterday", "tomorrow", "at the moment", "in stock", "still", "anymore",
                "今天", "今晚", "现在", "目前", "当前", "最新", "实时", "刚刚", "本周", "这周", "这个月",
                "昨天", "明天", "还有货", "有货吗", "库存", "还能", "依然",
            ],
        ),
        AdmissionRule(
            reason="factual",
            action="allow",
            terms=[
                "what is", "what are", "how many", "how much", "how long", "how big", "does", "is there",
                "which", "多少", "多大", "多久", "多重", "是什么", "是否", "有没有", "支持", "吗",
            ],
        ),
    ]  # fmt: skip


class AdmissionConfig(_Strict):
    """Allow/bypass rules in order, first match wins; ``otherwise`` when none matches."""

    rules: list[AdmissionRule] = Field(
        default_factory=_default_rules,
        description="default: comparative, predictive, time-sensitive bypass; factual allowed (en, zh)",
    )
    otherwise: Literal["allow", "bypass"] = Field("allow", description="decision when no rule matches")


class EventMapping(_Strict):
    """Which entries a business event removes: those of ``slot`` = the event's ``slot_field`` value and of
    the intents its changed fields map to (every intent when it names no changed field, or a field
    mapped to ``"*"``). Without ``slot``: every entry of the mapped intents."""

    type: str = Field(min_length=1, max_length=128, description="event type, e.g. ProductSpecUpdated")
    slot_field: str | None = Field(None, description="event field holding the slot value, e.g. product_id")
    slot: str | None = Field(None, description="the slot that value fills, e.g. product")
    fields: dict[str, list[str]] = Field(
        default_factory=dict, description="changed field → intents it affects ('*': all)"
    )

    @model_validator(mode="after")
    def _pair(self) -> EventMapping:
        if (self.slot is None) != (self.slot_field is None):
            raise ValueError("give both 'slot' and 'slot_field', or neither")
        if self.slot is None and not self.fields:
            raise ValueError("an event without a slot must map changed fields to intents")
        return self


class GuardConfig(_Strict):
    """Features that must be equal between a question and a candidate, whatever their similarity."""

    numbers: bool = Field(True, description="the numbers in the question")
    negations: bool = Field(True, description="the negation words in the question")
    entities: bool = Field(
        True, description="named entities: dictionary values, model codes, Capitalised words"
    )
    slots: bool = Field(True, description="the fingerprint's intent and slots, when it has them")
    compatible: bool = Field(
        True,
        description="also serve, at or above the threshold, a candidate whose fingerprint is equal but for "
        "unexplained words that are harmless (articles, pronouns, politeness, asking verbs) and in order",
    )
    languages: list[Literal["en", "zh"]] = Field(
        ["en"],
        description="languages the embedding model covers (en, zh): the compatible rule serves no other",
    )
    negation_terms: list[str] = Field(
        default_factory=lambda: [
            "not", "no", "never", "none", "without", "dont", "doesnt", "didnt", "isnt", "arent", "wasnt",
            "cant", "cannot", "wont", "shouldnt", "neither", "nor", "non",
            "不", "没", "没有", "无法", "不能", "不可以", "别", "非", "未", "勿",
        ],
        description="words whose presence flips a question (normalised)",
    )  # fmt: skip


class EmbeddingConfig(_Strict):
    """The guarded embedding mode: an OpenAI-compatible /v1/embeddings endpoint, or a pool of this gateway."""

    url: str | None = Field(
        None, description="base URL of an embeddings server (…/v1/embeddings is appended)"
    )
    pool: str | None = Field(None, description="or: a model pool of this policy that serves embeddings")
    model: str = Field(min_length=1, description="embedding model name sent in the request")
    api_key_env: str | None = Field(None, description="environment variable with a bearer token, if any")
    threshold: float = Field(0.9, gt=0, le=1, description="cosine similarity a hit needs (and equal guards)")
    timeout_s: float = Field(1.0, gt=0, description="an embedder slower than this: the cache is bypassed")
    max_dimensions: int = Field(8192, ge=1, description="longer vectors are refused as malformed")
    max_candidates: int = Field(64, ge=1, le=4096, description="entries kept per partition (LRU)")
    max_partitions: int = Field(10_000, ge=1, description="partitions kept per process (LRU)")
    guards: GuardConfig = Field(default_factory=GuardConfig)

    @model_validator(mode="after")
    def _one_target(self) -> EmbeddingConfig:
        if (self.url is None) == (self.pool is None):
            raise ValueError("give exactly one of 'url' or 'pool'")
        if self.url is not None and not re.match(r"^https?://[^\s/]+", self.url):
            raise ValueError(f"url {self.url!r} must be an http(s) URL")
        return self


class SemanticConfig(_Strict):
    """The semantic cache: fingerprints of domain questions (default), or guarded embeddings."""

    mode: SemanticMode = Field("off", description="off; fingerprint (slots + intent); embedding (guarded)")
    version: int = Field(1, ge=1, description="part of every key: bump it to drop every semantic entry")
    ttl_s: int | None = Field(None, ge=1, description="life of an entry; unset: cache.ttl_s")
    max_text_chars: int = Field(2000, ge=1, description="a longer last user turn bypasses (reason too_long)")
    max_residual_words: int = Field(
        0, ge=0, description="fingerprint: words left unexplained by slots, intent and fillers before no key"
    )
    intent_words: bool = Field(
        True,
        description="fingerprint: an intent also when every left-over word is one of that intent's own "
        "phrase words, in any order (no negation, number, preposition or entity word left over)",
    )
    max_entries_per_tag: int = Field(
        100_000, ge=1, description="entries one slot value or intent may index; beyond, not stored"
    )
    synonyms: list[SynonymGroup] = Field(default_factory=list)
    fillers: list[str] = Field(default_factory=list, description="words that carry no meaning for the key")
    slots: list[ExtractorConfig] = Field(default_factory=list)
    constraints: list[ExtractorConfig] = Field(default_factory=list)
    intents: list[IntentRule] = Field(default_factory=list)
    admission: AdmissionConfig = Field(default_factory=AdmissionConfig)
    events: list[EventMapping] = Field(default_factory=list)
    embedding: EmbeddingConfig | None = Field(None, description="required by mode embedding")

    @field_validator("fillers", mode="before")
    @classmethod
    def _yaml_booleans(cls, v: object) -> object:
        """YAML 1.1 reads an unquoted on/off/yes/no as a boolean: say so, and what to write instead."""
        if isinstance(v, list):
            for i, t in enumerate(v):
                if isinstance(t, bool):
                    raise ValueError(
                        f"fillers[{i}] is the YAML boolean {t} (an unquoted on/off/yes/no/true/false): "
                        f"quote it, e.g. 'on' or 'no'"
                    )
        return v

    @field_validator("fillers")
    @classmethod
    def _fillers(cls, v: list[str]) -> list[str]:
        return _terms(v, "fillers")

    @model_validator(mode="after")
    def _consistent(self) -> SemanticConfig:
        canon = [g.canonical for g in self.synonyms]
        if len(canon) != len(set(canon)):
            raise ValueError("synonym canonicals must be unique")
        seen: dict[str, str] = {}
        for g in self.synonyms:
            for t in g.terms:
                key = t.strip().lower()
                if key in seen and seen[key] != g.canonical:
                    raise ValueError(f"synonym term {t!r} is listed for {seen[key]!r} and {g.canonical!r}")
                seen[key] = g.canonical
        slots = {s for e in self.slots for s in e.slots()}
        constraints = {s for e in self.constraints for s in e.slots()}
        if slots & constraints:
            raise ValueError(f"names used both as slot and constraint: {sorted(slots & constraints)}")
        names = [i.name for i in self.intents]
        if len(names) != len(set(names)):
            raise ValueError("intent names must be unique")
        for intent in self.intents:
            missing = set(intent.required_slots) - slots
            if missing:
                raise ValueError(f"intent {intent.name!r} requires undeclared slots {sorted(missing)}")
            bad = set(intent.constraints) - constraints
            if bad:
                raise ValueError(f"intent {intent.name!r} defaults undeclared constraints {sorted(bad)}")
        types = [e.type for e in self.events]
        if len(types) != len(set(types)):
            raise ValueError("event types must be unique")
        for ev in self.events:
            if ev.slot is not None and ev.slot not in slots:
                raise ValueError(f"event {ev.type!r} names undeclared slot {ev.slot!r}")
            for fieldname, intents in ev.fields.items():
                unknown = {i for i in intents if i != "*"} - set(names)
                if unknown:
                    raise ValueError(
                        f"event {ev.type!r} field {fieldname!r} names unknown intents {sorted(unknown)}"
                    )
        if self.mode == "embedding" and self.embedding is None:
            raise ValueError("mode 'embedding' needs the 'embedding' section")
        if self.mode == "fingerprint" and not self.intents:
            raise ValueError("mode 'fingerprint' needs at least one intent")
        return self
