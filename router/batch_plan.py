"""Offline batches in shared-prefix order: which replica runs each line, in what order, after which line.

Pure, no I/O. Each line is rendered, tokenized and hashed exactly as the online router does
(``router.prompt``, ``router.tokenizers``, ``router.blocks``), so a plan and the prefix index agree on
what a shared prefix is. Why each choice (numbers from ``python -m bench.batch_workload --plan``, the
issue's 5,000-line batch of 50 templates on 4 replicas):

- **Order: a trie over block hashes, walked depth first.** Sorting the lines by their packed chained
  hashes (8 bytes a block) *is* that walk: lines sharing k blocks share the first 8k bytes of their key,
  so every shared prefix is one contiguous run, nested runs inside it, and the line just before a line
  shares the longest prefix with it of all earlier lines (its longest common prefix, LCP, is found by a
  binary search on one word: chained hashes are equal up to a depth exactly when the words there are).
  The sort is C ``memcmp`` over keys of at most ``max_prefix_tokens / block_size`` words and keeps no
  node objects: 2 KiB a line at the defaults, where a node-per-block trie of a 50,000-line batch of
  unique 4k-token prompts would hold 12.8 M Python objects.
- **In slices, as columns.** A 50,000-line plan is about half a second of CPU. ``plan_steps`` yields
  after each sorted run of ``SORT_RUN`` lines (the runs are merged) and every ``PLAN_STEP`` lines of
  the other passes, so the gateway plans on its event loop between other tasks
  (``gateway.batch.pace``); a plan's lines are columns (``Prefixes``, ``Range``: a few arrays whatever
  the batch's size). Before, one ``sorted`` of every key was one C call of 200 ms, and one object per
  line for each of the plan's stages made every old-generation collection walk 150,000-200,000 objects
  with the GIL held: the planner ran in a thread, yet ``/health`` waited 300-770 ms
  (``python -m bench.batch_memory``).
- **Work** of a line is its prefill in that order (its tokens minus what it shares with the line before
  it) plus its expected output tokens: what the replica that runs it spends on it.
- **Ranges, not bins.** The order is cut into one contiguous range per replica of equal work (by
  weight). A cut inside a group costs one more prefill of that group's shared prefix on the next
  replica, so each cut may move by up to ``tolerance`` of a replica's share to the place that shares
  the fewest blocks with its neighbour: between groups when one is near, inside a preamble family
  rather than inside a template. At most n-1 groups are split; every other group runs whole on one
  replica and each shared prefix is prefilled once per replica that runs it. Bin packing of whole groups
  (LPT) leaves up to one group's work of imbalance and must split groups larger than a share anyway;
  arrival order (LiteLLM, AIBrix) spreads each group over every replica; llm-d sorts by an exact hash
  of the system prompt, so prompts that share only a preamble are not neighbours.
- **Waits.** Engines look a prefix up when they admit a request and cache it once its prefill is done
  (vLLM's automatic prefix caching; ``sim/``): the first C lines of a group sent at once would all
  prefill its prefix. A line therefore waits for the line of its range that first prefills its deepest
  shared block (the previous line with a shorter common prefix: a monotonic stack, O(n)) when that brings
  it at least ``warm_tokens``. The runner pipelines the wait behind the previous group's tail.
- **An online reserve** (``reserved_for_online``): ``batch.online_replicas`` replicas of the pool take no
  batch line, and online requests prefer them while a batch runs (``router.filters.online_reserve``).
  A replica running its share carries the batch into every step of every online request it serves: its
  decodes in each step, a group's cold template prefilled in one step, and its churn through the LRU,
  which evicts the online prompts' idle blocks within seconds. No share or backoff removes those; a
  replica the batch never touches does (``python -m bench.batch``, one run: the online hit rate is 0.908
  alone, 0.585 beside the batch at share 0.5, 0.701 at share 0.25, 0.899 with one online replica; online
  p99 TTFT 115 ms alone, 310 / 171 / 153 ms, and 116 ms with two online replicas at share 1.0, whose
  makespan, 0.56 of arrival order, still meets the issue's 0.6). Rendezvous hashing picks them, so
  every process and pod picks the same ones without sharing state, and a replica that leaves moves only
  its own place.
"""

