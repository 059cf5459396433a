"""Seeded, bounded request streams for the routing benchmark: pure, no I/O.

Every generator returns a :class:`Workload`: an ordered list of chat requests (OpenAI bodies) that a
runner offers in that order. A request may depend on an earlier one (the previous turn of the same
conversation, the previous step of the same agent): the runner sends it only once that one has
finished, as a user or an agent would. Conversation histories (assistant replies, tool results) are
generated here, not taken from the replicas' answers, so a workload is the same stream in every run
and its oracle can be computed offline.

Text is ASCII pseudo-words, so that ``n`` tokens are about ``4 n`` bytes under the 4-bytes-per-token
approximation both the gateway and the simulator use. Bodies carry ``temperature: 0.7`` and no seed:
the gateway's response cache ignores non-deterministic requests, so every request reaches the fleet.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MODEL = "sim-llama"
BYTES_PER_TOKEN = 4
TEMPERATURE = 0.7


@dataclass(frozen=True, slots=True)
class Request:
    """One request of a workload. ``after``: index of the request that must finish before this one;
    ``at``: when to send it, in seconds from the start (trace replay; None: the runner's arrival process)."""

    body: dict[str, Any]
    session: str | None = None
    after: int | None = None
    at: float | None = None


@dataclass(slots=True)
class Workload:
    name: str
    title: str
    requests: list[Request] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.requests)


