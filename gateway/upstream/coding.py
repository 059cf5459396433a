"""Content codings a replica sends although the gateway asked for none.

Every request to a replica says ``Accept-Encoding: identity`` (``gateway.upstream.lean.IDENTITY``,
``client.make_session``), and the relay drops ``Content-Encoding`` (a whole answer is parsed and may be
rewritten, a stream is tapped event by event). A replica that compresses anyway (a proxy in front of it
with compression forced on, a server that ignores the header) answered before this module with bytes the
gateway could not read: a 502 "invalid JSON" counted against the replica's breaker for a whole answer, and
gzip bytes relayed without their header for a stream or an error body. Now ``gzip`` (``x-gzip``) and
``deflate`` (zlib-wrapped or raw, as browsers accept both) are decoded here with the standard library's
zlib, and any other coding is refused by name (``UnreadableCoding``, a protocol failure the attempt loop
retries on another replica): no brotli or zstd dependency for a case that only a misconfigured replica
makes.

Limits, named and tested (``tests/integration/test_upstream_encoding.py``, ``tests/unit/test_coding.py``):
``DECODED_LIMIT`` bytes for a whole decoded body (a small compressed answer cannot grow the gateway's
memory without bound: 1 MiB of gzip of zeros is 1 GiB), and a stream decoded ``PIECE`` bytes at a time,
so what one chunk inflates to is handed on in bounded pieces.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

# Most bytes a whole answer may decode to (the request side's default max_body_bytes is 16 MiB; an
# answer is usually far smaller).
DECODED_LIMIT = 64 * 2**20

# Most bytes a stream's chunk is inflated to at a time.
PIECE = 2**16

_GZIP = 16 + zlib.MAX_WBITS
_ZLIB = zlib.MAX_WBITS


class UnreadableCoding(ValueError):
    """A coding the gateway does not decode, a body that does not decode, or one over the limit."""


def coding_of(value: str | None) -> str | None:
    """The one coding to undo, lower case, or None for none (absent, empty or ``identity``)."""
    if value is None:
        return None
    codings = [c.strip().lower() for c in value.split(",") if c.strip() and c.strip().lower() != "identity"]
    if not codings:
        return None
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise UnreadableCoding(
            f"the replica answered with Content-Encoding {value!r}, which the gateway does not decode"
        )
    return codings[0]


def _decompressor(coding: str, head: bytes) -> zlib._Decompress:
    if coding == "deflate":
        # RFC 9110 deflate is zlib-wrapped; some servers send raw deflate (the first byte tells).
        return zlib.decompressobj(_ZLIB if head[:1] and (head[0] & 0x0F) == 8 else -zlib.MAX_WBITS)
    return zlib.decompressobj(_GZIP)


def decode_whole(data: bytes, coding: str | None, limit: int = DECODED_LIMIT) -> bytes:
    """``data`` with ``coding`` undone; ``UnreadableCoding`` if it does not decode whole or exceeds
    ``limit`` bytes."""
    if coding is None:
        return data
    d = _decompressor(coding, data)
    try:
        out = d.decompress(data, limit + 1)
    except zlib.error as e:
        raise UnreadableCoding(f"the replica's {coding} body does not decode ({e})") from None
    if len(out) > limit or d.unconsumed_tail:
        raise UnreadableCoding(f"the replica's {coding} body decodes to more than {limit} bytes")
    if not d.eof:
        raise UnreadableCoding(f"the replica's {coding} body ends before its end")
    return out


class StreamDecoder:
    """Undoes ``coding`` chunk by chunk; ``feed`` yields the decoded pieces (each at most ``PIECE``)."""

    __slots__ = ("_coding", "_d")

    def __init__(self, coding: str) -> None:
        self._coding = coding
        self._d: zlib._Decompress | None = None

    @property
    def complete(self) -> bool:
        """Whether the coded body ended (a stream that stops before it was cut short)."""
        return self._d is None or self._d.eof

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        if self._d is None:
            self._d = _decompressor(self._coding, chunk)
        d = self._d
        try:
            out = d.decompress(chunk, PIECE)
            while True:
                if out:
                    yield out
                if not d.unconsumed_tail:
                    return
                out = d.decompress(d.unconsumed_tail, PIECE)
        except zlib.error as e:
            raise UnreadableCoding(f"the replica's {self._coding} stream does not decode ({e})") from None