from __future__ import annotations

import bisect
import heapq
from array import array
from collections.abc import Generator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard, overload

from xxhash import xxh3_64_intdigest

from config.routing import RoutingConfig
from router.blocks import block_hashes, root_hash
from router.prompt import prompt_pieces
from router.tokenizers import Tokenizer, tokenize

_WORD = 8  # bytes of one packed block hash
SORT_RUN = 2048
"""Lines sorted by one C call; the runs are merged (``plan_steps`` yields between two runs)."""
PLAN_STEP = 1024
"""Lines of the plan's other passes between two yields of ``plan_steps`` (about 1-2 ms)."""
assert array("Q").itemsize == _WORD


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """One line as the planner sees it. ``key`` is the caller's id for it (its line number)."""

    key: int
    hashes: bytes  # chained block hashes, packed 8 bytes each
    prompt_tokens: int
    output_tokens: int


@dataclass(slots=True)
class Prefixes:
    """Many ``LinePrefix`` as columns (``append`` one, read one back by index): what a caller that plans
    a large batch keeps, four objects whatever its size. One object per line is one more for every
    old-generation collection to walk with the GIL held (``gateway.batch.validate.LineIndex``)."""

    keys: array[int] = field(default_factory=lambda: array("q"))
    hashes: list[bytes] = field(default_factory=list)
    prompt_tokens: array[int] = field(default_factory=lambda: array("q"))
    output_tokens: array[int] = field(default_factory=lambda: array("q"))

    @classmethod
    def of(cls, lines: Iterable[LinePrefix]) -> Prefixes:
        out = cls()
        for line in lines:
            out.append(line)
        return out

    def append(self, line: LinePrefix) -> None:
        self.keys.append(line.key)
        self.hashes.append(line.hashes)
        self.prompt_tokens.append(line.prompt_tokens)
        self.output_tokens.append(line.output_tokens)

    def __len__(self) -> int:
        return len(self.keys)

    def __getitem__(self, i: int) -> LinePrefix:
        return LinePrefix(self.keys[i], self.hashes[i], self.prompt_tokens[i], self.output_tokens[i])


@dataclass(frozen=True, slots=True)
class PlannedLine:
    key: int
    replica: str | None
    after: int | None  # key of the line this one waits for (same replica, earlier), or None
    cached_tokens: int  # prompt tokens it shares with the line before it on its replica
    work: int  # uncached prompt tokens + expected output tokens


@dataclass(slots=True)
class Range:
    """One replica's lines in order, as columns (``after`` -1: waits for none); each read back as a
    ``PlannedLine``. Like ``Prefixes``: four arrays whatever the number of lines."""

    replica: str | None
    keys: array[int] = field(default_factory=lambda: array("q"))
    after: array[int] = field(default_factory=lambda: array("q"))
    cached_tokens: array[int] = field(default_factory=lambda: array("q"))
    work: array[int] = field(default_factory=lambda: array("q"))

    def __len__(self) -> int:
        return len(self.keys)

    @overload
    def __getitem__(self, i: int) -> PlannedLine: ...

    @overload
    def __getitem__(self, i: slice) -> list[PlannedLine]: ...

    def __getitem__(self, i: int | slice) -> PlannedLine | list[PlannedLine]:
        if isinstance(i, slice):
            return [self[j] for j in range(len(self))[i]]
        after = self.after[i]
        return PlannedLine(
            self.keys[i], self.replica, None if after < 0 else after, self.cached_tokens[i], self.work[i]
        )

    def __iter__(self) -> Iterator[PlannedLine]:
        return (self[i] for i in range(len(self)))


@dataclass(frozen=True, slots=True)
class Plan:
    ranges: dict[str | None, Range]  # per replica (None: no replica known), in order
    prompt_tokens: int
    oracle_cached_tokens: int  # one infinite cache over the whole batch, in trie order

    @property
    def cached_tokens(self) -> int:
        """What the plan can hit when each replica keeps the prefix of the group it works on."""
        return sum(sum(r.cached_tokens) for r in self.ranges.values())

    def work(self, replica: str | None) -> int:
        r = self.ranges.get(replica)
        return sum(r.work) if r is not None else 0

    def __len__(self) -> int:
        return sum(len(r) for r in self.ranges.values())


