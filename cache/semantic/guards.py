"""Guard features: what must be equal between a question and a cached one, whatever their cosine (pure).

Bi-encoders score a question and its negation at 0.83–0.9997 (GPTCache #694, vLLM semantic-router
#2691) and "iPhone 15" against "iPhone 15 Pro" higher than most paraphrases; no threshold separates
them. So an embedding hit also needs equal guard features:

* numbers (``15`` vs ``14``, ``256`` vs ``128``; normalised, ``6.10`` = ``6.1``),
* negation words (``not``, ``cannot``, ``不``, ``没有``; as a multiset),
* named entities: dictionary slot values the route knows, model codes (a word with letters and digits,
  ``s24``), and Capitalised words not starting a sentence nor inside a slot's match (``Ultra``),
* the fingerprint's intent and slots, when the question has them;
* with ``slots`` on (the default), a *verified* meaning: both questions have a complete fingerprint
  and the two are equal (intent, slots, constraints such as the unit, language). A guard that cannot
  verify a question refuses the hit; the embedding only ever narrows what the fingerprint allows.

Why the last rule (issue 25): with an English-only model (all-MiniLM-L6-v2) Chinese questions score
near 1.0 whatever they ask ("订单…到哪了" vs "订单…取消了吗" 0.998, 克 vs 斤 1.000, Beijing→London vs
London→Beijing 0.996), and features alone miss what the fingerprint's completeness rule catches: an
unexplained word ("resolution" vs "size", "days" vs "hours" when only one side names a unit, the order
of two cities). On the independent set's tuning split the features alone let 16 of 49 near misses through at 0.9.

The compatible rule (issue 25, second pass): with the rule above alone, the embedding never adds a hit
(guarded recall == fingerprint recall). So a candidate is also served when its similarity is at or
above the threshold and its fingerprint is *compatible*: the same intent, slots and constraints (and
language), incomplete only because some words are unexplained, and the words one question has and the
other lacks are all harmless (``vocab.SIMILARITY_SAFE``), the words both have come in the same order,
and the question is in a language the embedding model covers (``languages``: an English-only model
scores Chinese questions near 1.0 whatever they ask). The embedding then decides only between
questions that, as far as every rule can tell, ask the same thing.

Equal complete fingerprints are served without the features (issue 25, round 3): fingerprint mode serves
them, so refusing them only made guarded recall lower than the fingerprints' (a typo'd capitalised name,
``Huawai``, or a number word inside an intent term, ``一年多少年费``, vetoed pairs whose fingerprints
matched). Every number, negation and entity of a complete fingerprint is inside a span it explains
(fillers never hold one: ``vocab.dangerous_fillers``), so the features have nothing to add there. What
guarded mode serves is thus exactly what fingerprint mode serves, plus what the compatible rule adds.

Numbers include spelled-out ones (``three``, ``两``: "three phones" vs "one phone"), negations ``non``
(``non-refundable``), and entities are compared case-insensitively, all-capital words being shouting,
not names ("IPHONE 15 PRICE???" is "iphone 15 price").
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from cache.semantic.fingerprint import Fingerprint
from cache.semantic.terms import TermMatcher
from cache.semantic.values import number
from cache.semantic.vocab import NOT_NUMBERS, NUMBER_WORDS, SIMILARITY_SAFE
from config.semantic import GuardConfig

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CODE = re.compile(r"(?<![a-z0-9])(?=[a-z0-9]*[a-z])(?=[a-z0-9]*[0-9])[a-z0-9]+(?![a-z0-9])")
_CAPITAL = re.compile(r"(?<![A-Za-z0-9])[A-Z][a-z][a-zA-Z]+(?![a-zA-Z0-9])")  # Ultra, not ULTRA
_NUMBER_WORD = re.compile(
    "|".join(sorted((w for w in NUMBER_WORDS if w.isascii()), key=len, reverse=True)).join(
        (r"(?<![a-z0-9_])(?:", r")(?![a-z0-9_])")
    )
    + "|["
    + "".join(w for w in NUMBER_WORDS if not w.isascii())
    + "]"
)
_SENTENCE_START = re.compile(r"(?:^|[.!?。？！]\s*)$")


@dataclass(frozen=True, slots=True)
class GuardFeatures:
    numbers: tuple[str, ...]
    negations: tuple[str, ...]
    entities: tuple[str, ...]
    intent: str | None  # the intent the fingerprint recognised, complete or not
    slots: tuple[tuple[str, str], ...] | None  # the fingerprint's slots when it is complete
    meaning: tuple[object, ...] | None  # (intent, slots, constraints, lang) when complete, else None
    # (intent, slots, constraints, lang) when complete or incomplete only by unexplained words
    partial: tuple[object, ...] | None = None
    residual: tuple[str, ...] = ()  # the unexplained words, in order


def guard_features(
    raw: str,
    text: str,
    fp: Fingerprint,
    negations: TermMatcher,
    correct: Callable[[str], str | None] | None = None,
) -> GuardFeatures:
    """``raw``: the question as sent; ``text``: normalised. A Capitalised word or model code inside a slot's
    match is already stood for by the slot value (``Google`` in "Google Pixel 8" is ``pixel8``,
    ``iphone15`` in "iphone15 pro" is ``iphone15pro``); ``correct`` (the route's typo corrector) reads a
    Capitalised word as normalisation did (``Huawai`` is the ``huawei`` of the slot's match)."""
    # Digits inside an entity (``iphone15``, ``s24``) stay numbers; spelled-out ones are added.
    numbers = tuple(
        sorted(
            [number(n) or n for n in _NUMBER.findall(text)]
            + [NUMBER_WORDS[w] for w in _number_words(text, fp)]
        )
    )
    neg = tuple(sorted(m.term for m in negations.find(text)))
    entities = tuple(
        sorted(
            {v for _, v in fp.found}
            | {
                e
                for e in set(_CODE.findall(text)) | {(correct and correct(c)) or c for c in _capitals(raw)}
                if not any(e in w for w in fp.covered)
            }
        )
    )
    meaning = (fp.intent, fp.slots, fp.constraints, fp.lang) if fp.complete else None
    partial = meaning if meaning is not None else (*fp.partial, fp.lang) if fp.partial is not None else None
    slots = fp.slots if fp.complete else None
    return GuardFeatures(numbers, neg, entities, fp.intent, slots, meaning, partial, fp.residual)


def _number_words(text: str, fp: Fingerprint) -> list[str]:
    """Spelled-out numbers outside the slots' matches (``一`` in ``一台``; not the ``十`` of ``iphone十五``,
    nor the ``一`` of ``查一下``: ``NOT_NUMBERS``)."""
    for word in NOT_NUMBERS:
        text = text.replace(word, " ")
    return [m.group() for m in _NUMBER_WORD.finditer(text) if not any(m.group() in w for w in fp.covered)]


def _capitals(raw: str) -> set[str]:
    """Capitalised words that do not start a sentence (``Ultra`` in "Galaxy S24 Ultra"), lower-cased."""
    text = unicodedata.normalize("NFKC", raw.strip())
    return {
        m.group().lower() for m in _CAPITAL.finditer(text) if not _SENTENCE_START.search(text[: m.start()])
    }


def veto(a: GuardFeatures, b: GuardFeatures, cfg: GuardConfig) -> str | None:
    """The first guard that differs (a metric label), or None when the candidate may be served."""
    if cfg.slots and a.meaning is not None and a.meaning == b.meaning:
        return None  # equal complete fingerprints: what fingerprint mode serves (module docstring)
    if cfg.numbers and a.numbers != b.numbers:
        return "numbers"
    if cfg.negations and a.negations != b.negations:
        return "negation"
    if cfg.entities and a.entities != b.entities:
        return "entities"
    if cfg.slots and a.intent is not None and b.intent is not None and a.intent != b.intent:
        return "intent"
    if cfg.slots and a.slots is not None and b.slots is not None and a.slots != b.slots:
        return "slots"
    if not cfg.slots:
        return None
    if a.meaning is not None and b.meaning is not None:
        return None if a.meaning == b.meaning else "meaning"
    if not cfg.compatible or a.partial is None or b.partial is None:
        return "unverified"
    if a.partial != b.partial:
        return "meaning"
    if a.partial[3] not in cfg.languages:
        return "language"
    return _unexplained(a.residual, b.residual)


def _unexplained(a: tuple[str, ...], b: tuple[str, ...]) -> str | None:
    """Whether two questions' unexplained words are compatible: those only one has are harmless, and
    those both have come in the same order."""
    ca, cb = Counter(a), Counter(b)
    if any(w not in SIMILARITY_SAFE for w in (ca - cb) + (cb - ca)):
        return "unexplained"
    shared = ca & cb
    if [w for w in a if w in shared] != [w for w in b if w in shared]:
        return "order"
    return None
