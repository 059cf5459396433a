"""Regex extractor: named groups fill the slots of their names (``(?P<order_no>so\\d{8,14})``).

Patterns run on the normalised text (lower case, NFKC, synonyms applied) and are compiled when the
policy loads, with ``re.ASCII``: ``\\b`` and ``\\w`` then treat Chinese characters as a boundary, so
``\\b(?P<order_no>so\\d{8})\\b`` finds ``so20231104`` in ``订单so20231104到哪了`` (with Unicode classes a
CJK character is a word character and the id between two of them was never found: issue 25). They
come from the operator's policy, not from clients; the text they run on is bounded by
``max_text_chars``, which bounds the work of any pattern without catastrophic backtracking.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from cache.semantic.extractors.base import Found
from cache.semantic.values import apply

if TYPE_CHECKING:
    from cache.semantic.normalize import Normalizer
    from config.semantic import ExtractorConfig


class RegexExtractor:
    __slots__ = ("_re", "_steps")

    def __init__(self, pattern: str, steps: dict[str, list[str]]) -> None:
        self._re = re.compile(pattern, re.ASCII)
        self._steps = steps

    def extract(self, text: str) -> list[Found]:
        out = []
        for m in self._re.finditer(text):
            for slot, raw in m.groupdict().items():
                if raw is None:
                    continue
                value = apply(raw, self._steps.get(slot, []))
                if value:
                    out.append(Found(slot, value, m.start(), m.end()))
        return out


def build(cfg: ExtractorConfig, normalize: Normalizer) -> RegexExtractor:
    assert cfg.pattern is not None
    return RegexExtractor(cfg.pattern, {k: list(v) for k, v in cfg.normalise.items()})