def expected_output_tokens(endpoint: str, body: Mapping[str, Any], default: int) -> int:
    """Output tokens a line asks for (``max_completion_tokens``/``max_tokens`` × ``n``); embeddings: 0."""
    if endpoint == "embeddings":
        return 0
    limit = body.get("max_completion_tokens") if endpoint == "chat" else None
    if not _positive_int(limit):
        limit = body.get("max_tokens")
    n = body.get("n")
    return (limit if _positive_int(limit) else default) * (n if _positive_int(n) else 1)


def _positive_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def line_prefix(
    key: int,
    endpoint: str,
    body: Mapping[str, Any],
    model: str,
    tokenizer: Tokenizer,
    cfg: RoutingConfig,
    *,
    default_output_tokens: int = 256,
    salt: str = "",
) -> LinePrefix:
    """Render, tokenize and hash one line as the pool's router would (the salt cannot change a batch's
    grouping: a batch belongs to one tenant)."""
    tokens = tokenize(tokenizer, prompt_pieces(endpoint, body), cfg.max_prefix_tokens)
    hashes = block_hashes(tokens, root_hash(model, salt), cfg.block_size, cfg.max_prefix_tokens)
    return LinePrefix(
        key,
        array("Q", hashes).tobytes(),
        tokens.count,
        expected_output_tokens(endpoint, body, default_output_tokens),
    )


def _common_blocks(a: bytes, b: bytes) -> int:
    """Leading blocks two chained-hash keys share: binary search on the equality of one word."""
    lo, hi = 0, min(len(a), len(b)) // _WORD
    while lo < hi:
        mid = (lo + hi + 1) // 2
        end = mid * _WORD
        if a[end - _WORD : end] == b[end - _WORD : end]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def reserved_for_online(replicas: Sequence[str], n: int, pool: str) -> frozenset[str]:
    """The ``n`` replicas kept for online traffic while a batch runs on ``pool``: the highest rendezvous
    scores of (pool, replica id), at most all but one (a batch always has a replica to run on)."""
    n = min(n, len(replicas) - 1)
    if n <= 0:
        return frozenset()
    head = pool.encode() + b"\0"
    ranked = sorted(replicas, key=lambda r: (xxh3_64_intdigest(head + r.encode()), r))
    return frozenset(ranked[-n:])


def plan(
    lines: Sequence[LinePrefix] | Prefixes,
    replicas: Sequence[str],
    *,
    block_size: int,
    warm_tokens: int = 256,
    tolerance: float = 0.1,
    weights: Mapping[str, float] | None = None,
) -> Plan:
    """Order ``lines`` by shared prefix and cut the order into one range per replica (see the module)."""
    steps = plan_steps(
        lines, replicas, block_size=block_size, warm_tokens=warm_tokens, tolerance=tolerance, weights=weights
    )
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def plan_steps(
    lines: Sequence[LinePrefix] | Prefixes,
    replicas: Sequence[str],
    *,
    block_size: int,
    warm_tokens: int = 256,
    tolerance: float = 0.1,
    weights: Mapping[str, float] | None = None,
) -> Generator[None, None, Plan]:
    """``plan`` as a generator that yields after every ``PLAN_STEP`` lines of work (or one sorted run,
    or one budget tried) and returns the plan: a caller on an event loop runs other tasks between two
    steps (``gateway.batch.pace.drive``); the plan is the same."""
    cols = lines if isinstance(lines, Prefixes) else Prefixes.of(lines)
    n = len(cols)
    runs: list[list[tuple[bytes, int, int]]] = []
    for i in range(0, n, SORT_RUN):
        j = min(n, i + SORT_RUN)
        runs.append(sorted(zip(cols.hashes[i:j], cols.keys[i:j], range(i, j), strict=True)))
        yield
    merged = heapq.merge(*runs) if len(runs) > 1 else iter(runs[0] if runs else ())
    hashes: list[bytes] = []
    keys: list[int] = []  # lists of ints and of bytes: nothing for the collector to walk
    prompt: list[int] = []
    output: list[int] = []
    lcp: list[int] = []
    shared: list[int] = []
    work: list[int] = []
    for j, (h, k, i) in enumerate(merged):
        c = _common_blocks(hashes[-1], h) if hashes else 0
        p, o = cols.prompt_tokens[i], cols.output_tokens[i]
        s = min(c * block_size, p)
        hashes.append(h)
        keys.append(k)
        prompt.append(p)
        output.append(o)
        lcp.append(c)
        shared.append(s)
        work.append(p - s + o)
        if j % PLAN_STEP == PLAN_STEP - 1:
            yield
    yield
    del runs, merged
    yield
    names: list[str | None] = list(replicas) or [None]
    w = weights or {}
    cuts = yield from _cuts(
        work, lcp, block_size, [1.0 if r is None else w.get(r, 1.0) for r in names], tolerance
    )
    ranges: dict[str | None, Range] = {}
    for name, a, b in zip(names, cuts, cuts[1:], strict=False):
        ranges[name] = yield from _range(
            keys[a:b], prompt[a:b], output[a:b], [0, *lcp[a + 1 : b]][: b - a], name, block_size, warm_tokens
        )
    return Plan(ranges=ranges, prompt_tokens=sum(prompt), oracle_cached_tokens=sum(shared))


