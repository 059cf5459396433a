"""Guard features: what must be equal between a question and a cached one, whatever their cosine (pure).

Bi-encoders score a question and its negation at 0.83–0.9997 (GPTCache #694, vLLM semantic-router
#2691) and "iPhone 15" against "iPhone 15 Pro" higher than most paraphrases; no threshold separates
them. So an embedding hit also needs equal guard features:

* numbers (``15`` vs ``14``, ``256`` vs ``128``; normalised, ``6.10`` = ``6.1``),
* negation words (``not``, ``cannot``, ``不``, ``没有``; as a multiset),
* named entities: dictionary slot values the route knows, model codes (a word with letters and digits,
  ``s24``), and Capitalised words not starting a sentence nor inside a slot's match (``Ultra``),
* the fingerprint's intent and slots, when the question has them.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from cache.semantic.fingerprint import Fingerprint
from cache.semantic.terms import TermMatcher
from cache.semantic.values import number
from config.semantic import GuardConfig

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_CODE = re.compile(r"(?<![a-z0-9])(?=[a-z0-9]*[a-z])(?=[a-z0-9]*[0-9])[a-z0-9]+(?![a-z0-9])")
_CAPITAL = re.compile(r"(?<![A-Za-z0-9])[A-Z][a-zA-Z]{2,}(?![a-zA-Z0-9])")
_SENTENCE_START = re.compile(r"(?:^|[.!?。？！]\s*)$")


@dataclass(frozen=True, slots=True)
class GuardFeatures:
    numbers: tuple[str, ...]
    negations: tuple[str, ...]
    entities: tuple[str, ...]
    intent: str | None  # the intent the fingerprint recognised, complete or not
    slots: tuple[tuple[str, str], ...] | None  # the fingerprint's slots when it is complete


def guard_features(raw: str, text: str, fp: Fingerprint, negations: TermMatcher) -> GuardFeatures:
    """``raw``: the question as sent; ``text``: normalised. A Capitalised word inside a slot's match is
    already stood for by the slot value (``Google`` in "Google Pixel 8" is ``pixel8``)."""
    numbers = tuple(sorted(number(n) or n for n in _NUMBER.findall(text)))
    neg = tuple(sorted(m.term for m in negations.find(text)))
    entities = tuple(
        sorted({v for _, v in fp.found} | set(_CODE.findall(text)) | (_capitals(raw) - fp.covered))
    )
    return GuardFeatures(numbers, neg, entities, fp.intent, fp.slots if fp.complete else None)


def _capitals(raw: str) -> set[str]:
    """Capitalised words that do not start a sentence (``Ultra`` in "Galaxy S24 Ultra"), lower-cased."""
    text = unicodedata.normalize("NFKC", raw.strip())
    return {
        m.group().lower() for m in _CAPITAL.finditer(text) if not _SENTENCE_START.search(text[: m.start()])
    }


def veto(a: GuardFeatures, b: GuardFeatures, cfg: GuardConfig) -> str | None:
    """The first guard that differs (a metric label), or None when the candidate may be served."""
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
    return None
