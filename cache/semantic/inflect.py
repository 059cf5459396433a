"""The singular and plural of the policy's own synonym terms (pure; issue 25, sixth pass).

A policy lists the wordings it has seen: the telecom example's ``roaming_rate`` has ``roaming
rates`` but not ``roaming rate``, so "roaming rate for Thailand" left ``rate`` unexplained and had no
key (the sixth pass's ``tune4`` split, bench/data/semantic_heldout4.jsonl). A term's last word in the
other number asks what the term asks ("roaming charge" / "roaming charges", "return" / "returns"), so
``variants`` adds it to the same canonical, and only when all of these hold:

* the term is a noun phrase: two or more words, none a function word (``roaming rate``, ``interest
  rates``, ``checked baggage allowance``; not ``charges``, which alone may be a verb, nor a sentence
  such as ``how fast does it charge``, whose last word is one);
* the last word is ASCII letters only, at least four of them, and no function word, negation or
  number word (``is``, ``no``, ``one`` have no plural that means the same);
* the other form is the last word with ``s`` added, or with a final ``s`` removed (not from ``ss``,
  ``us``, ``is``: ``business``, ``status``, ``this``); nothing else (``ies``/``y`` and irregular
  plurals are left to the policy);
* the new term is not already a term of any synonym group (the policy's own mapping wins) nor an
  intent term, filler, slot or constraint alias of the policy, and no other group would get the same
  new term (a form claimed twice is added to neither).

The typo corrector never corrects an inflection (``cache.semantic.typos``): a word with an ``s`` more
or less may be another word in general. Here it is the policy's own term in the other number, which
is why the rule is this narrow: only whole terms, only their last word, only where unclaimed.
"""

from __future__ import annotations

from collections.abc import Iterable

from cache.semantic.normalize import base_normalize
from cache.semantic.vocab import FUNCTION_WORDS, NEGATIONS, NUMBER_WORDS


def other_number(word: str) -> str | None:
    """``word`` with a final ``s`` added or removed, or None where the rule above does not apply."""
    if len(word) < 4 or not (word.isascii() and word.isalpha()):
        return None
    if word in FUNCTION_WORDS or word in NEGATIONS or word in NUMBER_WORDS:
        return None
    if word.endswith("s"):
        return None if word.endswith(("ss", "us", "is")) or len(word) < 5 else word[:-1]
    return word + "s"


def variants(
    synonyms: Iterable[tuple[str, Iterable[str]]], taken: Iterable[str]
) -> dict[str, tuple[str, ...]]:
    """canonical -> the new terms (normalised) its terms' other number adds; ``taken``: the policy's
    intent terms, fillers and slot and constraint aliases (never turned into a synonym)."""
    groups = [(c, [base_normalize(t) for t in terms]) for c, terms in synonyms]
    existing = {t for _, terms in groups for t in terms}
    blocked = existing | {base_normalize(t) for t in taken}
    claims: dict[str, set[str]] = {}
    for canonical, terms in groups:
        for term in terms:
            words = term.split()
            if len(words) < 2 or any(w in FUNCTION_WORDS for w in words):
                continue  # a noun phrase only: "roaming rate", not "charges", "how fast does it charge"
            other = other_number(words[-1])
            if other is None:
                continue
            new = " ".join([*words[:-1], other])
            if new not in blocked:
                claims.setdefault(new, set()).add(canonical)
    out: dict[str, list[str]] = {}
    for new, owners in sorted(claims.items()):
        if len(owners) == 1:
            out.setdefault(next(iter(owners)), []).append(new)
    return {c: tuple(ts) for c, ts in out.items()}
