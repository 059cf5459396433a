"""What every extractor returns, and the interface it offers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class Found:
    slot: str
    value: str
    start: int
    end: int


class Extractor(Protocol):
    def extract(self, text: str) -> list[Found]: ...
