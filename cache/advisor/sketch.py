"""One (tenant, model)'s bounded sketch of recent prompts, and its price-free snapshot.

What one observation records (no prompt text anywhere; hashes are salted per tenant and model):

- **Block positions.** The router's chained block hashes go into a direct-mapped table of
  ``recent_blocks`` slots (hash's low bits → slot; the slot keeps the full hash and when it was last
  seen). Per block position ``i`` three counters: requests whose prompt reaches block ``i``, those whose
  ``h_i`` was seen before (the prefix through block ``i`` repeats: a replica may hold it), and those
  that saw it within the explicit-cache TTL (a ``cache_control`` entry would still live). A chained
  hash covers everything before it, so the leading run of repeated positions is the request's
  repeatable prefix. A direct-mapped table loses an entry only when another hash takes its slot (a
  false "new", never a false "repeat": the whole 64-bit hash must match), costs 16 bytes a slot, and
  is updated for all of a prompt's blocks in a handful of numpy calls (about 10 µs for 256 blocks).
- **Content-defined chunks** (``cache.advisor.chunking``) of the rendered prompt, hashed with xxh3 under
  the sketch's seed, counted in a Misra–Gries summary of at most ``2 * top_chunks`` entries: when it is
  full, the ``top_chunks``-th largest count is subtracted from every entry and the non-positive ones
  are dropped, so memory is bounded by construction and any chunk in more than ``chunks per request /
  top_chunks`` of requests is kept (its count is low by at most the total subtracted). Each entry
  keeps numbers only: whether it fell inside the request's repeatable prefix, the chunk before it
  (to chain chunks into spans), and its message index, role code, token range and distance to the
  prompt's end, refreshed at counts 2, 4, 8, … (a chunk seen once costs no layout parsing).
- **Marked prefixes** (``cache_control``): whether an explicit entry of that length would have been
  read (seen within the TTL) or created, and the tokens a replica could have served implicitly.
- **Short prompts** below the implicit minimum whose prefix repeats (cached, never discounted).

``snapshot`` turns the counters into a ``Snapshot``: spans of stable chunks (in at least ``min_share``
of requests) that fell outside the repeatable prefix, the per-position counters, and the marked and
short-prompt totals. ``cache.advisor.findings`` prices a snapshot; this module knows no money.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from cache.advisor.chunking import (
    NO_LAYOUT,
    PROMPT_ROLE,
    TOOLS_ROLE,
    Chunker,
    Layout,
    chat_layout,
    role_name,
)

_xxh3 = xxhash.xxh3_64_intdigest

# Entry fields of the chunk summary (a list per chunk hash).
COUNT, JUDGED, COVERED, PREV, MSG, ROLE, START_MIN, START_MAX, LENGTH, MSTART, TAIL, SERIAL = range(12)


def sketch_seed(salt: str, model: str) -> int:
    """The chunk-hash seed of a (tenant salt, model): length-prefixed, so pairs cannot run together."""
    s, m = salt.encode("utf-8", "surrogatepass"), model.encode("utf-8", "surrogatepass")
    return _xxh3(b"advisor\x00" + len(s).to_bytes(4, "little") + s + len(m).to_bytes(4, "little") + m)


@dataclass(frozen=True, slots=True)
class SketchShape:
    """Sizes and the rules an observation needs (set per model from the policy)."""

    block_size: int
    positions: int  # block positions counted (routing max_prefix_tokens // block_size)
    table_slots: int  # power of two
    top_chunks: int
    chunk_bytes: int
    max_prompt_bytes: int
    explicit_ttl_s: float
    explicit_min_tokens: int
    implicit_min_tokens: int

    def memory_bound_bytes(self) -> int:
        """An upper bound of one sketch's memory: table, counters and a full chunk summary.

        A summary entry is a dict slot and key (~100 bytes) plus an 11-item list of ints (~400 bytes);
        ``tests/unit/test_advisor_sketch.py`` measures a full sketch against this bound.
        """
        return 16 * self.table_slots + 3 * 8 * self.positions + 2 * self.top_chunks * 520 + 4096


@dataclass(frozen=True, slots=True)
class Span:
    """Chained stable chunks that fell outside the repeatable prefix (numbers only)."""

    message: int  # -1: the tools header
    role: str
    start: int  # tokens from the prompt's start (smallest seen)
    start_max: int  # largest start seen: differs from ``start`` when the span moves
    tokens: int
    message_start: int  # tokens from its message's start
    tail: int  # tokens between the span's end and the prompt's end (last seen)
    share: float  # requests that contained it / observed requests
    uncovered: float  # of the requests where it was judged, share where it lay past the repeatable prefix

    @property
    def end(self) -> int:
        return self.start + self.tokens

    @property
    def moves(self) -> bool:
        return self.start_max != self.start


@dataclass(frozen=True, slots=True)
class MarkedTotals:
    """Requests with a ``cache_control`` prefix of at least the explicit minimum, and below it."""

    requests: int = 0
    prompt_tokens: int = 0
    hit_tokens: int = 0  # marked tokens of requests whose prefix was seen within the TTL (a read)
    new_tokens: int = 0  # ... never seen before (a creation, used once so far)
    stale_tokens: int = 0  # ... seen, but longer ago than the TTL (a creation again)
    repeat_tokens: int = 0  # tokens of those requests' repeatable prefixes (what implicit would serve)
    below_requests: int = 0
    below_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A sketch's counters at one moment, without prices."""

    tenant: str
    model: str
    started_at: float
    ended_at: float
    requests: int
    prompt_tokens: int
    repeat_tokens: int  # sum over requests of the repeatable prefix, tokens
    block_size: int
    reach: tuple[int, ...]
    repeat: tuple[int, ...]
    within_ttl: tuple[int, ...]
    spans: tuple[Span, ...]
    marked: MarkedTotals
    short_requests: int  # prompts below the implicit minimum
    short_repeat_tokens: int  # their repeatable-prefix tokens (cached, not discounted)
    long_requests: int  # prompts at or above the implicit minimum
    stable_prefix_tokens: int  # the prefix that at least half the requests reaching it repeat
    # Chunk positions in tokens for locating an explicit prefix's end: (start, tokens, message, role) of
    # the most frequent stable chunks, sorted by start.
    landmarks: tuple[tuple[int, int, int, str], ...] = ()

    @property
    def duration_s(self) -> float:
        return max(0.0, self.ended_at - self.started_at)


