"""Dictionary extractor: a slot's values and the aliases that name them (``苹果15`` → ``iphone15``).

Aliases are normalised with the route's own normaliser (synonyms included) when the policy loads, so
they match exactly what the question becomes; the longest alias wins at one position, so
``iphone 15 pro`` is never read as ``iphone 15`` followed by ``pro``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from cache.semantic.extractors.base import Found
from cache.semantic.terms import TermMatcher

if TYPE_CHECKING:
    from cache.semantic.normalize import Normalizer
    from config.semantic import ExtractorConfig


class DictionaryExtractor:
    __slots__ = ("_matcher", "_value", "slot")

    def __init__(self, slot: str, values: dict[str, list[str]], normalize: Normalizer) -> None:
        self.slot = slot
        self._value: dict[str, str] = {}
        for value, aliases in values.items():
            for alias in (value, *aliases):
                self._value[normalize(alias)] = value
        self._matcher = TermMatcher(self._value)

    def extract(self, text: str) -> list[Found]:
        return [Found(self.slot, self._value[m.term], m.start, m.end) for m in self._matcher.find(text)]


def build(cfg: ExtractorConfig, normalize: Normalizer) -> DictionaryExtractor:
    assert cfg.slot is not None
    return DictionaryExtractor(cfg.slot, cfg.values, normalize)
