"""The real-vLLM benchmark's workloads (``bench.real_vllm``), and the same request sequences for the
engine model in virtual time (``bench.routing_matrix --set real-vllm``).

A workload: ``docs*`` asks random short questions about long shared documents (each a system prompt),
spread evenly; ``zipf16x3k`` asks 16 documents of ~2.9k tokens with Zipf popularity (s = 0.9). Clients
run a closed loop: ``--concurrency`` of them, each sending its next request when its previous answer
ended.

In virtual time (``virtual``) the prompt is counted at 4 bytes a token (``sim.kvcache``), not by the
tiny Llama's tokenizer, so a document is the same seeded word sequence continued until its bytes make
the token count the tokenizer gave the real one: 2.9 tokens a word (docs/benchmarks.md, "Real vLLM": 14
documents of 400 words, 1,161 tokens on average; 16 of 1,000 words, 2,903). The closed loop is modelled
by ``after``: request k waits for request k - concurrency (the real clients take the next request from
one queue, so which client sends which differs; the concurrency is the same).
"""

from __future__ import annotations

import random

from bench import workloads
from scripts.vllm_cpu.replicas import WORDS

# name -> (documents, words per document, Zipf exponent of their popularity or None for uniform):
# ~1.2k-token documents that about fill the fleet's cache, ~2.9k-token ones (prefill costs more) that
# exceed it, and 16 of those with a Zipf head (the fleet holds about 5.6 of them).
WORKLOADS: dict[str, tuple[int, int, float | None]] = {
    "docs14x1k": (14, 400, None),
    "docs6x3k": (6, 1000, None),
    "zipf16x3k": (16, 1000, 0.9),
}
TOKENS_PER_WORD = 2.9  # the tiny Llama's tokens a word of these documents (measured, module header)


def documents(n: int, seed: int, words: int = 400) -> list[str]:
    rng = random.Random(seed)
    return [f"Document {i}. " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(n)]


def plan(n_requests: int, n_docs: int, seed: int, zipf_s: float | None = None) -> list[tuple[int, str]]:
    """The request sequence: (document, question) pairs; documents uniform, or Zipf(``zipf_s``) by rank."""
    rng = random.Random(seed + 1)
    weights = [1.0 / (i + 1) ** zipf_s for i in range(n_docs)] if zipf_s else None
    return [
        (rng.choices(range(n_docs), weights=weights)[0] if weights else rng.randrange(n_docs),
         f"question {k}: " + " ".join(rng.choices(WORDS, k=6)))
        for k in range(n_requests)
    ]  # fmt: skip


def sim_documents(n: int, seed: int, words: int) -> list[str]:
    """Documents like ``documents``' (the same words, one seeded generator) of ``TOKENS_PER_WORD`` x
    ``words`` tokens each at 4 bytes a token (the engine model's count)."""
    target = 4 * round(TOKENS_PER_WORD * words)
    rng = random.Random(seed)
    out = []
    for i in range(n):
        parts = [f"Document {i}."]
        size = len(parts[0])
        while size < target:
            w = rng.choice(WORDS)
            parts.append(w)
            size += 1 + len(w)
        out.append(" ".join(parts)[:target])
    return out


def virtual(name: str, seed: int, requests: int = 300, concurrency: int = 4) -> workloads.Workload:
    """``name``'s request sequence for ``seed`` as chat requests for the engine model, closed loop."""
    n_docs, words, zipf_s = WORKLOADS[name]
    docs = sim_documents(n_docs, seed, words)
    out = []
    for k, (d, question) in enumerate(plan(requests, n_docs, seed, zipf_s)):
        body = {
            "model": workloads.MODEL,
            "messages": [{"role": "system", "content": docs[d]}, {"role": "user", "content": question}],
            "max_tokens": 4,
            "temperature": 0,
        }
        first = k < concurrency
        out.append(
            workloads.Request(body, after=None if first else k - concurrency, at=0.0 if first else None)
        )
    return workloads.Workload(
        name, f"{name} (real-vLLM workload, seed {seed}), closed loop x {concurrency}", out
    )
