"""One (tenant, model)'s bounded sketch of recent prompts, and its price-free snapshot.

What one observation records (no prompt text anywhere; hashes are salted per tenant and model):

- **Block positions.** The router's chained block hashes go into a direct-mapped table of
  ``recent_blocks`` slots (hash's low bits → slot; the slot keeps the full hash and when it was last
  seen). Per block position ``i`` three counters: requests whose prompt reaches block ``i``, those whose
  ``h_i`` was seen before (the prefix through block ``i`` repeats: a replica may hold it), and those
  that saw it within the explicit-cache TTL. A chained hash covers everything before it, so the leading
  run of repeated positions is the request's repeatable prefix (``observed`` statistics).
- **The ring of recent requests.** The content-defined chunks (``cache.advisor.chunking``) of the
  rendered prompt, hashed with xxh3 under the sketch's seed, with each chunk's token range, message
  index and role code, the message starts, the prompt's tokens, its marked prefix and its time, as
  numpy arrays (23 bytes a chunk). The oldest request leaves when the ring holds more than
  ``recent_requests`` requests or ``recent_chunks`` chunks: memory is bounded by construction.
  Measured reason (issue 26): a Misra–Gries summary of chunk counts, kept before, undercounted by the
  pruned total, chained spans through their most common successor (a span's share fell to that of
  one continuation at a message boundary) and split one problem into many findings; exact counts over
  a ring of a few hundred requests cost about 2 MB a sketch and let findings be priced by replaying
  the requests through the billing rules (``cache.advisor.replay``).
- **Marked prefixes** (``cache_control``): whether an explicit entry of that length would have been
  read (seen within the TTL) or created.
- **Short prompts** below the implicit minimum whose prefix repeats (cached, never discounted).

``snapshot`` freezes the counters and the ring into a ``Snapshot``; ``cache.advisor.findings`` prices
it. This module knows no money.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xxhash

from cache.advisor.chunking import PROMPT_ROLE, TOOLS_ROLE, Chunker, chat_layout

_xxh3 = xxhash.xxh3_64_intdigest


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
    chunk_bytes: int
    max_prompt_bytes: int
    explicit_ttl_s: float
    explicit_min_tokens: int
    implicit_min_tokens: int
    recent_requests: int = 256
    recent_chunks: int = 65_536

    def memory_bound_bytes(self) -> int:
        """An upper bound of one sketch's memory: table, counters and a full ring of recent requests.

        A chunk in the ring costs 19 bytes (hash 8, token start and end 4 + 4, message 2, role 1), plus 4
        per message start (at most one per chunk); a request ~900 bytes of arrays and object headers.
        ``tests/unit/test_advisor.py`` measures a full sketch against this bound.
        """
        return (
            16 * self.table_slots
            + 3 * 8 * self.positions
            + 23 * self.recent_chunks
            + 900 * self.recent_requests
            + 4096
        )


@dataclass(frozen=True, slots=True, eq=False)
class Observed:
    """One recent request, numbers only: its chunks' salted hashes and where they sit, in prompt tokens."""

    ts: float
    prompt_tokens: int
    marked_tokens: int
    hashes: np.ndarray  # uint64, one per content-defined chunk, in prompt order
    starts: np.ndarray  # int32, the chunk's first token, from the prompt's start
    ends: np.ndarray  # int32, one past its last token
    messages: np.ndarray  # int16, its message index (-1: the tools header)
    roles: np.ndarray  # int8, the role code of its message (cache.advisor.chunking.ROLES)
    message_starts: np.ndarray  # int32, each message's first token, from the prompt's start

    def __repr__(self) -> str:
        return f"Observed(ts={self.ts}, prompt_tokens={self.prompt_tokens}, chunks={len(self.hashes)})"


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
    recent: tuple[Observed, ...]  # the ring of recent requests, oldest first
    marked: MarkedTotals
    short_requests: int  # prompts below the implicit minimum
    short_repeat_tokens: int  # their repeatable-prefix tokens (cached, not discounted)
    long_requests: int  # prompts at or above the implicit minimum
    stable_prefix_tokens: (
        int  # leading tokens (whole blocks) that at least half the requests reaching them repeat
    )

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
        self.recent: deque[Observed] = deque()
        self.recent_chunks = 0
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
        self._chunks(prompt, prompt_tokens, chat, marked_tokens, now)

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

    def _chunks(self, prompt: bytes, prompt_tokens: int, chat: bool, marked_tokens: int, now: float) -> None:
        """Append this request's chunks (salted hashes and token positions only) to the ring of recent
        requests; the oldest leave while the ring holds more than ``recent_requests`` requests or
        ``recent_chunks`` chunks."""
        shape = self.shape
        nbytes = len(prompt)
        if nbytes == 0:
            return
        data = prompt[: shape.max_prompt_bytes]
        ends = self.chunker.cuts(data)[: shape.recent_chunks]
        starts = [0, *ends[:-1]]
        seed = self.seed
        ratio = prompt_tokens / nbytes
        hashes = np.array(
            [_xxh3(data[s:e], seed) for s, e in zip(starts, ends, strict=True)], dtype=np.uint64
        )
        tok_starts = (np.array(starts, dtype=np.float64) * ratio).astype(np.int32)
        tok_ends = (np.array(ends, dtype=np.float64) * ratio).astype(np.int32)
        if chat:
            layout = chat_layout(data)
            msgs = np.array(layout.message_of(starts), dtype=np.int16)
            roles = np.array([TOOLS_ROLE, *layout.roles], dtype=np.int8)[msgs + 1]
            msg_starts = (np.asarray(layout.starts, dtype=np.float64) * ratio).astype(np.int32)
        else:
            msgs = np.zeros(len(ends), dtype=np.int16)
            roles = np.full(len(ends), PROMPT_ROLE, dtype=np.int8)
            msg_starts = np.zeros(1, dtype=np.int32)
        for arr in (hashes, tok_starts, tok_ends, msgs, roles, msg_starts):
            arr.flags.writeable = False  # snapshots share them with a pricing thread: never written again
        obs = Observed(
            now, prompt_tokens, marked_tokens, hashes, tok_starts, tok_ends, msgs, roles, msg_starts
        )
        self.recent.append(obs)
        self.recent_chunks += len(hashes)
        while len(self.recent) > shape.recent_requests or self.recent_chunks > shape.recent_chunks:
            self.recent_chunks -= len(self.recent.popleft().hashes)

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
            recent=tuple(self.recent),
            marked=MarkedTotals(*self._marked),
            short_requests=self.short_requests,
            short_repeat_tokens=self.short_repeat_tokens,
            long_requests=n_req - self.short_requests,
            stable_prefix_tokens=_stable_prefix(reach[:last], repeat[:last]) * self.shape.block_size,
        )


def _stable_prefix(reach: np.ndarray, repeat: np.ndarray) -> int:
    """Leading block positions where at least half of the requests reaching them repeat them."""
    if not len(reach):
        return 0
    ok = repeat * 2 >= reach
    return len(ok) if ok.all() else int(ok.argmin())
