"""Production KV-cache traces as request streams: readers, and prompts that reproduce their blocks.

Two public formats (JSON Lines, one request a line; the files are not in this repository):

- **Mooncake** (kvcache-ai/Mooncake, ``FAST25-release/traces/``: ``conversation_trace.jsonl``,
  ``synthetic_trace.jsonl``, ``toolagent_trace.jsonl``): ``timestamp`` (ms since the trace start),
  ``input_length``, ``output_length`` (tokens), ``hash_ids`` (one id per 512-token block of the prompt,
  the last one partial; an id stands for the block and everything before it).
- **Qwen-Bailian** (alibaba-edu/qwen-bailian-usagetraces-anon, ``qwen_*_blksz_16.jsonl``): ``chat_id``,
  ``parent_chat_id`` (-1 for the first turn), ``timestamp`` (s), ``input_length``, ``output_length``,
  ``turn``, ``type`` (text, search, image, file), ``hash_ids`` (16-token blocks).

A malformed line raises ``TraceError`` naming the file and line. ``trace_workload`` turns records into
chat requests: trace block id ``b`` always becomes the same text of ``block_tokens / token_scale``
tokens (4 ASCII bytes a token, as the approximate tokenizer of the gateway and the simulator count
them), a prompt is the text of its ids in order (the last block cut to the record's length), and the
message is laid out so that the chat template's head fills exactly one 16-token block: every trace
block then starts on a block boundary of the replicas, and two prompts share exactly the blocks whose
ids they share (``token_scale`` dividing the trace's block into whole 16-token blocks; otherwise
sharing is kept to the nearest block below). Arrivals are the trace's own times (``Request.at``);
``token_scale`` k also divides output lengths, for replays at a fraction of the real token counts
(the simulator's ``--token-scale k`` scales its costs to match). Pure, no I/O but reading the file.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from xxhash import xxh3_128_hexdigest

from bench import workloads

# Bytes of the simulator's chat template before the user's content ("<|user|>\n").
_TEMPLATE_HEAD = len(b"<|user|>\n")
_BLOCK = 16  # tokens per block of the replicas (and of the gateway's index)


class TraceError(ValueError):
    """A trace line that cannot be read (the message names the file and the line)."""


@dataclass(frozen=True, slots=True)
class TraceFormat:
    name: str
    block_tokens: int  # tokens per trace block
    time_unit_s: float  # seconds per unit of ``timestamp``


MOONCAKE = TraceFormat("mooncake", 512, 0.001)
BAILIAN = TraceFormat("bailian", 16, 1.0)
FORMATS = {f.name: f for f in (MOONCAKE, BAILIAN)}


@dataclass(frozen=True, slots=True)
class TraceRecord:
    """One request of a trace, in seconds and tokens."""

    at_s: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    chat_id: int | None = None  # Bailian only
    parent_chat_id: int | None = None  # Bailian: the previous turn (None for a first turn)
    turn: int = 1
    kind: str = "text"


def _int(obj: dict[str, Any], key: str, minimum: int = 0) -> int:
    v = obj.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise ValueError(f"'{key}' must be an integer >= {minimum}, got {v!r}")
    return v


def _parse(obj: Any, fmt: TraceFormat) -> TraceRecord:
    if not isinstance(obj, dict):
        raise ValueError("a line must be a JSON object")
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts) or ts < 0:
        raise ValueError(f"'timestamp' must be a non-negative number, got {ts!r}")
    inp, out = _int(obj, "input_length", 1), _int(obj, "output_length", 0)
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not all(type(h) is int and h >= 0 for h in ids):
        raise ValueError("'hash_ids' must be a list of non-negative integers")
    if len(ids) != math.ceil(inp / fmt.block_tokens):
        raise ValueError(
            f"'hash_ids' has {len(ids)} ids for {inp} tokens: a {fmt.name} block is {fmt.block_tokens} tokens"
        )
    rec = TraceRecord(ts * fmt.time_unit_s, inp, out, tuple(ids))
    if fmt is BAILIAN:
        chat, parent = _int(obj, "chat_id"), obj.get("parent_chat_id", -1)
        if isinstance(parent, bool) or not isinstance(parent, int) or parent < -1:
            raise ValueError(f"'parent_chat_id' must be an integer >= -1, got {parent!r}")
        kind = obj.get("type", "text")
        if not isinstance(kind, str):
            raise ValueError(f"'type' must be a string, got {kind!r}")
        turn = _int(obj, "turn", 1) if "turn" in obj else 1
        rec = TraceRecord(
            rec.at_s, inp, out, rec.hash_ids, chat, None if parent == -1 else parent, turn, kind
        )
    return rec


def read_lines(
    lines: Iterable[str | bytes], fmt: TraceFormat, source: str = "<trace>"
) -> Iterator[TraceRecord]:
    """Records of ``lines`` (blank lines skipped); ``TraceError`` at the first bad one."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield _parse(orjson.loads(line), fmt)
        except (orjson.JSONDecodeError, ValueError) as exc:
            raise TraceError(f"{source}:{n}: {exc}") from None


