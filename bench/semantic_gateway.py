"""The independent set's pairs through a real gateway process, a tenant per pair, the real openai client.

``bench.semantic_independent`` runs every pair through ``SemanticLayer`` in the bench's own process:
the request path's code, but not the request path. Its ``gateway`` mode hands a sample of the split's
pairs (``--gateway-sample``, drawn by ``SEED``) to ``run_pairs``: per example policy one ``serve``
process (``bench.procs.start_gateway``) in front of the bench's simulator, the policy as shipped
(fingerprint mode) with ``cache.enabled`` and one tenant per pair (its own API key, so no pair sees
another's entries); the ``cached`` question is asked, then the ``probe``, each with
``openai.AsyncOpenAI`` (``with_raw_response``, to read ``x-cache``). A pair hits when the probe's
``x-cache`` is ``semantic-hit``. Each pair's outcome is also compared with the layer's verdict on the
same pair (``agree``): a difference would mean the in-process bench does not measure what the
gateway serves.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import tempfile
from pathlib import Path
from typing import Any

import yaml
from openai import AsyncOpenAI

from bench.procs import start_gateway

SEED = 2613
MODEL = "sim-llama"


def sample(pairs: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` pairs of the split, the same ones every run (``SEED``), in file order."""
    chosen = set(random.Random(SEED).sample(range(len(pairs)), min(n, len(pairs))))
    return [p for i, p in enumerate(pairs) if i in chosen]


def _key(pair_id: str) -> str:
    return "key-" + hashlib.sha256(pair_id.encode()).hexdigest()[:24]


def policy_file(path: str, replica: str, pairs: list[dict[str, Any]], out: Path, root: Path) -> Path:
    raw = yaml.safe_load((root / path).read_text(encoding="utf-8"))
    raw["models"] = [{"name": MODEL, "replicas": [{"url": replica}]}]
    raw["cache"]["enabled"] = True
    raw["tenancy"] = {
        "allow_anonymous": False,
        "tenants": [
            {"id": f"t{i}", "api_key_sha256": [hashlib.sha256(_key(p["id"]).encode()).hexdigest()]}
            for i, p in enumerate(pairs)
        ],
    }
    raw["billing"] = {"ledger": {"path": ":memory:"}}
    raw.setdefault("server", {})["access_log"] = False
    file = out / (Path(path).stem + ".yaml")
    file.write_text(yaml.safe_dump(raw, allow_unicode=True), encoding="utf-8")
    return file


async def _ask(client: AsyncOpenAI, text: str) -> str:
    raw = await client.chat.completions.with_raw_response.create(
        model=MODEL, temperature=0, max_tokens=8, messages=[{"role": "user", "content": text}]
    )
    raw.parse()  # the body is a valid completion whatever the outcome
    return raw.headers.get("x-cache", "")


async def run_pairs(
    pairs: list[dict[str, Any]], replica: str, root: Path = Path()
) -> dict[str, tuple[bool, str]]:
    """pair id -> (hit, the probe's x-cache), one gateway per policy."""
    out: dict[str, tuple[bool, str]] = {}
    with tempfile.TemporaryDirectory(prefix="semgw-") as tmp:
        for path in sorted({p["policy"] for p in pairs}):
            group = [p for p in pairs if p["policy"] == path]
            file = policy_file(path, replica, group, Path(tmp), root)
            gw = await asyncio.to_thread(
                start_gateway, ["--config", str(file)], env={"PREFIX_GATEWAY_SECRET": "semantic-gateway"}
            )
            try:
                for p in group:
                    client = AsyncOpenAI(base_url=gw.url + "/v1", api_key=_key(p["id"]), max_retries=0)
                    async with client:
                        await _ask(client, p["cached"])
                        outcome = await _ask(client, p["probe"])
                    out[p["id"]] = (outcome == "semantic-hit", outcome)
            finally:
                await asyncio.to_thread(gw.stop)
    return out