class Sketch:
    """Mutable; one per (tenant, model). Not thread-safe (one event loop calls it)."""

    def __init__(self, shape: SketchShape, tenant: str, model: str, seed: int, now: float):
        self.shape = shape
        self.tenant = tenant
        self.model = model
        self.seed = seed
        self.started_at = now
        self.last_at = now
        self.chunker = Chunker(shape.chunk_bytes)
        self._mask = np.uint64(shape.table_slots - 1)
        self._tags = np.zeros(shape.table_slots, dtype=np.uint64)
        self._stamps = np.full(shape.table_slots, -np.inf, dtype=np.float64)
        self.reach = np.zeros(shape.positions, dtype=np.int64)
        self.repeat = np.zeros(shape.positions, dtype=np.int64)
        self.within_ttl = np.zeros(shape.positions, dtype=np.int64)
        self.chunks: dict[int, list[int]] = {}
        self.subtracted = 0  # total subtracted from every count by the summary's prunes
        self.requests = 0
        self.prompt_tokens = 0
        self.repeat_tokens = 0
        self.short_requests = 0
        self.short_repeat_tokens = 0
        self._marked = [0] * 8  # MarkedTotals fields, in order

    # -- observation ----------------------------------------------------------------------------------

    def observe(
        self,
        prompt: bytes,
        prompt_tokens: int,
        block_hashes: Sequence[int],
        *,
        chat: bool,
        marked_tokens: int,
        now: float,
    ) -> None:
        shape = self.shape
        self.requests += 1
        self.prompt_tokens += prompt_tokens
        self.last_at = now
        n, lead, within = self._blocks(block_hashes, now)
        repeat_tokens = min(lead * shape.block_size, prompt_tokens)
        self.repeat_tokens += repeat_tokens
        if prompt_tokens < shape.implicit_min_tokens:
            self.short_requests += 1
            self.short_repeat_tokens += repeat_tokens
        if marked_tokens > 0:
            self._mark(marked_tokens, prompt_tokens, repeat_tokens, n, lead, within)
        # A chunk ending inside the block after the repeatable prefix counts as covered: a cache holds
        # whole blocks, so no layout would cache that partial block. Coverage is known up to the end of
        # the hashed blocks, or everywhere when the repeat stops inside them.
        known_until = (n * shape.block_size) if lead == n else (1 << 62)
        self._chunks(prompt, prompt_tokens, repeat_tokens + shape.block_size, known_until, chat)

    def _blocks(self, block_hashes: Sequence[int], now: float) -> tuple[int, int, np.ndarray]:
        """Count positions; the repeatable prefix ends after the *last* block seen before (a chained hash
        seen again means its whole prefix was, so a lost slot earlier in the chain does not cut it)."""
        n = min(len(block_hashes), self.shape.positions)
        if n == 0:
            return 0, 0, np.zeros(0, dtype=bool)
        h = np.array(block_hashes[:n], dtype=np.uint64)
        slots = (h & self._mask).astype(np.intp)
        seen = self._tags[slots] == h
        within = seen & ((now - self._stamps[slots]) <= self.shape.explicit_ttl_s)
        hits = np.flatnonzero(seen)
        lead = int(hits[-1]) + 1 if len(hits) else 0
        if lead:
            within = np.maximum.accumulate(within[::-1])[::-1]  # position i: some j >= i read in time
        self.reach[:n] += 1
        self.repeat[:lead] += 1
        self.within_ttl[:n] += within
        self._tags[slots] = h
        self._stamps[slots] = now
        return n, lead, within

    def _mark(
        self,
        marked_tokens: int,
        prompt_tokens: int,
        repeat_tokens: int,
        n: int,
        lead: int,
        within: np.ndarray,
    ) -> None:
        m = self._marked
        if marked_tokens < self.shape.explicit_min_tokens:
            m[6] += 1
            m[7] += marked_tokens
            return
        marked_tokens = min(marked_tokens, prompt_tokens)
        k = min(marked_tokens // self.shape.block_size, n)  # the block that ends the marked prefix
        m[0] += 1
        m[1] += prompt_tokens
        if k and within[k - 1]:
            m[2] += marked_tokens
        elif k and lead >= k:  # seen, but longer ago than the TTL
            m[4] += marked_tokens
        else:
            m[3] += marked_tokens
        m[5] += repeat_tokens

    def _chunks(
        self, prompt: bytes, prompt_tokens: int, covered_until: int, known_until: int, chat: bool
    ) -> None:
        shape = self.shape
        nbytes = len(prompt)
        if nbytes == 0:
            return
        data = prompt[: shape.max_prompt_bytes]
        ends = self.chunker.cuts(data)
        starts = [0, *ends[:-1]]
        seed = self.seed
        hashes = [_xxh3(data[s:e], seed) for s, e in zip(starts, ends, strict=True)]
        # Chunks [0, covered) end inside the repeatable prefix, [covered, known) are judged outside it.
        ratio = prompt_tokens / nbytes
        covered = bisect_right(ends, covered_until / ratio)
        known = bisect_right(ends, known_until / ratio)
        table = self.chunks
        serial = self.requests
        cap = 2 * shape.top_chunks
        prev = 0
        locate: list[tuple[list[int], int]] = []
        for i, h in enumerate(hashes):
            entry = table.get(h)
            if entry is None:
                if len(table) >= cap:
                    self._prune()
                entry = table[h] = [0, 0, 0, 0, 0, 0, 1 << 62, 0, 0, 0, 0, 0]
            elif entry[SERIAL] == serial:  # a chunk repeated inside one prompt counts once per request
                prev = h
                continue
            entry[SERIAL] = serial
            c = entry[COUNT] = entry[COUNT] + 1
            if i < known:
                entry[JUDGED] += 1
                if i < covered:
                    entry[COVERED] += 1
            if c & (c - 1) == 0 and c > 1:  # counts 2, 4, 8, ...: refresh where it sits
                entry[PREV] = prev
                locate.append((entry, i))
            prev = h
        if locate:
            layout = chat_layout(data) if chat else NO_LAYOUT
            self._locate(locate, starts, ends, layout, chat, ratio, prompt_tokens)

    @staticmethod
    def _locate(
        locate: list[tuple[list[int], int]],
        starts: list[int],
        ends: list[int],
        layout: Layout,
        chat: bool,
        ratio: float,
        prompt_tokens: int,
    ) -> None:
        msgs = layout.message_of([starts[i] for _, i in locate])
        for (entry, i), m in zip(locate, msgs, strict=True):
            tok_s, tok_e = int(starts[i] * ratio), int(ends[i] * ratio)
            entry[MSG] = m
            if not chat:
                entry[ROLE], msg_start = PROMPT_ROLE, 0
            elif m < 0:
                entry[ROLE], msg_start = TOOLS_ROLE, 0
            else:
                entry[ROLE], msg_start = layout.roles[m], int(int(layout.starts[m]) * ratio)
            entry[START_MIN] = min(entry[START_MIN], tok_s)
            entry[START_MAX] = max(entry[START_MAX], tok_s)
            entry[LENGTH] = tok_e - tok_s
            entry[MSTART] = tok_s - msg_start
            entry[TAIL] = prompt_tokens - tok_e

    def _prune(self) -> None:
        """Misra–Gries: subtract the ``top_chunks``-th largest count from all; drop what reaches 0."""
        table = self.chunks
        k = heapq.nlargest(self.shape.top_chunks, (e[COUNT] for e in table.values()))[-1]
        k = max(k, 1)
        self.subtracted += k
        for h in [h for h, e in table.items() if e[COUNT] <= k]:
            del table[h]
        for e in table.values():
            e[COUNT] -= k

    # -- snapshot -------------------------------------------------------------------------------------

    def snapshot(self, min_share: float, now: float) -> Snapshot:
        n_req = self.requests
        reach, repeat = self.reach, self.repeat
        last = int(np.flatnonzero(reach)[-1]) + 1 if reach.any() else 0
        return Snapshot(
            tenant=self.tenant,
            model=self.model,
            started_at=self.started_at,
            ended_at=max(now, self.last_at),
            requests=n_req,
            prompt_tokens=self.prompt_tokens,
            repeat_tokens=self.repeat_tokens,
            block_size=self.shape.block_size,
            reach=tuple(reach[:last].tolist()),
            repeat=tuple(repeat[:last].tolist()),
            within_ttl=tuple(self.within_ttl[:last].tolist()),
            spans=self._spans(min_share),
            marked=MarkedTotals(*self._marked),
            short_requests=self.short_requests,
            short_repeat_tokens=self.short_repeat_tokens,
            long_requests=n_req - self.short_requests,
            stable_prefix_tokens=_stable_prefix(reach[:last], repeat[:last]) * self.shape.block_size,
            landmarks=self._landmarks(),
        )

    def _stable(self, min_share: float) -> dict[int, list[int]]:
        floor = max(2, min_share * self.requests)
        return {h: e for h, e in self.chunks.items() if e[COUNT] >= floor and e[START_MIN] < (1 << 62)}

    def _landmarks(self) -> tuple[tuple[int, int, int, str], ...]:
        """Chunks in at least half of the requests, by position: what a prefix length ends in."""
        stable = sorted(self._stable(0.5).values(), key=lambda e: e[START_MIN])
        return tuple((e[START_MIN], e[LENGTH], e[MSG], role_name(e[ROLE])) for e in stable)

    def _spans(self, min_share: float) -> tuple[Span, ...]:
        """Stable chunks mostly past the repeatable prefix, chained by their predecessor into spans."""
        n_req = self.requests
        stable = {
            h: e
            for h, e in self._stable(min_share).items()
            if e[JUDGED] and (e[JUDGED] - e[COVERED]) * 2 > e[JUDGED]
        }
        if not stable:
            return ()
        follower: dict[int, int] = {}
        for h, e in stable.items():
            p = e[PREV]
            if p in stable and p != h and (p not in follower or stable[follower[p]][COUNT] < e[COUNT]):
                follower[p] = h
        followed = set(follower.values())
        spans = []
        for head, e in stable.items():
            if head in followed:  # inside another span's chain
                continue
            chain, h, seen = [e], head, {head}
            while h in follower and follower[h] not in seen:
                h = follower[h]
                seen.add(h)
                chain.append(stable[h])
            count = min(c[COUNT] for c in chain)
            judged = sum(c[JUDGED] for c in chain)
            covered = sum(c[COVERED] for c in chain)
            last = chain[-1]
            spans.append(
                Span(
                    message=e[MSG],
                    role=role_name(e[ROLE]),
                    start=e[START_MIN],
                    start_max=e[START_MAX],
                    tokens=sum(c[LENGTH] for c in chain),
                    message_start=e[MSTART],
                    tail=last[TAIL],
                    share=min(1.0, count / n_req),
                    uncovered=(judged - covered) / judged,
                )
            )
        spans.sort(key=lambda s: (s.start, -s.tokens))
        return tuple(spans)


def _stable_prefix(reach: np.ndarray, repeat: np.ndarray) -> int:
    """Leading block positions where at least half of the requests reaching them repeat them."""
    if not len(reach):
        return 0
    ok = repeat * 2 >= reach
    return len(ok) if ok.all() else int(ok.argmin())
