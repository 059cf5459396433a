"""``gateway.upstream.coding``: what a replica's unasked content coding decodes to, and its limits."""

from __future__ import annotations

import gzip
import zlib

import pytest

from gateway.upstream.coding import PIECE, StreamDecoder, UnreadableCoding, coding_of, decode_whole


def test_identity_and_absent_are_no_coding() -> None:
    assert coding_of(None) is None
    assert coding_of("") is None
    assert coding_of("identity") is None
    assert coding_of(" GZIP ") == "gzip"
    assert coding_of("x-gzip") == "x-gzip"


@pytest.mark.parametrize("value", ["br", "zstd", "gzip, br", "compress"])
def test_a_coding_not_decoded_is_refused_by_name(value: str) -> None:
    with pytest.raises(UnreadableCoding, match="does not decode"):
        coding_of(value)


def test_deflate_is_read_zlib_wrapped_or_raw() -> None:
    body = b'{"a": 1}' * 100
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decode_whole(zlib.compress(body), "deflate") == body
    assert decode_whole(raw.compress(body) + raw.flush(), "deflate") == body


def test_a_whole_body_over_the_limit_is_refused() -> None:
    bomb = gzip.compress(b"\0" * 10_000)
    assert len(bomb) < 200
    assert decode_whole(bomb, "gzip", limit=10_000) == b"\0" * 10_000
    with pytest.raises(UnreadableCoding, match="more than 9999 bytes"):
        decode_whole(bomb, "gzip", limit=9_999)


def test_a_truncated_or_corrupt_whole_body_is_refused() -> None:
    data = gzip.compress(b"hello world" * 50)
    with pytest.raises(UnreadableCoding, match="ends before its end"):
        decode_whole(data[: len(data) // 2], "gzip")
    with pytest.raises(UnreadableCoding, match="does not decode"):
        decode_whole(b"not gzip at all", "gzip")


def test_a_stream_inflates_in_bounded_pieces_and_knows_its_end() -> None:
    body = b"x" * (5 * PIECE + 7)
    data = gzip.compress(body)
    d = StreamDecoder("gzip")
    pieces = list(d.feed(data[:10])) + list(d.feed(data[10:]))
    assert b"".join(pieces) == body
    assert max(len(p) for p in pieces) <= PIECE and len(pieces) >= 6
    assert d.complete
    cut = StreamDecoder("gzip")
    list(cut.feed(data[: len(data) - 4]))
    assert not cut.complete
