"""Findings: a snapshot of one (tenant, model) priced by replaying its recent prompts through ``bill``.

The model of the tenant's prompts (docs/advisor.md, "The model"): each recent request is a sequence of
content-defined chunks; a chunk is *stable* when it is in at least ``min_share`` of the recent requests
(exact counts over the ring, across message boundaries); a request's *shared prefix* is its leading
chunks whose chained prefix another recent request also has. Problems, one finding each:

- ``reorder``: stable chunks whose neighbours vary between requests (both the stable chunk before and
  the one after differ): the same blocks come in different orders (tools or examples shuffled). Fix:
  a fixed order (sort them).
- ``variable_prefix``: stable chunks after the shared prefix, behind content that varies (a timestamp,
  a name, retrieved passages), not all in the last message. Fix: move the variable part after them.
- ``fixed_tail``: the same, with every such stable chunk in the prompt's last message (rules or a file
  after the user's input). Fix: move them before the variable content.
- ``explicit_would_pay``: no ``cache_control`` today and marking a prefix would cost less (after the
  fixes above).
- ``explicit_loses``: the tenant's markers cost more than implicit caching of the same prompts.
- ``explicit_below_minimum``: markers on prefixes shorter than ``explicit_min_tokens``: no effect.
- ``below_implicit_minimum``: prompts under ``implicit_min_tokens`` whose prefix repeats: nothing to do.

Every saving is ``cache.advisor.replay.replay`` of the prompts as they are minus the replay of the
advised layout (the fixes applied in the order above, each finding the difference it adds), so the
billing rules are applied exactly as the ledger applies them (exclusivity of explicit and implicit
caching, minimum lengths, the hit prices of each layer); a finding is given only when its saving is
at least ``min_saving_pct`` of the input cost, so no advice raises the replayed cost.

Positions are prompt token offsets (from the start of the rendered prompt, as the router counts
them) in the most recent request that has the problem; ``message_tokens`` are the same range from its
message's start.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from cache.advisor.chunking import role_name
from cache.advisor.replay import Prompt, replay
from cache.advisor.sketch import Observed, Snapshot
from cache.billing.pricing import ModelPrices, Rules

Kind = Literal[
    "reorder",
    "variable_prefix",
    "fixed_tail",
    "explicit_would_pay",
    "explicit_loses",
    "explicit_below_minimum",
    "below_implicit_minimum",
]
KINDS: tuple[str, ...] = (
    "reorder",
    "variable_prefix",
    "fixed_tail",
    "explicit_would_pay",
    "explicit_loses",
    "explicit_below_minimum",
    "below_implicit_minimum",
)
DAY_S = 86_400.0
MIN_RATE_WINDOW_S = 60.0  # a rate is never extrapolated from less than a minute


@dataclass(frozen=True, slots=True)
class Where:
    message: int | None  # -1: the tools header; None: the prefix spans several messages
    role: str | None
    tokens: tuple[int, int]  # from the prompt's start
    message_tokens: tuple[int, int] | None = None  # from the message's start
    moves: bool = False  # the span's offset differs between requests (after variable-length content)

    def to_dict(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "role": self.role,
            "tokens": list(self.tokens),
            "message_tokens": list(self.message_tokens) if self.message_tokens else None,
            "moves": self.moves,
        }


@dataclass(frozen=True, slots=True)
class Finding:
    tenant: str
    model: str
    kind: str
    where: Where
    share: float  # requests concerned / observed requests
    requests_per_day: float
    saving_tokens_per_request: float  # token-equivalents at list price
    saving_micros_per_request: float
    currency: str
    advice: str
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def saving_tokens_per_day(self) -> float:
        return self.saving_tokens_per_request * self.requests_per_day

    @property
    def saving_micros_per_day(self) -> float:
        return self.saving_micros_per_request * self.requests_per_day

    def to_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "model": self.model,
            "kind": self.kind,
            "where": self.where.to_dict(),
            "share": round(self.share, 4),
            "requests_per_day": round(self.requests_per_day, 1),
            "saving": {
                "tokens_per_request": round(self.saving_tokens_per_request, 2),
                "micros_per_request": round(self.saving_micros_per_request, 3),
                "tokens_per_day": round(self.saving_tokens_per_day),
                "micros_per_day": round(self.saving_micros_per_day),
                "currency": self.currency,
            },
            "advice": self.advice,
            **({"detail": self.detail} if self.detail else {}),
        }


@dataclass(frozen=True, slots=True)
class Pricing:
    """What findings need beyond the snapshot: the model's rules and prices, and the thresholds."""

    rules: Rules
    prices: ModelPrices
    sample_rate: float
    min_requests: int
    min_saving_pct: float
    min_share: float = 0.1


