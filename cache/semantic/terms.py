"""Literal terms found in normalised text: one compiled alternation, longest term first (pure).

Every layer of the semantic cache looks for words and phrases: synonyms, dictionary aliases, intent
wordings, fillers, admission wordings, negations. They all use this one matcher so they agree on what
"the term occurs" means:

* a term whose first (last) character is an ASCII letter or digit must not be preceded (followed) by
  one, nor by ``_``: ``no`` is not found in ``know`` or ``order_no``, ``iphone 15`` not in
  ``iphone 15s``;
* a term that starts or ends with any other character (Chinese has no spaces) matches anywhere;
* at one position the longest term wins, and matches never overlap (scanning left to right).

One regex alternation is the fastest way Python offers to find many literals: the search is done in C
and costs about 1 µs per 100 characters for a few hundred terms (``python -m bench.semantic`` reports
the whole fingerprint's cost per request).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

_WORD_EDGE = re.compile(r"[a-z0-9]")


def _term_regex(term: str) -> str:
    body = re.escape(term)
    if _WORD_EDGE.match(term[0]):
        body = r"(?<![a-z0-9_])" + body
    if _WORD_EDGE.match(term[-1]):
        body = body + r"(?![a-z0-9_])"
    return body


@dataclass(frozen=True, slots=True)
class Match:
    start: int
    end: int
    term: str


class TermMatcher:
    """Finds the given (already normalised) terms in normalised text."""

    __slots__ = ("_re", "terms")

    def __init__(self, terms: Iterable[str]) -> None:
        uniq = sorted({t for t in terms if t}, key=lambda t: (-len(t), t))
        self.terms: tuple[str, ...] = tuple(uniq)
        self._re = re.compile("|".join(_term_regex(t) for t in uniq)) if uniq else None

    def __bool__(self) -> bool:
        return self._re is not None

    def find(self, text: str) -> list[Match]:
        if self._re is None:
            return []
        return [Match(m.start(), m.end(), m.group()) for m in self._re.finditer(text)]

    def found(self, text: str) -> set[str]:
        return {m.term for m in self.find(text)}

    def search(self, text: str) -> bool:
        return self._re is not None and self._re.search(text) is not None

    def sub(self, text: str, replacement: dict[str, str]) -> str:
        """Each match replaced by ``replacement[term]`` padded with spaces (the caller collapses them)."""
        if self._re is None:
            return text
        return self._re.sub(lambda m: f" {replacement[m.group()]} ", text)
