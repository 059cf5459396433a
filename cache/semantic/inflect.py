"""Forms of the policy's own synonym terms it did not list (pure; issue 25, sixth pass): the other
number of a noun phrase's last word, and the other auxiliary inside a question phrase.

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

The other auxiliary: a question phrase ``when does online check in open`` is also ``when is online
check in open`` ("When's online check-in open?" had no key next to it, ``tune4``) and ``when will …``:
``does``, ``do``, ``is``, ``are``, ``will`` stand for one another inside a term, where a word the
auxiliary belongs to follows it (``how long does the battery last``), never as a term's last word
(``how much is`` stays ``how much is``: ``how much does`` would swallow "how much does it weigh"'s
start). These five are built-in fillers of every route already (``vocab.AUXILIARIES``): a question
that differs from another only by one of them shares its key, so writing one for another inside a
term adds no meaning. ``can``, ``should`` and the negated forms are not among them. The same rules
of unclaimed and claimed-once apply.

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


SWAPPABLE = ("does", "do", "is", "are", "will")


def _forms(words: list[str]) -> list[str]:
    out = []
    if len(words) >= 2 and not any(w in FUNCTION_WORDS for w in words):
        other = other_number(words[-1])  # a noun phrase only: "roaming rate", not "charges"
        if other is not None:
            out.append(" ".join([*words[:-1], other]))
    for i, w in enumerate(words[:-1]):
        if w in SWAPPABLE and any(v not in FUNCTION_WORDS for v in words[i + 1 :]):
            out += [" ".join([*words[:i], a, *words[i + 1 :]]) for a in SWAPPABLE if a != w]
    return out


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
            for new in _forms(term.split()):
                if new not in blocked:
                    claims.setdefault(new, set()).add(canonical)
    out: dict[str, list[str]] = {}
    for new, owners in sorted(claims.items()):
        if len(owners) == 1:
            out.setdefault(next(iter(owners)), []).append(new)
    return {c: tuple(ts) for c, ts in out.items()}