def requests_per_day(snap: Snapshot, sample_rate: float) -> float:
    """Observed requests scaled by the sampling rate, per day over the snapshot's duration."""
    if snap.requests == 0 or sample_rate <= 0:
        return 0.0
    return snap.requests / sample_rate * DAY_S / max(snap.duration_s, MIN_RATE_WINDOW_S)


def _tok(n: float) -> str:
    return f"{round(n):,}"


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


class _Pricer:
    def __init__(self, snap: Snapshot, p: Pricing):
        self.snap, self.p = snap, p
        self.rpd = requests_per_day(snap, p.sample_rate)
        self.avg_prompt = snap.prompt_tokens / snap.requests if snap.requests else 0.0
        self.threshold = self.avg_prompt * p.min_saving_pct / 100

    def threshold_micros(self, reqs: list[_Req]) -> float:
        """``min_saving_pct`` of the recent requests' input cost at list price, micros per request."""
        if not reqs:
            return 0.0
        avg = sum(q.obs.prompt_tokens for q in reqs) / len(reqs)
        return max(1e-9, avg * self.p.prices.input_micros_per_1m / 1_000_000 * self.p.min_saving_pct / 100)

    def micros(self, token_equiv: float) -> float:
        return token_equiv * self.p.prices.input_micros_per_1m / 1_000_000

    def tokens(self, micros: float) -> float:
        price = self.p.prices.input_micros_per_1m
        return micros * 1_000_000 / price if price else 0.0

    def finding(
        self, kind: str, where: Where, share: float, saving_tokens: float, advice: str, **detail: Any
    ) -> Finding:
        """``saving_tokens``: token-equivalents per observed request."""
        return Finding(
            tenant=self.snap.tenant,
            model=self.snap.model,
            kind=kind,
            where=where,
            share=share,
            requests_per_day=self.rpd,
            saving_tokens_per_request=saving_tokens,
            saving_micros_per_request=self.micros(saving_tokens),
            currency=self.p.prices.currency,
            advice=advice,
            detail=detail,
        )

    def per_day(self, token_equiv: float) -> str:
        return f"{_tok(token_equiv * self.rpd)} tokens/day ({self.micros(token_equiv) * self.rpd / 1e6:,.2f} {self.p.prices.currency}/day)"


# -- the model of the recent prompts ------------------------------------------------------------------

GLUE = (
    0x9E3779B97F4A7C15  # the unit that stands for the junctions of a sorted group: the same in every request
)
VARIES = 0.8  # a stable chunk's neighbour "varies" when its most common value is in under 80 % of cases

Unit = tuple[int, int, int, int, int]  # hash, tokens, message, role code, start token


@dataclass(slots=True)
class _Req:
    obs: Observed
    units: list[Unit]

    def prompt(self, units: list[Unit] | None = None, marked: int | None = None) -> Prompt:
        u = self.units if units is None else units
        o = self.obs
        return Prompt(
            [(x[0], x[1]) for x in u], o.prompt_tokens, o.marked_tokens if marked is None else marked, o.ts
        )


def _requests(snap: Snapshot) -> list[_Req]:
    out = []
    for o in snap.recent:
        units = list(
            zip(
                o.hashes.tolist(),
                (o.ends - o.starts).tolist(),
                o.messages.tolist(),
                o.roles.tolist(),
                o.starts.tolist(),
                strict=True,
            )
        )
        out.append(_Req(o, units))
    return out