def read_trace(path: str | Path, fmt: TraceFormat, limit: int | None = None) -> list[TraceRecord]:
    """The first ``limit`` records of a trace file (all without a limit), sorted by arrival."""
    out: list[TraceRecord] = []
    with open(path, "rb") as f:
        for rec in read_lines(f, fmt, str(path)):
            out.append(rec)
            if limit is not None and len(out) >= limit:
                break
    out.sort(key=lambda r: r.at_s)  # stable: equal times keep the file's order
    return out


def block_text(block_id: int, tokens: int, salt: str = "") -> str:
    """The text of one trace block: ``4 * tokens`` ASCII bytes, a function of the id (and salt) only."""
    n = 4 * tokens
    head = f"<{block_id:x}>"
    digest = xxh3_128_hexdigest(f"{salt}|{block_id}".encode())
    body = (digest * (n // len(digest) + 1))[: max(0, n - len(head))]
    return (head + body)[:n]


@dataclass(frozen=True, slots=True)
class Scale:
    """How a trace is replayed: its block size in simulated tokens, and the token scale."""

    fmt: TraceFormat
    token_scale: float = 1.0

    def __post_init__(self) -> None:
        if not self.token_scale > 0 or self.fmt.block_tokens / self.token_scale < 1:
            raise ValueError(f"token_scale must be in (0, {self.fmt.block_tokens}]")

    @property
    def block_tokens(self) -> int:
        """Simulated tokens of one trace block."""
        return max(1, round(self.fmt.block_tokens / self.token_scale))

    @property
    def exact(self) -> bool:
        """True when a trace block is a whole number of the replicas' blocks (sharing is exact)."""
        return self.block_tokens % _BLOCK == 0

    def tokens(self, real: int) -> int:
        return max(1, round(real / self.token_scale))


def prompt_text(rec: TraceRecord, scale: Scale, salt: str = "") -> str:
    """The user message of one record: a one-block head, then one text per trace block."""
    bt = scale.block_tokens
    total = scale.tokens(rec.input_length)
    parts = [_HEAD]
    for i, h in enumerate(rec.hash_ids):
        left = total - i * bt
        if left <= 0:
            break
        parts.append(block_text(h, min(bt, left), salt))
    return "".join(parts)


# Fills the first replica block together with the template's ``<|user|>\n``, so that trace blocks start
# on block boundaries. Shared by every request: one block of every prompt always hits.
_HEAD = "trace replay: " + "-" * (4 * _BLOCK - _TEMPLATE_HEAD - len("trace replay: "))


def trace_workload(
    records: list[TraceRecord], scale: Scale, name: str, title: str, salt: str = ""
) -> workloads.Workload:
    """Chat requests at the records' arrival times. A Bailian turn waits for its previous turn (when that
    one is in the replay) to finish, as its user would."""
    out: list[workloads.Request] = []
    index: dict[int, int] = {}
    t0 = records[0].at_s if records else 0.0
    for rec in records:
        body = {
            "model": workloads.MODEL,
            "messages": [{"role": "user", "content": prompt_text(rec, scale, salt)}],
            "max_tokens": scale.tokens(max(1, rec.output_length)),
            "temperature": workloads.TEMPERATURE,
            "ignore_eos": True,
        }
        after = index.get(rec.parent_chat_id) if rec.parent_chat_id is not None else None
        if rec.chat_id is not None:
            index[rec.chat_id] = len(out)
        out.append(workloads.Request(body, after=after, at=rec.at_s - t0))
    return workloads.Workload(name, title, out)


def working_set_blocks(records: Iterable[TraceRecord], scale: Scale) -> int:
    """Replica blocks (16 tokens) of all distinct trace blocks: the KV a fleet needs to lose nothing."""
    per = math.ceil(scale.block_tokens / _BLOCK)
    return 1 + per * len({h for r in records for h in r.hash_ids})
