"""Deterministic "generated" text and embeddings: pure, no I/O.

Token ``i`` of an answer is a word picked by ``xxh3_64(i, seed=base)`` where ``base`` hashes the
prompt, ``seed`` and ``temperature``. Same request → same text, so a cached answer can be compared
with a fresh one. With ``temperature > 0`` and no ``seed`` the caller passes a ``nonce`` that differs
per call, like sampling does.
"""

from __future__ import annotations

import struct

import xxhash

_xxh3 = xxhash.xxh3_64_intdigest

WORDS: tuple[str, ...] = tuple(
    """the a of and to in is it that was for on are as with his they at be this from have or by one
    had not but what all were when we there can an your which their said if do will each about how up
    out them then she many some so these would other into has more her two like him see time could no
    make than first been its who now people my made over did down only way find use may water long
    little very after words called just where most know cache prefix block token route replica gateway
    stream answer model query value""".split()  # noqa: SIM905
)
_N_WORDS = len(WORDS)


def answer_seed(prompt: bytes, seed: int | None, temperature: float, nonce: int = 0) -> int:
    """The base hash every token of one answer derives from."""
    head = f"{seed}|{float(temperature)!r}|{nonce}|".encode()
    return _xxh3(head + prompt)


def tokens(base: int, count: int) -> list[str]:
    """``count`` output tokens, each a word with its leading space (one token per SSE chunk)."""
    pack = struct.Struct("<I").pack
    return [" " + WORDS[_xxh3(pack(i), base) % _N_WORDS] for i in range(count)]


def embedding(data: bytes, dim: int) -> list[float]:
    """A deterministic unit-ish vector of ``dim`` floats in [-1, 1] derived from ``data``."""
    base = _xxh3(data)
    pack = struct.Struct("<I").pack
    return [(_xxh3(pack(i), base) % 2_000_001) / 1_000_000 - 1.0 for i in range(dim)]
