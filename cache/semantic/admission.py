"""The admission protocol: may this question be answered from, and stored in, the semantic cache?

Rules are evaluated in policy order and the first whose terms or patterns occur in the normalised
question decides, with its reason; ``otherwise`` decides when none does. The shipped rules (English
and Chinese) bypass comparative (``vs``, ``哪个好``), predictive (``will``, ``预计``) and time-sensitive
(``today``, ``现在``, ``库存``) wording and allow factual wording: an embedding cannot tell "the battery
life of X" from "is X's battery life better than Y's", and no fingerprint should try. Patterns
compile with ``re.ASCII`` so that ``\\b`` separates Chinese characters from ASCII words (``更长than``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cache.semantic.normalize import Normalizer
from cache.semantic.terms import TermMatcher
from config.semantic import AdmissionConfig


@dataclass(frozen=True, slots=True)
class Decision:
    action: Literal["allow", "bypass"]
    reason: str

    @property
    def allowed(self) -> bool:
        return self.action == "allow"


@dataclass(frozen=True, slots=True)
class _Rule:
    decision: Decision
    terms: TermMatcher
    patterns: tuple[re.Pattern[str], ...]

    def matches(self, text: str) -> bool:
        return self.terms.search(text) or any(p.search(text) for p in self.patterns)


class Admission:
    __slots__ = ("_otherwise", "_rules")

    def __init__(self, cfg: AdmissionConfig, normalize: Normalizer) -> None:
        self._rules = tuple(
            _Rule(
                Decision(r.action, r.reason),
                TermMatcher(normalize(t) for t in r.terms),
                tuple(re.compile(p, re.ASCII) for p in r.patterns),
            )
            for r in cfg.rules
        )
        self._otherwise = Decision(cfg.otherwise, "otherwise")

    def decide(self, text: str) -> Decision:
        """``text`` is the normalised question."""
        for rule in self._rules:
            if rule.matches(text):
                return rule.decision
        return self._otherwise
