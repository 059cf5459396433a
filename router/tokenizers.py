"""Tokenizers for routing: turn a rendered prompt into a byte string cut at fixed token strides.

Blocks are byte slices, whatever the tokenizer: ``approx`` keeps the UTF-8 bytes and calls every
``bytes_per_token`` bytes a token (no Python token list at all), ``hf`` packs token ids as 4-byte
unsigned integers. ``router.blocks`` then cuts ``block_size * stride`` bytes per block.

A rendering arrives as a stream of pieces (``router.prompt.prompt_pieces``), and ``tokens(pieces,
keep)`` keeps only the first ``keep`` tokens (what the router hashes: ``max_prefix_tokens``) with the
whole prompt's count: ``approx`` counts the rest's bytes (exact); ``hf`` tokenizes a prefix of the text
just long enough for ``keep`` tokens and ``MARGIN`` more (the tokens at the cut are not used), and
counts the rest at that prefix's characters per token. Measured on a 3.9 MB prompt through a gateway process
(``tests/load/test_memory.py``): tokenizing all of it took 9 s of CPU and 400 MB of transient memory
per request (the library's Encoding keeps offsets and token strings for every token); the prefix
costs milliseconds.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from config.routing import TokenizerConfig

_ID_STRIDE = 4  # bytes of one packed token id (array 'I')
assert array("I").itemsize == _ID_STRIDE
MARGIN = 64  # hf: tokens tokenized past the kept ones, so that the cut of the text cannot change them
STEP_CHARS = 4096  # hf: the slices in which prefix_ids takes text


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

    def tokens(self, pieces: Iterable[str], keep: int | None = None) -> Tokens:
        """The first ``keep`` tokens (all when None) of the concatenated pieces, and the whole count."""
        ...

    def encode(self, text: str) -> Tokens: ...


def _utf8_len(piece: str) -> int:
    return len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))


def from_ids(ids: Sequence[int]) -> Tokens:
    """Pre-tokenized prompts (completions with token ids) whatever the configured tokenizer."""
    return Tokens(array("I", ids).tobytes(), _ID_STRIDE, len(ids))


def tokenize(tokenizer: Tokenizer, prompt: Iterable[str] | list[int], keep: int | None = None) -> Tokens:
    """A rendering (``router.prompt.prompt_pieces``) as tokens: token ids as they are, text through
    ``tokenizer``, of which the first ``keep`` tokens are kept (all when None), with the whole count."""
    return from_ids(prompt) if isinstance(prompt, list) else tokenizer.tokens(prompt, keep)


class ApproxTokenizer:
    """No vocabulary: ``bytes_per_token`` UTF-8 bytes make a token (the default, 4)."""

    name = "approx"

    def __init__(self, bytes_per_token: int = 4) -> None:
        if bytes_per_token < 1:
            raise ValueError("bytes_per_token must be at least 1")
        self.bytes_per_token = bytes_per_token
        self.chars_per_token = bytes_per_token

    def tokens(self, pieces: Iterable[str], keep: int | None = None) -> Tokens:
        limit = None if keep is None else keep * self.bytes_per_token
        head = bytearray()
        held = total = 0  # bytes in ``head`` (kept here: ``len(head)`` twice a piece was 6 calls a request)
        for piece in pieces:
            if limit is None:
                data = piece.encode("utf-8", "surrogatepass")
                head += data
                total += len(data)
            elif held < limit:
                data = piece.encode("utf-8", "surrogatepass")
                kept = data[: limit - held]
                head += kept
                held += len(kept)
                total += len(data)
            else:
                total += _utf8_len(piece)
        return Tokens(bytes(head), self.bytes_per_token, -(-total // self.bytes_per_token))

    def encode(self, text: str) -> Tokens:
        return self.tokens((text,))


def _text_chunks(pieces: Iterable[str], size: int) -> Iterator[str]:
    """The pieces' text in chunks of about ``size`` characters, cut between pieces or, inside a longer
    piece, after a space (a fixed function of the text: a shared prefix is cut alike)."""
    buf: list[str] = []
    held = 0
    for piece in pieces:
        while held + len(piece) > size:
            cut = piece.rfind(" ", 0, size - held) + 1 or size - held
            buf.append(piece[:cut])
            yield "".join(buf)
            buf, held, piece = [], 0, piece[cut:]
        buf.append(piece)
        held += len(piece)
    if buf:
        yield "".join(buf)


def prefix_ids(encode: Callable[[str], list[int]], pieces: Iterable[str], keep: int) -> tuple[list[int], int]:
    """The first ``keep`` token ids of the text, and its token count, tokenizing only a prefix long
    enough for ``keep + MARGIN`` tokens (doubled while it is not); the rest is counted at the prefix's
    own characters per token. The whole text tokenized: all its ids, the exact count."""
    it = _text_chunks(pieces, STEP_CHARS)
    head: list[str] = []
    held = 0
    want = (keep + MARGIN) * 8  # characters: 8 a token is more than BPE vocabularies put in one
    while True:
        for chunk in it:  # take text until ``want`` characters are held (or none is left)
            head.append(chunk)
            held += len(chunk)
            if held >= want:
                break
        ids = encode("".join(head))
        if len(ids) >= keep + MARGIN or held < want:  # enough tokens, or the whole text
            break
        want *= 2  # dense text (many characters a token): take more
    rest = sum(len(chunk) for chunk in it)
    if not rest:
        return ids, len(ids)
    return ids[:keep], len(ids) + -(-rest * len(ids) // held)


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

    def _ids(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def tokens(self, pieces: Iterable[str], keep: int | None = None) -> Tokens:
        if keep is None:
            return from_ids(self._ids("".join(pieces)))
        ids, count = prefix_ids(self._ids, pieces, keep)
        return Tokens(array("I", ids).tobytes(), _ID_STRIDE, count)

    def encode(self, text: str) -> Tokens:
        return self.tokens((text,))


def make_tokenizer(cfg: TokenizerConfig) -> Tokenizer:
    if cfg.kind == "hf":
        assert cfg.path is not None  # checked by TokenizerConfig
        return HFTokenizer(cfg.path)
    return ApproxTokenizer(cfg.bytes_per_token)
