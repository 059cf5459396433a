"""Placements one gateway process tells the others: which block hashes it sent to which replica.

A batch is bytes: a header (magic, version, the sender's 8-byte origin id, the count), then per
placement the pool name, the replica id (UTF-8, each at most 255 bytes) and its block hashes (64-bit,
little endian). Block hashes are seeded with the model and the tenant's salt (``router.blocks``), so
a batch carries no prompt text and no tenant name. Pure: no I/O (``gateway.fleet.sharing`` sends and
receives batches); ``decode`` bounds everything it reads and raises ``PlacementError`` on a malformed
batch rather than guess.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

MAGIC = b"PGP1"
_HEAD = struct.Struct("<4s8sI")  # magic, origin, placements
_NAMES = struct.Struct("<BBH")  # pool name length, replica id length, hashes
MAX_PLACEMENTS = 100_000  # per batch, bounded by max_batch_bytes in practice


class PlacementError(ValueError):
    """Bytes that are not a placement batch."""


@dataclass(frozen=True, slots=True)
class Placement:
    pool: str
    replica: str
    hashes: tuple[int, ...]

    def encoded(self) -> bytes:
        pool, rid = self.pool.encode(), self.replica.encode()
        if len(pool) > 255 or len(rid) > 255 or len(self.hashes) > 65_535:
            raise PlacementError("pool name or replica id over 255 bytes, or over 65,535 hashes")
        hashes = array("Q", self.hashes)
        if sys.byteorder != "little":  # pragma: no cover - x86 and arm64 are little endian
            hashes.byteswap()
        return _NAMES.pack(len(pool), len(rid), len(hashes)) + pool + rid + hashes.tobytes()


def encode(origin: bytes, placements: Sequence[Placement], max_bytes: int) -> Iterator[bytes]:
    """Batches of ``placements`` from ``origin``, each at most ``max_bytes`` (a placement larger than
    that on its own is sent alone)."""
    if len(origin) != 8:
        raise PlacementError("origin must be 8 bytes")
    parts: list[bytes] = []
    size = _HEAD.size
    for p in placements:
        data = p.encoded()
        if parts and size + len(data) > max_bytes:
            yield _HEAD.pack(MAGIC, origin, len(parts)) + b"".join(parts)
            parts, size = [], _HEAD.size
        parts.append(data)
        size += len(data)
    if parts:
        yield _HEAD.pack(MAGIC, origin, len(parts)) + b"".join(parts)


def decode(batch: bytes) -> tuple[bytes, list[Placement]]:
    """The origin and the placements of one batch."""
    view = memoryview(batch)
    if len(view) < _HEAD.size:
        raise PlacementError("batch shorter than its header")
    magic, origin, count = _HEAD.unpack_from(view, 0)
    if magic != MAGIC:
        raise PlacementError("not a placement batch")
    if count > MAX_PLACEMENTS:
        raise PlacementError(f"{count} placements in one batch")
    out: list[Placement] = []
    at = _HEAD.size
    for _ in range(count):
        if at + _NAMES.size > len(view):
            raise PlacementError("batch truncated")
        lp, lr, n = _NAMES.unpack_from(view, at)
        at += _NAMES.size
        end = at + lp + lr + 8 * n
        if end > len(view):
            raise PlacementError("batch truncated")
        try:
            pool = bytes(view[at : at + lp]).decode()
            rid = bytes(view[at + lp : at + lp + lr]).decode()
        except UnicodeDecodeError as exc:
            raise PlacementError("pool name or replica id is not UTF-8") from exc
        hashes = array("Q")
        hashes.frombytes(view[at + lp + lr : end])
        if sys.byteorder != "little":  # pragma: no cover
            hashes.byteswap()
        out.append(Placement(pool, rid, tuple(hashes)))
        at = end
    if at != len(view):
        raise PlacementError("trailing bytes after the last placement")
    return bytes(origin), out
