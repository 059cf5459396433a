"""vLLM's prefix-cache block hashes, reproduced: ``--prefix-caching-hash-algo sha256_cbor``.

vLLM (v1, checked against 0.32.0 and against the events of a real replica, see
``tests/unit/test_vllm_hash.py``) hashes block ``i`` of a prompt as::

    h_i = sha256(cbor2.dumps((h_{i-1}, tuple(block_i_token_ids), extra_keys_i), canonical=True))

with ``h_0 = NONE_HASH = sha256(cbor(seed))``: the seed is ``PYTHONHASHSEED`` when the replica has it
set, else the fixed string ``"vllm-none-hash"`` (for the cryptographic algorithms only; ``xxhash`` and
``sha256`` of pickles are not reproducible outside the engine process). ``extra_keys_i`` is ``None``
except on the first block of a salted request, where it is ``(("cache_salt", salt),)`` (LoRA and
multimodal keys also go there; the gateway does not route those precisely). KV events publish a block
hash as the low 64 bits of the digest read big-endian (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1``, the
default), which is the form returned here.

The CBOR encoder below covers exactly the values in that tuple (byte strings, unsigned integers, text,
arrays, null) in canonical (shortest) form, so no ``cbor2`` dependency is needed.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

DEFAULT_SEED = "vllm-none-hash"
_MASK64 = (1 << 64) - 1


def _head(major: int, n: int) -> bytes:
    """A CBOR item head: major type and argument in its shortest form."""
    mt = major << 5
    if n < 24:
        return bytes((mt | n,))
    if n < 0x100:
        return bytes((mt | 24, n))
    if n < 0x10000:
        return struct.pack(">BH", mt | 25, n)
    if n < 0x100000000:
        return struct.pack(">BI", mt | 26, n)
    if n <= _MASK64:
        return struct.pack(">BQ", mt | 27, n)
    raise ValueError("integer beyond 64 bits")


def cbor(value: Any) -> bytes:
    """Canonical CBOR of None, bool, int, bytes, str and lists/tuples of those."""
    if value is None:
        return b"\xf6"
    if value is True:
        return b"\xf5"
    if value is False:
        return b"\xf4"
    if isinstance(value, int):
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, bytes):
        return _head(2, len(value)) + value
    if isinstance(value, str):
        data = value.encode("utf-8")
        return _head(3, len(data)) + data
    if isinstance(value, list | tuple):
        return _head(4, len(value)) + b"".join(map(cbor, value))
    raise TypeError(f"cannot CBOR-encode {type(value).__name__}")


class _TokenCbor(dict[int, bytes]):
    """Memo of each token id's CBOR encoding, filled on first use (bounded by the vocabulary)."""

    def __missing__(self, token: int) -> bytes:
        encoded = self[token] = cbor(token)
        return encoded


_TOKEN_CBOR = _TokenCbor()


def _token_array(ids: Sequence[int]) -> bytes:
    """``cbor(tuple(ids))`` for a block of token ids."""
    return _head(4, len(ids)) + b"".join(map(_TOKEN_CBOR.__getitem__, ids))


def sha256_cbor(value: Any) -> bytes:
    return hashlib.sha256(cbor(value)).digest()


@lru_cache(maxsize=16)
def none_hash(seed: str | None = None) -> bytes:
    """The parent hash of a chain's first block for replicas started with ``PYTHONHASHSEED=seed``."""
    return sha256_cbor(DEFAULT_SEED if seed is None else seed)


def external(digest: bytes) -> int:
    """A block hash as KV events publish it: the low 64 bits of the big-endian digest."""
    return int.from_bytes(digest[-8:], "big")


def block_hashes(
    token_ids: Sequence[int],
    block_size: int,
    *,
    salt: str | None = None,
    seed: str | None = None,
    max_blocks: int | None = None,
) -> tuple[int, ...]:
    """Event-form hashes of the prompt's full blocks (at most ``max_blocks``), as the engine computes them.

    The engine never caches the block holding the prompt's last token when the prompt is an exact
    multiple of the block size (it must recompute one token), but it does publish that block once
    computed, so all full blocks are returned.
    """
    n = len(token_ids) // block_size
    if max_blocks is not None:
        n = min(n, max_blocks)
    parent = none_hash(seed)
    salt_keys = b"\x81" + cbor(("cache_salt", salt)) if salt else b"\xf6"  # array of one pair, or null
    out: list[int] = []
    for i in range(n):
        blk = _token_array(token_ids[i * block_size : (i + 1) * block_size])
        extra = salt_keys if i == 0 else b"\xf6"
        parent = hashlib.sha256(b"\x83" + _head(2, len(parent)) + parent + blk + extra).digest()
        out.append(external(parent))
    return tuple(out)
