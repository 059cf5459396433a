"""Slot extractors: find the entities a question names (pure). One module per kind, one table.

An extractor gets the normalised text and returns every ``Found`` (slot, value, span). The fingerprint
uses the spans to check that the whole question is explained (no unexplained words left), the values to
build the key; two different values for one slot make the fingerprint ambiguous (no key).
"""

from __future__ import annotations

from collections.abc import Callable

from cache.semantic.extractors import dictionary, regex
from cache.semantic.extractors.base import Extractor, Found
from cache.semantic.normalize import Normalizer
from config.semantic import ExtractorConfig

EXTRACTORS: dict[str, Callable[[ExtractorConfig, Normalizer], Extractor]] = {
    "dictionary": dictionary.build,
    "regex": regex.build,
}


def build(cfg: ExtractorConfig, normalize: Normalizer) -> Extractor:
    return EXTRACTORS[cfg.kind](cfg, normalize)


__all__ = ["EXTRACTORS", "Extractor", "Found", "build"]