def _stable(reqs: list[_Req], min_share: float) -> tuple[set[int], Counter[int]]:
    counts: Counter[int] = Counter()
    for r in reqs:
        counts.update({u[0] for u in r.units})
    floor = max(2.0, min_share * len(reqs))
    return {h for h, c in counts.items() if c >= floor}, counts


def _shared(reqs: list[_Req], min_share: float) -> list[int]:
    """Per request, how many leading units at least ``min_share`` of the recent requests (and two) also
    start with: a prefix shared by chance with a few requests (the same user name) is no shared prefix."""
    chains: list[list[int]] = []
    counts: Counter[int] = Counter()
    for r in reqs:
        h, ch = 0, []
        for u in r.units:
            h = hash((h, u[0]))
            ch.append(h)
        chains.append(ch)
        counts.update(ch)
    floor = max(2.0, min_share * len(reqs))
    out = []
    for ch in chains:
        k = 0
        while k < len(ch) and counts[ch[k]] >= floor:
            k += 1
        out.append(k)
    return out


def _reorder_group(reqs: list[_Req], stable: set[int]) -> set[int]:
    """Stable chunks (once per prompt) whose stable neighbours before and after both vary."""
    pred: dict[int, Counter[int]] = {}
    succ: dict[int, Counter[int]] = {}
    repeated: set[int] = set()
    for r in reqs:
        seq = [u[0] for u in r.units if u[0] in stable]
        c = Counter(seq)
        repeated |= {h for h, n in c.items() if n > 1}
        for i, h in enumerate(seq):
            pred.setdefault(h, Counter())[seq[i - 1] if i else -1] += 1
            succ.setdefault(h, Counter())[seq[i + 1] if i + 1 < len(seq) else -1] += 1

    def varies(c: Counter[int]) -> bool:
        return max(c.values()) < VARIES * sum(c.values())

    # Blocks: chains of stable chunks that always follow each other. A block is in the group when the
    # block before it and the block after it both vary.
    group: set[int] = set()
    for start, before in pred.items():
        if start in repeated or not varies(before):
            continue
        chain, h = [start], start
        while not varies(succ[h]):
            nxt = succ[h].most_common(1)[0][0]
            if nxt == -1 or nxt in repeated or nxt in chain or varies(pred[nxt]):
                break
            chain.append(nxt)
            h = nxt
        if varies(succ[h]):
            group.update(chain)
    return group if len(group) >= 2 else set()


@dataclass(frozen=True, slots=True)
class _SortedGroup:
    """How the advised (sorted) order lays out a reorder group, the same in every request that has it.

    ``head``: the group's chunks in (nearly) every request that has the group, sorted, with their usual
    token lengths. The rest of the group's *region* is glue, fixed too once the order is: junctions
    between two blocks, chunks that depend on which block came before, and whole blocks too short to
    hold a chunk of their own (a 10-token glossary entry has no cut that does not depend on its
    neighbours, so it is in no stable chunk: such blocks at the ends of the shuffled run were billed as
    variable content, and the estimate of a shuffled glossary was 0.45-0.63 of the saving, issue 26).

    A request's region runs from the end of the last *frame* chunk before its first group chunk to the
    first frame chunk after its last group chunk, or the end of that chunk's message if sooner; frame
    chunks are the stable chunks outside the group in (nearly) every request (the instructions around
    the run): a stable chunk of one block that missed the group (in a share of requests only, as its
    start depends on the block before) is no boundary. Its
    length is the same in every request when the region holds the shuffled blocks only (a permutation
    of one set: ``region_tokens``, the median); a request whose region is longer or shorter by more
    than ``tolerance`` has something else there (the user's text, a stamp) and keeps the narrower
    extent: first to last group chunk, with the recurring junctions next to it.
    """

    head: tuple[tuple[int, int], ...]  # (hash, tokens)
    region_tokens: int
    tolerance: int
    frame: frozenset[int]  # stable chunks outside the group in (nearly) every request that has it


