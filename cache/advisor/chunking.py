"""Content-defined chunks of a rendered prompt, and where each chunk sits (message, role, tokens).

A chunk boundary is chosen by the content just before it, not by its offset: a rolling hash over the
last ``WINDOW`` bytes (a Gear-style table of random 64-bit values, one per byte value, summed over the
window) cuts where the hash falls below a threshold, at least ``avg/4`` and at most ``8 * avg`` bytes
after the previous cut (FastCDC's cut-point skipping and its hard maximum). Repeated text therefore
yields the same chunks wherever it sits, also after variable-length content: two prompts that differ
before a span fall back into step at the span's first cut, one chunk in on average.

Why this shape (measured once while choosing it, on this 2-core machine, a 5,000-byte prompt; the
whole observation's cost is ``python -m bench.advisor --micro``):
- the hash is a windowed *sum* of table values rather than Gear's shift-and-add, because the sum is a
  prefix-sum difference that numpy computes for the whole prompt in a few calls: about 50 µs against
  about 1,000 µs for a Gear loop in Python;
- a threshold on the whole 64-bit value instead of a bit mask, so that any average size can be asked;
- small chunks (64 bytes, 16 tokens by default) because a finding's token range is only as precise as
  a chunk; pyfastcdc (Cython) is faster but cannot cut below 256-byte averages.

Message layout comes from the renderer's separators (``router.prompt``): each message starts with
``\\x1e<role>\\x1f`` and a tools header (``\\x02tools\\x1f``) comes first; roles are mapped onto a fixed
vocabulary, so a client-chosen role string is never kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import xxhash

WINDOW = 16
"""Bytes the rolling hash looks back over: a cut depends on these bytes only."""

ROLES: tuple[str, ...] = (
    "tools",
    "system",
    "developer",
    "user",
    "assistant",
    "tool",
    "function",
    "other",
    "prompt",
)
_ROLE_CODE = {r.encode(): i for i, r in enumerate(ROLES)}
_OTHER = ROLES.index("other")
PROMPT_ROLE = ROLES.index("prompt")
TOOLS_ROLE = ROLES.index("tools")
_MSG = 0x1E
_ROLE_END = 0x1F
_MAX_ROLE_BYTES = 32

# One random 64-bit value per byte value, fixed so that chunking is the same in every process.
_GEAR = np.array([xxhash.xxh3_64_intdigest(b"gear", seed=i) for i in range(256)], dtype=np.uint64)


@dataclass(frozen=True, slots=True)
class Chunker:
    """Cuts byte strings into content-defined chunks of about ``avg`` bytes."""

    avg: int = 64
    min_size: int = field(init=False)
    max_size: int = field(init=False)
    _threshold: np.uint64 = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if self.avg < WINDOW:
            raise ValueError(f"average chunk must be at least {WINDOW} bytes")
        min_size = max(WINDOW, self.avg // 4)
        object.__setattr__(self, "min_size", min_size)
        object.__setattr__(self, "max_size", self.avg * 8)
        # Past the minimum, a cut is due at each byte with probability 1 / (avg - min): mean gap = avg.
        object.__setattr__(self, "_threshold", np.uint64((1 << 64) // max(1, self.avg - min_size)))

    def cuts(self, data: bytes) -> list[int]:
        """End offsets of the chunks of ``data`` (the last one is ``len(data)``; none for empty data)."""
        n = len(data)
        if n == 0:
            return []
        if n <= self.min_size:
            return [n]
        table = _GEAR[np.frombuffer(data, dtype=np.uint8)]
        sums = np.cumsum(table, dtype=np.uint64)
        # rolling[i] = sum of table values of bytes i+1 .. i+WINDOW: a cut may follow byte i+WINDOW.
        rolling = sums[WINDOW:] - sums[:-WINDOW]
        candidates = (np.flatnonzero(rolling < self._threshold) + (WINDOW + 1)).tolist()
        out: list[int] = []
        last, lo, hi = 0, self.min_size, self.max_size
        for c in candidates:
            if c - last < lo:
                continue
            while c - last > hi:
                last += hi
                out.append(last)
            if c - last >= lo:
                out.append(c)
                last = c
        while n - last > hi:
            last += hi
            out.append(last)
        if last < n:
            out.append(n)
        return out


@dataclass(frozen=True, slots=True)
class Layout:
    """Message starts (byte offsets) of a rendered chat prompt and each message's role code."""

    starts: np.ndarray
    roles: tuple[int, ...]

    def message_of(self, offsets: list[int]) -> list[int]:
        """Message index of each byte offset (-1: the tools header before the first message)."""
        if not len(self.starts):
            return [0] * len(offsets)
        return (np.searchsorted(self.starts, offsets, side="right") - 1).tolist()


NO_LAYOUT = Layout(np.zeros(0, dtype=np.intp), ())


def chat_layout(data: bytes) -> Layout:
    """Where each message of a ``router.prompt.render_chat`` rendering starts, and its role."""
    starts = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _MSG)
    roles = []
    for s in starts.tolist():
        end = data.find(b"\x1f", s + 1, s + 2 + _MAX_ROLE_BYTES)
        roles.append(_ROLE_CODE.get(data[s + 1 : end], _OTHER) if end > 0 else _OTHER)
    return Layout(starts, tuple(roles))


def role_name(code: int) -> str:
    return ROLES[code] if 0 <= code < len(ROLES) else "other"
