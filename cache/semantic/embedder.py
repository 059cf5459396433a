"""A client for any OpenAI-compatible ``POST /v1/embeddings`` (vLLM, SGLang, TEI, OpenAI, this gateway).

One request per question (``input`` a one-element list), a total timeout per call, and a bounded,
validated answer: a malformed, oversized or non-finite answer is an ``EmbedderError``, on which the
caller bypasses the semantic cache (the request is still served). The aiohttp session is the caller's:
the gateway opens and closes it with its other client sessions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import aiohttp
import orjson


class EmbedderError(Exception):
    """The embedder could not give a usable vector; ``reason`` is a metric label."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Embedder:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        base_url: str | Callable[[], str],
        model: str,
        *,
        timeout_s: float = 1.0,
        max_dimensions: int = 8192,
        api_key: str | None = None,
    ) -> None:
        self.session = session
        self._base = base_url
        self.model = model
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.max_dimensions = max_dimensions
        self.max_body = 64 * 1024 + 32 * max_dimensions
        self.headers = {"Content-Type": "application/json"}
        if api_key:
            self.headers["Authorization"] = f"Bearer {api_key}"

    def url(self) -> str:
        base = self._base() if callable(self._base) else self._base
        return base.rstrip("/") + "/v1/embeddings"

    async def embed(self, text: str) -> list[float]:
        body = orjson.dumps({"model": self.model, "input": [text], "encoding_format": "float"})
        try:
            url = self.url()
        except LookupError as exc:  # a pool of the gateway with no healthy replica right now
            raise EmbedderError("unreachable", str(exc)) from None
        try:
            async with self.session.post(url, data=body, headers=self.headers, timeout=self.timeout) as resp:
                if resp.status != 200:
                    raise EmbedderError("status", f"embedder answered {resp.status}")
                raw = bytearray()
                while chunk := await resp.content.read(65536):
                    raw += chunk
                    if len(raw) > self.max_body:
                        raise EmbedderError("malformed", "embedder answer too large")
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            raise EmbedderError("unreachable", f"embedder call failed: {type(exc).__name__}") from None
        return self._vector(bytes(raw))

    def _vector(self, raw: bytes) -> list[float]:
        try:
            obj: Any = orjson.loads(raw)
            vec = obj["data"][0]["embedding"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise EmbedderError("malformed", "embedder answer is not an embeddings list") from None
        if not isinstance(vec, list) or not 0 < len(vec) <= self.max_dimensions:
            raise EmbedderError("malformed", "embedding missing or longer than max_dimensions")
        if not all(isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x) for x in vec):
            raise EmbedderError("malformed", "embedding holds non-finite or non-numeric values")
        return [float(x) for x in vec]
