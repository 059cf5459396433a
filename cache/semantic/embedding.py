"""The guarded embedding mode's candidate index: bounded, partitioned, exact search (pure).

Candidates live in hard partitions (tenant salt, model, system prompt, history, parameters: see
``fingerprint.partition_id``): a question is only ever compared with questions asked in exactly the same
context, so no threshold can make one tenant's answer reach another, or one system prompt's answer
another's. Each partition keeps at most ``max_candidates`` (LRU), and the index at most
``max_partitions``; the search is an exact scan of one partition (64 × 384 dimensions: about 0.4 ms in
plain Python, measured by ``python -m bench.semantic``), so no approximate index can miss the true
best candidate and no numpy is needed at run time.

Candidates are per process; their entries are in the shared store, so a pod that never saw a question
simply misses it (phase 1 of issue 17; sharing candidates through Redis is future work).
"""

from __future__ import annotations

import math
import operator
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from cache.semantic.guards import GuardFeatures
from cache.semantic.tags import TagRef


class VectorError(ValueError):
    """Not a usable embedding (empty, non-finite, zero, or of another dimension)."""


def unit(vector: Sequence[float]) -> array:
    if not vector:
        raise VectorError("empty embedding")
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if not math.isfinite(norm) or norm == 0.0:
        raise VectorError("embedding has a zero or non-finite norm")
    return array("f", (x / norm for x in vector))


def cosine(a: array, b: array) -> float:
    """Both unit vectors of the same length."""
    return sum(map(operator.mul, a, b))


@dataclass(frozen=True, slots=True)
class Candidate:
    key: str
    vector: array
    guards: GuardFeatures
    refs: tuple[TagRef, ...]


class CandidateIndex:
    def __init__(self, max_candidates: int = 64, max_partitions: int = 10_000) -> None:
        self.max_candidates = max_candidates
        self.max_partitions = max_partitions
        self._parts: OrderedDict[str, OrderedDict[str, Candidate]] = OrderedDict()

    def __len__(self) -> int:
        return sum(len(p) for p in self._parts.values())

    def add(self, partition: str, cand: Candidate) -> None:
        part = self._parts.get(partition)
        if part is None:
            part = self._parts[partition] = OrderedDict()
            while len(self._parts) > self.max_partitions:
                self._parts.popitem(last=False)
        else:
            self._parts.move_to_end(partition)
        part[cand.key] = cand
        part.move_to_end(cand.key)
        while len(part) > self.max_candidates:
            part.popitem(last=False)

    def discard(self, partition: str, key: str) -> None:
        part = self._parts.get(partition)
        if part is not None:
            part.pop(key, None)

    def search(
        self, partition: str, vector: array, threshold: float, meaning: tuple[object, ...] | None = None
    ) -> list[tuple[float, Candidate]]:
        """Candidates at least ``threshold`` similar, best first; with ``meaning``, also those below it
        whose verified meaning (``GuardFeatures.meaning``) is that one: their fingerprints already prove
        the two questions ask the same thing, whatever an embedding model that may not cover their
        language scores them."""
        part = self._parts.get(partition)
        if not part:
            return []
        self._parts.move_to_end(partition)
        scored = []
        for cand in part.values():
            if len(cand.vector) != len(vector):
                continue  # the embedder changed its dimension: never comparable
            sim = cosine(vector, cand.vector)
            if sim >= threshold or (meaning is not None and cand.guards.meaning == meaning):
                scored.append((sim, cand))
        scored.sort(key=lambda sc: -sc[0])
        return scored
