"""Content-defined chunking: a repeated span is cut the same wherever it sits; message layout."""

from __future__ import annotations

import random

import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from cache.advisor.chunking import Chunker, chat_layout, role_name
from router.prompt import render_chat


def _text(rng: random.Random, n: int) -> bytes:
    words = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9)))
        for _ in range(500)
    ]
    out = " ".join(rng.choice(words) for _ in range(n // 3))
    return out.encode()[:n]


def _chunks(ch: Chunker, data: bytes) -> list[bytes]:
    ends = ch.cuts(data)
    starts = [0, *ends[:-1]]
    return [data[s:e] for s, e in zip(starts, ends, strict=True)]


def test_cuts_cover_the_data_within_min_and_max() -> None:
    ch = Chunker(64)
    data = _text(random.Random(1), 20_000)
    ends = ch.cuts(data)
    assert ends[-1] == len(data)
    sizes = [b - a for a, b in zip([0, *ends[:-1]], ends, strict=True)]
    assert all(s <= ch.max_size for s in sizes)
    assert all(s >= ch.min_size for s in sizes[:-1])
    assert 40 <= len(data) / len(ends) <= 100  # about the asked average
    assert ch.cuts(b"") == [] and ch.cuts(b"short") == [5]


def test_a_repeated_span_gives_the_same_chunks_at_different_offsets() -> None:
    rng = random.Random(2)
    ch = Chunker(64)
    span = _text(rng, 4000)
    inner = set(_chunks(ch, span)[2:-1])
    for prefix_len in (0, 1, 7, 123, 999, 3001):
        data = _text(rng, prefix_len) + span + _text(rng, 200)
        found = set(_chunks(ch, data))
        assert len(inner & found) >= 0.9 * len(inner), prefix_len


def test_a_long_run_without_cuts_is_cut_at_the_maximum() -> None:
    ch = Chunker(64)
    ends = ch.cuts(b"a" * 5000)  # one byte value: the rolling hash never changes
    assert all(b - a <= ch.max_size for a, b in zip([0, *ends[:-1]], ends, strict=True))
    assert ends[-1] == 5000


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    before=st.integers(0, 2000),
    after=st.integers(0, 500),
    avg=st.sampled_from([32, 64, 128]),
)
def test_property_shifted_span_shares_its_inner_chunks(seed: int, before: int, after: int, avg: int) -> None:
    rng = random.Random(seed)
    ch = Chunker(avg)
    span = _text(rng, 3000)
    alone = [xxhash.xxh3_64_intdigest(c) for c in _chunks(ch, span)]
    shifted = {
        xxhash.xxh3_64_intdigest(c) for c in _chunks(ch, _text(rng, before) + span + _text(rng, after))
    }
    # Everything but the span's first few and its last chunk falls back into step.
    inner = alone[4:-1]
    if inner:
        assert sum(h in shifted for h in inner) >= 0.8 * len(inner)


def test_chat_layout_finds_messages_and_maps_roles_to_a_fixed_vocabulary() -> None:
    text = render_chat(
        [
            {"role": "system", "content": "s" * 40},
            {"role": "user", "content": "u" * 10},
            {"role": "secret-role-name", "content": "x"},
        ],
        tools=[{"type": "function", "function": {"name": "f"}}],
    ).encode()
    layout = chat_layout(text)
    assert len(layout.starts) == 3
    assert [role_name(r) for r in layout.roles] == ["system", "user", "other"]
    assert layout.message_of([0, int(layout.starts[0]) + 3, int(layout.starts[2]) + 1]) == [-1, 0, 2]
