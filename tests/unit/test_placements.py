"""Placement batches: what one gateway process tells the others (block hashes only, bounded)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from router.placements import Placement, PlacementError, decode, encode

ORIGIN = b"\x01" * 8
names = st.text(min_size=1, max_size=40)
placements = st.builds(Placement, names, names, st.lists(st.integers(0, 2**64 - 1), max_size=300).map(tuple))


@given(st.lists(placements, max_size=30), st.integers(1024, 20_000))
def test_batches_round_trip_and_respect_their_size(items: list[Placement], max_bytes: int) -> None:
    batches = list(encode(ORIGIN, items, max_bytes))
    out: list[Placement] = []
    for b in batches:
        origin, got = decode(b)
        assert origin == ORIGIN
        assert len(b) <= max_bytes or len(got) == 1  # only a placement too big on its own exceeds it
        out += got
    assert out == items


def test_a_batch_holds_hashes_and_names_only() -> None:
    (batch,) = encode(ORIGIN, [Placement("llama", "r1", (1, 2, 3))], 4096)
    assert len(batch) == 16 + 4 + len("llama") + len("r1") + 3 * 8


@pytest.mark.parametrize(
    "bad",
    [
        b"",
        b"XXXX" + b"\0" * 12,
        b"PGP1" + b"\0" * 8 + (5).to_bytes(4, "little"),
        b"PGP1" + b"\0" * 8 + (200_000).to_bytes(4, "little"),
    ],
)
def test_malformed_batches_are_refused(bad: bytes) -> None:
    with pytest.raises(PlacementError):
        decode(bad)


def test_truncated_and_padded_batches_are_refused() -> None:
    (batch,) = encode(ORIGIN, [Placement("m", "r0", (7, 8))], 4096)
    with pytest.raises(PlacementError):
        decode(batch[:-1])
    with pytest.raises(PlacementError):
        decode(batch + b"\0")


def test_names_over_255_bytes_are_refused() -> None:
    with pytest.raises(PlacementError):
        list(encode(ORIGIN, [Placement("m" * 256, "r0", (1,))], 4096))
