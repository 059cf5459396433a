"""Intent by the policy's own words in any order (pure; issue 25, fifth pass).

A fingerprint finds an intent only where one of its *phrases* occurs as written ("how fast does it
charge"), so "How fast does the iPhone 15 charge?" (the product sits inside the phrase) and "How many
mAh is the Pixel 8 battery?" (``battery`` left over after ``how many mah``) had no key, and on
held-out sets written without reading the policies recall stayed at 0.43-0.70 (rounds 3 and 4) while
tune and dev reached 0.92-0.97. This rule reads the words a question has left after slots,
constraints, intent phrases and fillers (``residual``) and accepts an intent when *every one of them
is a content word of that intent's own phrases*:

* with an intent phrase found, the left-over words must all be words of that intent's phrases, at least
  one of them not a harmless word ("how many mah is the … battery": ``battery`` is a word of ``battery
  capacity``; with only harmless words left, "screen size, just", it stays the guarded mode's
  compatible rule, which needs the similarity too);
* with none found, the words must all be words of exactly one intent's phrases and hold every content
  word of one of its phrases ("how fast does the … charge" holds ``fast charge``; "check my balance"
  holds only half of ``data balance`` and stays a miss: it may ask about money).

It never reads a word the policy does not use, so it adds no vocabulary; what it relaxes is the order
and adjacency of the policy's own words. It refuses, at the first of these: a negation anywhere in the
question (``NEGATIONS``), a number or spelled-out number left over, a preposition left over (``from`` and
``to`` carry a direction the bag cannot see), a question word that says what is asked (``when``,
``where``, ``why``, ``which``, ``who``: "When will order … arrive?" asks a date, not the status), a
word of a slot's or constraint's aliases left over (``pro``, ``ultra``: a different entity), a canonical of another synonym group, Chinese text (a bag of
characters is not a bag of words: ``退`` is in ``退货`` and ``退票``). Words the bag ignores are only the
harmless ones of ``SIMILARITY_SAFE``: articles, pronouns, auxiliaries, ``what``/``how``/``much``/``many``
and politeness always, the asking verbs only where no intent phrase of the policy uses them (``check`` is
harmless for a shop, not for an airline); never a modal (``can``, ``should``: "Can I change my ticket?"
asks whether, not what it costs). An intent-word set is derived from the policy when the route
compiles, never stored.

Measured instead (an exploration on tune and dev only, not shipped): mapping the left-over words to the
nearest policy intent by all-MiniLM-L6-v2 cosine served 9-15 of 125 near misses at a threshold of 0.8,
whatever the margin between the first and second intent ("how do i decrease my credit limit" → limit
increase 0.86 vs 0.44, "how long does the … take to charge" → charging power 0.87), and at 0.9 none but
for 1 of 6 same-answer pairs; see docs/semantic-cache.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cache.semantic.normalize import base_normalize, has_cjk
from cache.semantic.vocab import FUNCTION_WORDS, NEGATIONS, NUMBER_WORDS, SIMILARITY_SAFE
from config.semantic import SemanticConfig


def _set(words: str) -> frozenset[str]:
    return frozenset(words.split())


# Left over, these carry a direction or relation the bag cannot check.
PREPOSITIONS = _set(
    """of for in on at to from by with without about into onto as per via over under between after
    before during than off out up down away back through"""
)

# Harmless words outside ``FUNCTION_WORDS`` that no domain uses as a content word; the asking verbs of
# ``SIMILARITY_SAFE`` (``check``, ``get``, ``include``) are ignored only where no intent phrase uses them.
_POLITE = _set("just also exactly actually really any some ok okay thanks thank hi hello hey kindly")
# A question word that says what is asked (a date, a place, a reason, a choice) is read only inside a
# phrase: "When will order SO20240101 arrive?" (``when`` + the status phrase ``arrive``) asks a date,
# "Where is my order?" a place; the project's own set labels them two answers (bench/data/semantic_eval.jsonl
# g14-8, its dev split) where the independent dev split labels them one (dev-shop-016): the stricter wins.
QUESTION_WORDS = _set("when where why which who whom whose")
# "Can I change my ticket?" asks whether, not what it costs: a modal is never ignored by the bag.
MODALS = _set("can could should may might must would")


@dataclass(frozen=True, slots=True)
class IntentWords:
    words: dict[str, frozenset[str]]  # intent -> content words of its English phrases
    phrases: dict[str, tuple[frozenset[str], ...]]  # intent -> each phrase's content words (non-empty)
    ignorable: frozenset[str]  # harmless words no intent uses as a content word
    entity_words: frozenset[str]  # words of slot and constraint aliases

    def resolve(self, residual: Iterable[str], intent: str | None) -> str | None:
        """The intent the ``residual`` words name (``intent``: the one a phrase found), or None."""
        rest = [w for w in residual if w not in self.ignorable]
        if not rest:  # only harmless words left over: the guarded mode's compatible rule, on similarity
            return None
        for w in rest:
            if (
                w in NEGATIONS or w in NUMBER_WORDS or w in PREPOSITIONS or w in QUESTION_WORDS
                or w in self.entity_words
                or w == "_" or not w.isascii() or any(c.isdigit() for c in w)
            ):  # fmt: skip
                return None
        if intent is not None:
            return intent if all(w in self.words.get(intent, ()) for w in rest) else None
        have = set(rest)
        fits = [
            i for i, ws in self.words.items()
            if have <= ws and any(p <= have for p in self.phrases.get(i, ()))
        ]  # fmt: skip
        return fits[0] if len(fits) == 1 else None


def _words(text: str) -> list[str]:
    return base_normalize(text).split()


def intent_words(cfg: SemanticConfig) -> IntentWords:
    """The bag rule's word sets for ``cfg`` (module docstring)."""
    groups = {g.canonical: g.terms for g in cfg.synonyms}
    raw: dict[str, set[str]] = {}
    for rule in cfg.intents:
        wordings = [p for t in rule.terms for p in groups.get(t, [t])]
        raw[rule.name] = {w for p in wordings if not has_cjk(p) for w in _words(p)}
    used = set().union(*raw.values()) if raw else set()
    closed = (SIMILARITY_SAFE & FUNCTION_WORDS) | _POLITE
    ignorable = frozenset((closed | (SIMILARITY_SAFE - used)) - MODALS)
    drop = ignorable | PREPOSITIONS | QUESTION_WORDS | NEGATIONS | set(NUMBER_WORDS)

    def content(ws: Iterable[str]) -> frozenset[str]:
        return frozenset(w for w in ws if w not in drop and not any(c.isdigit() for c in w))

    words = {name: content(ws) for name, ws in raw.items()}
    phrases = {
        rule.name: tuple(
            c for p in (p for t in rule.terms for p in groups.get(t, [t])) if not has_cjk(p)
            if (c := content(_words(p)))
        )
        for rule in cfg.intents
    }  # fmt: skip
    entity = {
        w
        for e in (*cfg.slots, *cfg.constraints)
        for value, aliases in e.values.items()
        for a in (value, *aliases)
        if not has_cjk(a)
        for w in _words(a)
    }
    return IntentWords(
        words, phrases, ignorable, frozenset(entity - set().union(*words.values()) if words else entity)
    )