class TextGen:
    """Deterministic pseudo-text from a seeded generator (a fixed vocabulary of short words)."""

    def __init__(self, rng: random.Random, vocab_size: int = 4096) -> None:
        self.rng = rng
        letters = string.ascii_lowercase
        self.vocab = [
            "".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(vocab_size)
        ]

    def text(self, tokens: int) -> str:
        """About ``tokens`` tokens of text: exactly ``tokens * BYTES_PER_TOKEN`` ASCII bytes."""
        n = max(0, tokens) * BYTES_PER_TOKEN
        if n == 0:
            return ""
        # Words average ~6.5 bytes with their space; draw enough and cut to the exact length.
        words = self.rng.choices(self.vocab, k=n // 5 + 2)
        out = " ".join(words)
        while len(out) < n:  # bounded: each round adds at least n // 5 + 2 words
            out += " " + " ".join(self.rng.choices(self.vocab, k=n // 5 + 2))
        return out[:n]

    def tokens(self, lo: int, hi: int) -> str:
        return self.text(self.rng.randint(lo, hi))


def _body(messages: list[dict[str, Any]], max_tokens: int, tools: list[Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": TEMPERATURE,
    }
    if tools is not None:
        body["tools"] = tools
    return body


def zipf_weights(n: int, s: float) -> list[float]:
    """Popularity of ranks 1..n under Zipf's law with exponent ``s``."""
    return [1.0 / (k**s) for k in range(1, n + 1)]


def shared_system_prompts(
    seed: int = 1,
    requests: int = 400,
    prompts: int = 64,
    prompt_tokens: tuple[int, int] = (1000, 4000),
    question_tokens: tuple[int, int] = (10, 60),
    zipf_s: float = 1.0,
    max_tokens: int = 16,
) -> Workload:
    """Many users of ``prompts`` applications: a system prompt of 1-4k tokens picked with Zipf popularity,
    then a short unique question."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    systems = [f"App {i}. " + gen.tokens(*prompt_tokens) for i in range(prompts)]
    picks = rng.choices(range(prompts), weights=zipf_weights(prompts, zipf_s), k=requests)
    out = []
    for i, p in enumerate(picks):
        messages = [
            {"role": "system", "content": systems[p]},
            {"role": "user", "content": f"Q{i}: " + gen.tokens(*question_tokens)},
        ]
        out.append(Request(_body(messages, max_tokens)))
    return Workload("shared_system", "1. Shared system prompts (64, Zipf)", out)


def _interleave(
    rng: random.Random,
    sessions: list[list[dict[str, Any]]],
    active: int,
    prefix: str,
) -> list[Request]:
    """Order the requests of many sessions (each a list of bodies, in order) as they would arrive:
    ``active`` sessions run at once; each step picks one of them at random for its next request; a
    finished session is replaced by the next one. Each request depends on its session's previous one."""
    out: list[Request] = []
    waiting = list(range(len(sessions)))[::-1]
    running: list[list[int]] = []  # [session index, next turn]
    last: dict[int, int] = {}
    while waiting or running:
        while waiting and len(running) < active:
            running.append([waiting.pop(), 0])
        slot = rng.randrange(len(running))
        sid, turn = running[slot]
        out.append(Request(sessions[sid][turn], session=f"{prefix}-{sid}", after=last.get(sid)))
        last[sid] = len(out) - 1
        running[slot][1] += 1
        if running[slot][1] >= len(sessions[sid]):
            running.pop(slot)
    return out


def multi_turn_chat(
    seed: int = 2,
    conversations: int = 48,
    turns: tuple[int, int] = (6, 10),
    active: int = 24,
    system_prompts: int = 4,
    system_tokens: tuple[int, int] = (200, 600),
    user_tokens: tuple[int, int] = (30, 250),
    reply_tokens: tuple[int, int] = (100, 300),
    max_tokens: int = 16,
) -> Workload:
    """Concurrent conversations that grow turn by turn: each turn sends the whole history so far.

    A few short shared system prompts; the per-conversation history soon dominates the prompt."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    systems = [f"Assistant persona {i}. " + gen.tokens(*system_tokens) for i in range(system_prompts)]
    sessions = []
    for c in range(conversations):
        history: list[dict[str, Any]] = [{"role": "system", "content": rng.choice(systems)}]
        bodies = []
        for t in range(rng.randint(*turns)):
            if t:
                history.append({"role": "assistant", "content": gen.tokens(*reply_tokens)})
            history.append({"role": "user", "content": f"conv {c} turn {t}: " + gen.tokens(*user_tokens)})
            bodies.append(_body(list(history), max_tokens))
        sessions.append(bodies)
    return Workload(
        "multi_turn", "2. Multi-turn chat (growing conversations)", _interleave(rng, sessions, active, "conv")
    )


def agent_loop(
    seed: int = 3,
    agents: int = 32,
    steps: tuple[int, int] = (6, 10),
    active: int = 16,
    tools: int = 20,
    tool_doc_tokens: tuple[int, int] = (30, 60),
    task_tokens: tuple[int, int] = (50, 200),
    observation_tokens: tuple[int, int] = (100, 400),
    max_tokens: int = 16,
) -> Workload:
    """Agents sharing one fixed tool preamble (``tools`` definitions, ~1.5k tokens), each with its own
    task and a scratchpad that grows by a tool call and its observation per step."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    tool_defs = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i}",
                "description": gen.tokens(*tool_doc_tokens),
                "parameters": {
                    "type": "object",
                    "properties": {"arg": {"type": "string", "description": gen.tokens(5, 15)}},
                },
            },
        }
        for i in range(tools)
    ]
    system = {"role": "system", "content": "You are an agent. Use the tools. " + gen.tokens(80, 80)}
    sessions = []
    for a in range(agents):
        history: list[dict[str, Any]] = [
            system,
            {"role": "user", "content": f"Task {a}: " + gen.tokens(*task_tokens)},
        ]
        bodies = []
        for s in range(rng.randint(*steps)):
            if s:
                call_id = f"call_{a}_{s}"
                history.append(
                    {
                        "role": "assistant",
                        "content": gen.tokens(10, 40),
                        "tool_calls": [
                            {
                                "id": call_id,
                                "type": "function",
                                "function": {"name": f"tool_{rng.randrange(tools)}", "arguments": "{}"},
                            }
                        ],
                    }
                )
                history.append(
                    {"role": "tool", "tool_call_id": call_id, "content": gen.tokens(*observation_tokens)}
                )
            bodies.append(_body(list(history), max_tokens, tool_defs))
        sessions.append(bodies)
    return Workload(
        "agent_loop",
        "3. Agent loop (shared tools, growing scratchpad)",
        _interleave(rng, sessions, active, "agent"),
    )


def no_sharing(
    seed: int = 4, requests: int = 300, prompt_tokens: tuple[int, int] = (300, 2000), max_tokens: int = 16
) -> Workload:
    """Unique prompts from their first byte: the control, where no routing can find a shared prefix."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    out = [
        Request(_body([{"role": "user", "content": f"{i:06d} " + gen.tokens(*prompt_tokens)}], max_tokens))
        for i in range(requests)
    ]
    return Workload("no_sharing", "4. No sharing (unique prompts, control)", out)


def hot_prefix(
    seed: int = 5,
    requests: int = 300,
    system_tokens: int = 2000,
    question_tokens: tuple[int, int] = (10, 60),
    max_tokens: int = 16,
) -> Workload:
    """Every request shares one long system prompt: a hot spot that must spread without drowning a replica."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    system = {"role": "system", "content": "The one app. " + gen.text(system_tokens)}
    out = [
        Request(
            _body([system, {"role": "user", "content": f"Q{i}: " + gen.tokens(*question_tokens)}], max_tokens)
        )
        for i in range(requests)
    ]
    return Workload("hot_prefix", "5. One hot prefix (every request shares it)", out)


def tight_cache(
    seed: int = 6,
    requests: int = 240,
    prefixes: int = 8,
    prefix_tokens: int = 1024,
    question_tokens: tuple[int, int] = (20, 60),
    max_tokens: int = 16,
) -> Workload:
    """sgl-router's tight-cache shape: a few long prefixes, equally popular, and replicas that can each
    cache about ``prefixes / replicas`` of them (the benchmark sizes their KV so): a router that splits
    the prefixes between the replicas hits almost always, one that spreads every prefix everywhere
    thrashes every cache."""
    rng = random.Random(seed)
    gen = TextGen(rng)
    systems = [f"Document {i}. " + gen.text(prefix_tokens) for i in range(prefixes)]
    out = []
    for i in range(requests):
        messages = [
            {"role": "system", "content": systems[rng.randrange(prefixes)]},
            {"role": "user", "content": f"Q{i}: " + gen.tokens(*question_tokens)},
        ]
        out.append(Request(_body(messages, max_tokens)))
    return Workload("tight_cache", "6. Tight cache (8 long prefixes, each replica holds about 2)", out)


def zipf_tight(seed: int = 1, requests: int = 600, prompts: int = 16, zipf_s: float = 0.9) -> Workload:
    """Issue 24's tight cache under Zipf popularity: ``prompts`` shared system prompts of about 1.6k
    tokens (100 blocks), for replicas whose KV holds about 3 of them (the benchmarks size it so)."""
    wl = shared_system_prompts(seed, requests, prompts, (1500, 1700), zipf_s=zipf_s)
    return Workload("zipf_tight", f"Tight cache, {prompts} shared prompts, Zipf s = {zipf_s:g}", wl.requests)


ZIPF_TIGHT_KV_BLOCKS = 330  # about 3 of zipf_tight's prompts a replica, plus running room
ZIPF_TIGHT_RATE = 24.0


# name -> (generator, keyword arguments that set its size for a default and for a --quick run)
SIZES: dict[str, tuple[Callable[..., Workload], dict[str, Any], dict[str, Any]]] = {
    "shared_system": (shared_system_prompts, {"requests": 200}, {"requests": 70}),
    "multi_turn": (multi_turn_chat, {"conversations": 26}, {"conversations": 10, "active": 8}),
    "agent_loop": (agent_loop, {"agents": 16}, {"agents": 7, "active": 6}),
    "no_sharing": (no_sharing, {"requests": 160}, {"requests": 60}),
    "hot_prefix": (hot_prefix, {"requests": 160}, {"requests": 60}),
    "tight_cache": (tight_cache, {"requests": 240}, {"requests": 96}),
}


def make(name: str, *, quick: bool = False, seed: int | None = None) -> Workload:
    """Build a named workload at its default or quick size; ``seed`` overrides the generator's own."""
    gen, full, small = SIZES[name]
    kwargs = dict(small if quick else full)
    if seed is not None:
        kwargs["seed"] = seed
    return gen(**kwargs)