def _cuts(
    work: Sequence[int], lcp: Sequence[int], block_size: int, weights: Sequence[float], tolerance: float
) -> Generator[None, None, list[int]]:
    """Start positions of each replica's range, plus the end. A range's cost is its lines' work plus the
    prefill of the prefix its first line shares with the line before the cut; the smallest budget (per
    unit of weight) with which a greedy left-to-right fill places every line is found by binary search."""
    n = len(work)
    cum = [0]
    for i, w in enumerate(work):
        cum.append(cum[-1] + w)
        if i % PLAN_STEP == PLAN_STEP - 1:
            yield

    def extra(s: int) -> int:  # what a range starting at s prefills again
        return lcp[s] * block_size if 0 < s < n else 0

    def fill(budget: int) -> list[int] | None:
        cuts = [0]
        for r, weight in enumerate(weights):
            s = cuts[-1]
            if r == len(weights) - 1:
                return [*cuts, n] if cum[n] - cum[s] + extra(s) <= budget * weight else None
            base, cap = cum[s] - extra(s), budget * weight
            end = bisect.bisect_right(cum, base + cap) - 1  # the furthest end within the budget
            if end <= s < n:
                return None  # one line is more than the budget
            end = min(end, n)
            # Move the cut back (by up to tolerance of the budget) to where it splits the least prefix.
            lo = max(s + 1, bisect.bisect_left(cum, base + cap * (1 - tolerance)))
            cuts.append(min(range(lo, end + 1), key=lambda q: (extra(q), -q)) if lo <= end else end)
        return cuts

    lo, hi = int(cum[n] / sum(weights)), int(cum[n] / min(weights)) + 1
    yield
    best = fill(hi)  # everything in the first range fits this budget
    while lo < hi:
        yield
        mid = (lo + hi) // 2
        got = fill(mid)
        if got is None:
            lo = mid + 1
        else:
            best, hi = got, mid
    assert best is not None
    return best


def _range(
    keys: Sequence[int],
    prompt: Sequence[int],
    output: Sequence[int],
    lcp: Sequence[int],
    replica: str | None,
    block_size: int,
    warm_tokens: int,
) -> Generator[None, None, Range]:
    """One replica's lines in order, ``lcp`` their shared blocks with the line before (0 for the first):
    what each can hit, and the line it waits for (the previous one with a shorter LCP, when that line
    brings it at least ``warm_tokens``)."""
    out = Range(replica)
    stack: list[int] = []  # positions of strictly increasing LCP: the previous-shorter-LCP candidates
    for j, (k, p, o, c) in enumerate(zip(keys, prompt, output, lcp, strict=True)):
        while stack and lcp[stack[-1]] >= c:
            stack.pop()
        after = -1
        if c and stack and warm_tokens and (c - lcp[stack[-1]]) * block_size >= warm_tokens:
            after = keys[stack[-1]]
        stack.append(j)
        cached = min(c * block_size, p)
        out.keys.append(k)
        out.after.append(after)
        out.cached_tokens.append(cached)
        out.work.append(p - cached + o)
        if j % PLAN_STEP == PLAN_STEP - 1:
            yield
    return out
