"""The domain fingerprint of a question: intent, slots, constraints, and its key (pure).

``{intent: query_battery_duration, slots: {product: iphone15}, constraints: {unit: hours}, lang: en}``
is the *meaning* of "How long does the iPhone 15 battery last?" and of "iPhone 15 续航多久" (but for
``lang``: an answer is written in one language). Two questions with equal fingerprints and equal context
share an answer. A fingerprint is *complete* only when

* exactly one intent is recognised (two intents: a compound question),
* every slot the intent requires is found, and no slot or constraint has two different values,
* nothing is left unexplained: after removing the spans of slots, constraints, intent wordings and the
  policy's fillers, at most ``max_residual_words`` words remain. "iPhone 15 battery life *in winter*"
  is not "iPhone 15 battery life"; the word ``winter`` makes the fingerprint incomplete.

An incomplete fingerprint has no key: the request goes to the replica as if there were no semantic
cache. This last rule is what keeps false hits at zero on the evaluation set (bench/data/semantic_eval.jsonl):
a fingerprint never claims to understand more of a question than it does.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from dataclasses import dataclass, field

import orjson

from cache.keys import tenant_tag
from cache.semantic.extractors import Extractor, Found
from cache.semantic.terms import TermMatcher
from cache.semantic.vocab import NEGATIONS
from cache.semantic.wordbag import IntentWords

KEY_FORMAT = "sv1"  # the layout of a semantic key; the policy's `version` goes inside the HMAC
_WORDS = re.compile(r"[a-z0-9]+(?:[.,:/-][0-9]+)*|[^\sa-z0-9]", re.UNICODE)


@dataclass(frozen=True, slots=True)
class Fingerprint:
    intent: str | None
    slots: tuple[tuple[str, str], ...]  # sorted (slot, value); only when complete
    constraints: tuple[tuple[str, str], ...]
    lang: str
    found: tuple[tuple[str, str], ...]  # every (slot, value) seen, complete or not (invalidation tags)
    covered: frozenset[str]  # the words inside the slots' matches (guard features)
    missing: str | None  # None: complete; else why not (a metric label)
    # Only when words alone keep it incomplete (``unexplained_words``): what it would be without them
    # (intent, slots, constraints) and those words in order. The guarded mode's compatible rule reads them.
    partial: tuple[str, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]] | None = None
    residual: tuple[str, ...] = ()
    # ``phrase``: an intent phrase explained every word; ``words``: the intent-word rule did
    # (``cache.semantic.wordbag``; the key is the same, this only tells ``semantic explain`` and tests).
    rule: str = "phrase"

    @property
    def complete(self) -> bool:
        return self.missing is None


def _values(found: list[Found]) -> tuple[dict[str, str], bool]:
    out: dict[str, str] = {}
    ambiguous = False
    for f in found:
        if out.setdefault(f.slot, f.value) != f.value:
            ambiguous = True
    return out, ambiguous


def residual_words(text: str, spans: list[tuple[int, int]]) -> list[str]:
    """The words of ``text`` outside every span (a CJK character is a word)."""
    keep = [True] * len(text)
    for start, end in spans:
        for i in range(start, end):
            keep[i] = False
    rest = "".join(ch if k else " " for ch, k in zip(text, keep, strict=True))
    return _WORDS.findall(rest)


@dataclass(frozen=True, slots=True)
class IntentRules:
    matcher: TermMatcher
    intent_of: dict[str, str]  # normalised term -> intent
    required: dict[str, tuple[str, ...]]
    defaults: dict[str, dict[str, str]]
    # intent -> the intents it yields to when both are found (``cache.semantic.lexicon.yields``: a price
    # question's "how much is" next to a named amount, "How much is the deposit?", asks that amount)
    yields: dict[str, frozenset[str]] = field(default_factory=dict)


def fingerprint(
    text: str,
    *,
    lang: str,
    slots: list[Extractor],
    constraints: list[Extractor],
    intents: IntentRules,
    fillers: TermMatcher,
    max_residual_words: int,
    words: IntentWords | None = None,
) -> Fingerprint:
    """The fingerprint of the normalised question ``text``; ``lang`` is the script of the question as
    sent (synonyms may have replaced all of its Chinese words)."""
    found_slots = [f for e in slots for f in e.extract(text)]
    found_constraints = [f for e in constraints for f in e.extract(text)]
    seen = tuple(sorted({(f.slot, f.value) for f in found_slots}))
    covered = frozenset(w for f in found_slots for w in text[f.start : f.end].split())
    intent_hits = intents.matcher.find(text)
    names = {intents.intent_of[m.term] for m in intent_hits}

    def incomplete(why: str, intent: str | None = None) -> Fingerprint:
        return Fingerprint(intent, (), (), lang, seen, covered, why)

    filler_spans = [(m.start, m.end) for m in fillers.find(text)]
    rule = "phrase"
    if not names:
        # The intent-word rule (``cache.semantic.wordbag``): the words left after slots, constraints and
        # fillers, all of one intent's own words; never with a negation anywhere in the question.
        spans = [(f.start, f.end) for f in (*found_slots, *found_constraints)] + filler_spans
        by_words = (
            None if words is None or _negated(text) else words.resolve(residual_words(text, spans), None)
        )
        if by_words is None:
            return incomplete("no_intent")
        names, rule = {by_words}, "words"
    if len(names) == 2:
        names = {n for n in names if not names - {n} <= intents.yields.get(n, frozenset())} or names
    if len(names) > 1:
        return incomplete("ambiguous_intent")
    (intent,) = names
    slot_values, ambiguous = _values(found_slots)
    if ambiguous:
        return incomplete("ambiguous_slot", intent)
    if any(s not in slot_values for s in intents.required[intent]):
        return incomplete("missing_slot", intent)
    constraint_values, ambiguous = _values(found_constraints)
    if ambiguous:
        return incomplete("ambiguous_constraint", intent)
    spans = [(f.start, f.end) for f in (*found_slots, *found_constraints)]
    spans += [(m.start, m.end) for m in intent_hits]
    spans += filler_spans
    rest = residual_words(text, spans)
    merged = {**intents.defaults[intent], **constraint_values}
    slots_t, constraints_t = tuple(sorted(slot_values.items())), tuple(sorted(merged.items()))
    if rule == "phrase" and len(rest) > max_residual_words:
        if words is not None and not _negated(text) and words.resolve(rest, intent) == intent:
            rule = "words"
        else:
            partial = (intent, slots_t, constraints_t)
            return Fingerprint(intent, (), (), lang, seen, covered, "unexplained_words", partial, tuple(rest))
    return Fingerprint(intent, slots_t, constraints_t, lang, seen, covered, None, rule=rule)


def _negated(text: str) -> bool:
    """A negation anywhere in the question (the intent-word rule never reads one)."""
    return any(w in NEGATIONS for w in _WORDS.findall(text)) or any(n in text for n in _ZH_NEGATIONS)


_ZH_NEGATIONS = tuple(n for n in NEGATIONS if not n.isascii())


def _digest(salt: str | bytes, *parts: bytes) -> str:
    key = salt.encode() if isinstance(salt, str) else salt
    mac = hmac.new(key, digestmod=hashlib.sha256)
    for p in parts:
        mac.update(len(p).to_bytes(8, "big"))
        mac.update(p)
    return f"{KEY_FORMAT}:{tenant_tag(salt)}:{mac.hexdigest()}"


def fingerprint_key(salt: str | bytes, version: int, context: bytes, fp: Fingerprint) -> str | None:
    """``sv1:<tenant tag>:<HMAC-SHA256>`` of (version, context, fingerprint); None when incomplete."""
    if not fp.complete:
        return None
    body = orjson.dumps(
        {"intent": fp.intent, "slots": dict(fp.slots), "constraints": dict(fp.constraints), "lang": fp.lang},
        option=orjson.OPT_SORT_KEYS,
    )
    return _digest(salt, b"fp", str(version).encode(), context, body)


def question_key(salt: str | bytes, version: int, context: bytes, text: str) -> str:
    """The key of one stored question in embedding mode (its normalised text, never stored itself)."""
    return _digest(salt, b"emb", str(version).encode(), context, text.encode())


def partition_id(salt: str | bytes, version: int, context: bytes) -> str:
    """The embedding mode's hard partition: tenant, model, system prompt, history and parameters."""
    return _digest(salt, b"part", str(version).encode(), context)