def _region(r: _Req, group: set[int], frame: frozenset[int]) -> tuple[int, int, int, int] | None:
    """(first unit, end unit, start token, end token) of the request's group region (``_SortedGroup``);
    ``frame``: the chunks that bound it."""
    units = r.units
    idx = [i for i, u in enumerate(units) if u[0] in group]
    if not idx:
        return None
    a, b = idx[0], idx[-1] + 1
    while a > 0 and units[a - 1][0] not in frame:
        a -= 1
    msg = units[b - 1][2]
    starts = r.obs.message_starts
    end_tok = int(starts[msg + 1]) if msg + 1 < len(starts) else r.obs.prompt_tokens  # msg -1: tools
    while b < len(units) and units[b][0] not in frame and units[b][4] < end_tok:
        b += 1
    if b < len(units) and units[b][0] in frame:
        end_tok = min(end_tok, units[b][4])
    start_tok = units[a][4] if a < len(units) else r.obs.prompt_tokens
    return a, b, start_tok, end_tok


def _group_layout(reqs: list[_Req], group: set[int], stable: set[int], counts: Counter[int]) -> _SortedGroup:
    with_group = [r for r in reqs if any(u[0] in group for u in r.units)]
    always = 0.95 * len(with_group)
    frame = frozenset(h for h in stable if h not in group and counts[h] >= always)
    having = [(r, g) for r in with_group if (g := _region(r, group, frame)) is not None]
    tokens: dict[int, Counter[int]] = {}
    for r, _ in having:
        for u in r.units:
            if u[0] in group and counts[u[0]] >= always:
                tokens.setdefault(u[0], Counter())[u[1]] += 1
    head = tuple(sorted((h, c.most_common(1)[0][0]) for h, c in tokens.items()))
    lengths = sorted(g[3] - g[2] for _, g in having)
    median = lengths[len(lengths) // 2] if lengths else 0
    return _SortedGroup(head, median, max(4, median // 100), frame)


def _sorted_group(
    r: _Req, group: set[int], stable: set[int], counts: Counter[int], layout: _SortedGroup
) -> list[Unit]:
    """The request with its group in the advised order: its region (or extent) becomes the sorted head,
    then one glue unit for the rest of its tokens; a chunk running past the region's end keeps its
    tokens past it (with its own hash: what follows still varies)."""
    region = _region(r, group, layout.frame)
    if region is None:
        return r.units
    a, b, start_tok, end_tok = region
    units = r.units
    rest: list[Unit] = []
    if abs((end_tok - start_tok) - layout.region_tokens) <= layout.tolerance:
        last = units[b - 1]
        if last[4] + last[1] > end_tok:  # the chunk straddling the region's end
            if counts[last[0]] >= 2:  # a junction (the last block and a fixed start): fixed too
                end_tok = last[4] + last[1]
            else:  # what follows varies: its tokens past the region keep their own hash
                rest = [(last[0], last[4] + last[1] - end_tok, last[2], last[3], end_tok)]
        total = end_tok - start_tok
    else:
        idx = [i for i, u in enumerate(units) if u[0] in group]
        a, b = idx[0], idx[-1] + 1
        while a > 0 and units[a - 1][0] not in stable and counts[units[a - 1][0]] >= 2:
            a -= 1
        while b < len(units) and units[b][0] not in stable and counts[units[b][0]] >= 2:
            b += 1
        total = sum(u[1] for u in units[a:b])
    first = units[a]
    head: list[Unit] = []
    used = 0
    for h, t in layout.head:
        t = min(t, total - used)
        if t <= 0:
            break
        head.append((h, t, first[2], first[3], first[4]))
        used += t
    return [*units[:a], *head, (GLUE, total - used, first[2], first[3], first[4]), *rest, *units[b:]]


def _cost(reqs: list[_Req], layouts: list[list[Unit]], pr: _Pricer, marked: int | None = None) -> float:
    rules, prices, bs = pr.p.rules, pr.p.prices, pr.snap.block_size
    prompts = [
        r.prompt(u, None if marked is None else (marked if r.obs.prompt_tokens >= marked else 0))
        for r, u in zip(reqs, layouts, strict=True)
    ]
    return replay(prompts, rules, prices, bs).per_request()


def price(snap: Snapshot, p: Pricing) -> list[Finding]:
    """The findings of one snapshot, largest saving first. None below ``min_requests``."""
    if snap.requests < p.min_requests or not snap.recent:
        return []
    pr = _Pricer(snap, p)
    min_share = p.min_share
    reqs = _requests(snap)
    stable, counts = _stable(reqs, min_share)
    threshold = pr.threshold_micros(reqs)
    out: list[Finding] = []
    layouts = [r.units for r in reqs]
    base = _cost(reqs, layouts, pr)
    # 1. Blocks whose order varies.
    group = _reorder_group(reqs, stable)
    if group:
        layout = _group_layout(reqs, group, stable, counts)
        fixed = [_sorted_group(r, group, stable, counts, layout) for r in reqs]
        cost = _cost(reqs, fixed, pr)
        if base - cost >= threshold:
            out.append(_reorder_finding(pr, reqs, group, base - cost))
            layouts, base = fixed, cost
    # 2. Stable content behind variable content: one problem per (message, role) of the variable part.
    fixes, found = _misplaced(reqs, layouts, stable, group, min_share)
    for key, (share, where, detail, last_only) in sorted(found.items()):
        fixed = [fixes[key].get(i, u) for i, u in enumerate(layouts)]
        cost = _cost(reqs, fixed, pr)
        if base - cost >= threshold:
            out.append(
                _span_finding(
                    pr, "fixed_tail" if last_only else "variable_prefix", where, share, base - cost, detail
                )
            )
            layouts, base = fixed, cost
    # 3. Explicit caching, on the layout with the fixes above.
    out += _explicit_findings(pr, reqs, layouts, base, threshold)
    short = _short_finding(pr)
    if short is not None:
        out.append(short)
    out.sort(key=lambda f: (-f.saving_micros_per_request, -f.saving_tokens_per_request))
    return out


def _misplaced(
    reqs: list[_Req], layouts: list[list[Unit]], stable: set[int], group: set[int], min_share: float
) -> tuple[
    dict[tuple[int, int], dict[int, list[Unit]]],
    dict[tuple[int, int], tuple[float, Where, dict[str, Any], bool]],
]:
    shared = _shared([_Req(r.obs, u) for r, u in zip(reqs, layouts, strict=True)], min_share)
    fixes: dict[tuple[int, int], dict[int, list[Unit]]] = {}
    seen: dict[tuple[int, int], list[int]] = {}
    latest: dict[tuple[int, int], tuple[int, int, int, int, int, int, int]] = {}
    last_only: dict[tuple[int, int], bool] = {}
    starts: dict[tuple[int, int], list[int]] = {}
    for i, (r, units) in enumerate(zip(reqs, layouts, strict=True)):
        k = shared[i]
        moved = [u for u in units[k:] if u[0] in stable and u[0] not in group and u[0] != GLUE]
        if not moved or k >= len(units):
            continue
        var = units[k]
        key = (var[2], var[3])
        rest = [u for u in units[k:] if not (u[0] in stable and u[0] not in group and u[0] != GLUE)]
        fixes.setdefault(key, {})[i] = [*units[:k], *moved, *rest]
        seen.setdefault(key, []).append(i)
        n_msgs = int(r.obs.messages.max()) if len(r.obs.messages) else 0
        last_only[key] = last_only.get(key, True) and all(u[2] == n_msgs for u in moved)
        ms = r.obs.message_starts
        m = moved[0][2]
        m_start = int(ms[m]) if 0 <= m < len(ms) else 0
        end = moved[-1][4] + moved[-1][1]
        latest[key] = (var[4], moved[0][4], end, m, moved[0][3], m_start, r.obs.prompt_tokens - end)
        starts.setdefault(key, []).append(moved[0][4])
    found = {}
    n = len(reqs)
    for key, idx in seen.items():
        var_start, a, b, m, role, m_start, tail = latest[key]
        moves = min(starts[key]) != max(starts[key])
        where = Where(m, role_name(role), (a, b), (a - m_start, b - m_start), moves)
        detail = {
            "variable_tokens": [var_start, a],
            "variable_message": key[0],
            "starts": [min(starts[key]), max(starts[key])],
            "tail_tokens": tail,
        }
        found[key] = (len(idx) / n, where, detail, last_only[key])
    return fixes, found


def _msg(m: int, role: str) -> str:
    return "the tools header" if m < 0 else f"message {m}, {role}"


def _reorder_finding(pr: _Pricer, reqs: list[_Req], group: set[int], saving_micros: float) -> Finding:
    having = [r for r in reqs if any(u[0] in group for u in r.units)]
    r = having[-1]
    g = [u for u in r.units if u[0] in group]
    a, b = min(u[4] for u in g), max(u[4] + u[1] for u in g)
    msgs = {u[2] for u in g}
    m = g[0][2] if len(msgs) == 1 else None
    role = role_name(g[0][3]) if len(msgs) == 1 else None
    ms = r.obs.message_starts
    m_start = int(ms[m]) if m is not None and 0 <= m < len(ms) else 0
    where = Where(m, role, (a, b), (a - m_start, b - m_start) if m is not None else None, True)
    tokens = pr.tokens(saving_micros)
    place = _msg(m, role or "") if m is not None else "several messages"
    return pr.finding(
        "reorder",
        where,
        len(having) / len(reqs),
        tokens,
        f"tokens {_tok(a)}–{_tok(b)} ({place}) hold the same blocks in a different order from request to "
        f"request ({len(group)} repeated chunks whose neighbours change); sending them in one fixed order "
        f"(e.g. tools sorted by name) would save {pr.per_day(tokens)}",
        chunks=len(group),
    )


def _span_finding(
    pr: _Pricer, kind: str, where: Where, share: float, saving_micros: float, detail: dict[str, Any]
) -> Finding:
    tokens = pr.tokens(saving_micros)
    a, b = where.tokens
    va, vb = detail["variable_tokens"]
    place = _msg(where.message or 0, where.role or "")
    rng = f"tokens {_tok(a)}–{_tok(b)} ({place})"
    if kind == "fixed_tail":
        text = (
            f"{rng} repeat in many requests but come last, after content that varies (tokens "
            f"{_tok(va)}–{_tok(vb)}); moving them before the variable content (e.g. into the system "
            f"message) would save {pr.per_day(tokens)}"
        )
    else:
        text = (
            f"tokens {_tok(va)}–{_tok(vb)} (message {detail['variable_message']}) vary and come before "
            f"{rng}, which repeat; moving the variable part after them would save {pr.per_day(tokens)}"
        )
    return pr.finding(kind, where, share, tokens, text, **detail)


def _explicit_findings(
    pr: _Pricer, reqs: list[_Req], layouts: list[list[Unit]], base: float, threshold: float
) -> list[Finding]:
    snap, r = pr.snap, pr.p.rules
    m = snap.marked
    out: list[Finding] = []
    if m.below_requests and m.below_requests >= snap.requests * 0.01:
        out.append(
            pr.finding(
                "explicit_below_minimum",
                Where(None, None, (0, round(m.below_tokens / m.below_requests))),
                m.below_requests / snap.requests,
                0.0,
                f"{_pct(m.below_requests / snap.requests)} of requests mark a prefix of about "
                f"{_tok(m.below_tokens / m.below_requests)} tokens, below the {_tok(r.explicit_min_tokens)}-token "
                "minimum: the markers have no effect (billed as implicit caching)",
            )
        )
    if any(q.obs.marked_tokens for q in reqs):
        unmarked = _cost(reqs, layouts, pr, marked=0)
        loss = base - unmarked
        if loss >= threshold:
            marked = [q.obs.marked_tokens for q in reqs if q.obs.marked_tokens >= r.explicit_min_tokens]
            reason = "used_once" if m.new_tokens >= m.stale_tokens else "reused_after_ttl"
            why = (
                "most marked prefixes are used once (created, never read)"
                if reason == "used_once"
                else f"marked prefixes come back only after the {r.explicit_ttl_s:.0f} s TTL (created again)"
            )
            tokens = pr.tokens(loss)
            out.append(
                pr.finding(
                    "explicit_loses",
                    Where(None, None, (0, round(sum(marked) / len(marked)) if marked else 0)),
                    m.requests / snap.requests if snap.requests else 0.0,
                    tokens,
                    f"cache_control costs more than it saves: {why}; created at {r.explicit_create_pct} %, "
                    f"read at {r.explicit_hit_pct} % against {r.implicit_cached_pct} % for implicit caching "
                    f"(a marked request gets no implicit discount); removing the markers would save "
                    f"{pr.per_day(tokens)}",
                    reason=reason,
                    read_share=round(m.hit_tokens / max(1, m.hit_tokens + m.new_tokens + m.stale_tokens), 4),
                )
            )
        return out
    best: tuple[float, int] | None = None
    for length in _candidates(reqs, layouts, r.explicit_min_tokens):
        gain = base - _cost(reqs, layouts, pr, marked=length)
        if best is None or gain > best[0]:
            best = (gain, length)
    if best is not None and best[0] >= threshold:
        gain, length = best
        tokens = pr.tokens(gain)
        last = layouts[-1]
        end_unit = next((u for u in last if u[4] + u[1] >= length), last[-1])
        reach = sum(1 for q in reqs if q.obs.prompt_tokens >= length) / len(reqs)
        out.append(
            pr.finding(
                "explicit_would_pay",
                Where(end_unit[2], role_name(end_unit[3]), (0, length)),
                reach,
                tokens,
                f"the first {_tok(length)} tokens (through message {end_unit[2]}) repeat within "
                f"{r.explicit_ttl_s:.0f} s; marking them with cache_control (read at {r.explicit_hit_pct} % "
                f"instead of {r.implicit_cached_pct} %, created at {r.explicit_create_pct} %, and the rest of "
                f"a marked request billed in full) would save {pr.per_day(tokens)}",
            )
        )
    return out


def _candidates(reqs: list[_Req], layouts: list[list[Unit]], min_tokens: int) -> list[int]:
    """Marked-prefix lengths to try: the ends of messages and unit boundaries of the prefix that at
    least half of the recent requests share, from ``min_tokens`` up (at most 6 of them: each is a
    replay of the ring)."""
    counts: Counter[int] = Counter()
    ends: dict[int, int] = {}
    for units in layouts:
        h, tok = 0, 0
        for u in units:
            h = hash((h, u[0]))
            tok += u[1]
            counts[h] += 1
            ends.setdefault(h, tok)
    half = len(layouts) / 2
    units = layouts[-1]
    h, bounds = 0, []
    for u in units:
        h = hash((h, u[0]))
        if counts[h] < half:
            break
        if ends[h] >= min_tokens:
            bounds.append(ends[h])
    if not bounds:
        return []
    step = max(1, len(bounds) // 6)
    return sorted({*bounds[::step], bounds[-1]})


def _short_finding(pr: _Pricer) -> Finding | None:
    snap, r = pr.snap, pr.p.rules
    if not snap.short_repeat_tokens or snap.short_requests < snap.requests * pr.p.min_saving_pct / 100:
        return None
    forgone = snap.short_repeat_tokens * (100 - r.implicit_cached_pct) / 100 / snap.requests
    if forgone < pr.threshold:
        return None
    avg_cached = snap.short_repeat_tokens / snap.short_requests
    return pr.finding(
        "below_implicit_minimum",
        Where(None, None, (0, round(avg_cached))),
        snap.short_requests / snap.requests,
        0.0,
        f"{_pct(snap.short_requests / snap.requests)} of requests are shorter than "
        f"{_tok(r.implicit_min_tokens)} tokens: their repeated prefix (about {_tok(avg_cached)} tokens) is "
        f"served from the replica's cache but never billed at {r.implicit_cached_pct} % (it would be "
        f"{pr.per_day(forgone)}); nothing to reorder",
        forgone_tokens_per_request=round(forgone, 2),
        forgone_micros_per_day=round(pr.micros(forgone) * pr.rpd),
    )
