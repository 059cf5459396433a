"""Tokenizers for routing: turn a rendered prompt into a byte string cut at fixed token strides.

Blocks are byte slices, whatever the tokenizer: ``approx`` keeps the UTF-8 bytes and calls every
``bytes_per_token`` bytes a token (no Python token list at all), ``hf`` packs token ids as 4-byte
unsigned integers. ``router.blocks`` then cuts ``block_size * stride`` bytes per block.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from config.routing import TokenizerConfig

_ID_STRIDE = 4  # bytes of one packed token id (array 'I')
assert array("I").itemsize == _ID_STRIDE


@dataclass(frozen=True, slots=True)
class Tokens:
    """A prompt as bytes, ``stride`` bytes per token; ``count`` tokens in the whole prompt."""

    data: bytes
    stride: int
    count: int


class Tokenizer(Protocol):
    name: str
    # Characters a token holds on average, to estimate a prompt's tokens before encoding it (e.g. the
    # tenant limiter's reservation); never used where the real count is known.
    chars_per_token: int

    def encode(self, text: str) -> Tokens: ...


def from_ids(ids: Sequence[int]) -> Tokens:
    """Pre-tokenized prompts (completions with token ids) whatever the configured tokenizer."""
    return Tokens(array("I", ids).tobytes(), _ID_STRIDE, len(ids))


class ApproxTokenizer:
    """No vocabulary: ``bytes_per_token`` UTF-8 bytes make a token (the default, 4)."""

    name = "approx"

    def __init__(self, bytes_per_token: int = 4) -> None:
        if bytes_per_token < 1:
            raise ValueError("bytes_per_token must be at least 1")
        self.bytes_per_token = bytes_per_token
        self.chars_per_token = bytes_per_token

    def encode(self, text: str) -> Tokens:
        data = text.encode("utf-8", "surrogatepass")
        return Tokens(data, self.bytes_per_token, -(-len(data) // self.bytes_per_token))


def load_hf_tokenizer(path: str | Path) -> Any:
    """A ``tokenizers.Tokenizer`` from a local ``tokenizer.json``; a clear error when it cannot be."""
    try:
        from tokenizers import Tokenizer as _HF
    except ImportError as exc:  # pragma: no cover - the dependency is installed in dev
        raise RuntimeError("tokenizer kind 'hf' needs the 'tokenizers' package (extra 'hf')") from exc
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    try:
        return _HF.from_file(str(path))
    except Exception as exc:  # the library raises a bare Exception for a malformed file
        raise ValueError(f"{path} is not a tokenizer.json the tokenizers library can load: {exc}") from None


class HFTokenizer:
    """The ``tokenizers`` library with a local ``tokenizer.json``, loaded when constructed (so a policy
    naming a missing or broken file fails at start, not at every request)."""

    name = "hf"
    chars_per_token = 4  # BPE vocabularies of current models average about 4 characters a token

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._tok: Any = load_hf_tokenizer(self.path)

    def encode(self, text: str) -> Tokens:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return from_ids(ids)


def make_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    if cfg.kind == "hf":
        assert cfg.path is not None  # checked by TokenizerConfig
        return HFTokenizer(cfg.path)
    return ApproxTokenizer(cfg.bytes_per_token)
