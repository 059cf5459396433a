"""vLLM KV-cache events: decode a published batch, track sequence numbers, apply to the exact index.

Wire format (vLLM's ``ZmqEventPublisher``): three frames, ``topic``, an 8-byte big-endian sequence
number and a msgpack ``EventBatch`` encoded as an array ``[ts, events, data_parallel_rank]``; each event
a map tagged by ``type``: ``BlockStored`` (``block_hashes``, ``parent_block_hash``, ``token_ids``,
``block_size``, ``lora_name``, ``extra_keys``, ``medium``, ``group_idx``...), ``BlockRemoved``
(``block_hashes``, ``medium``) and ``AllBlocksCleared``. Hashes are 64-bit integers by default, or
32-byte digests (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0``), which are folded to the same integers.

Pure: no sockets here (``gateway.fleet.kv_events`` owns them). Events carry token ids, which this module
never logs or keeps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from router.exact_index import ExactIndex
from router.vllm_hash import external

# Media whose blocks serve prefix hits directly (vLLM's CPU backend also says "GPU").
_PRIMARY_MEDIA = (None, "GPU")


@dataclass(frozen=True, slots=True)
class Stored:
    block_hashes: tuple[int, ...]
    parent: int | None
    block_size: int
    num_tokens: int
    salted: bool  # the first block carries a cache_salt among its extra keys
    lora: bool
    medium: str | None
    group: int | None


@dataclass(frozen=True, slots=True)
class Removed:
    block_hashes: tuple[int, ...]
    medium: str | None
    group: int | None


@dataclass(frozen=True, slots=True)
class Cleared:
    pass


Event = Stored | Removed | Cleared


@dataclass(frozen=True, slots=True)
class Batch:
    ts: float
    events: tuple[Event, ...]
    dp_rank: int | None


class DecodeError(ValueError):
    """A frame that is not a vLLM event batch."""


def _h(value: Any) -> int:
    if isinstance(value, int):
        return value
    if isinstance(value, bytes | bytearray):
        return external(bytes(value))
    raise DecodeError(f"block hash of type {type(value).__name__}")


def _event(raw: Any) -> Event | None:
    if isinstance(raw, dict):
        kind = raw.get("type")
        get = raw.get
    elif isinstance(raw, list | tuple) and raw and isinstance(raw[0], str):  # array_like encoders
        kind, fields = raw[0], raw[1:]
        names = {
            "BlockStored": (
                "block_hashes",
                "parent_block_hash",
                "token_ids",
                "block_size",
                "lora_id",
                "medium",
            ),
            "BlockRemoved": ("block_hashes", "medium"),
        }.get(kind, ())
        mapping = dict(zip(names, fields, strict=False))
        get = mapping.get
    else:
        raise DecodeError("event is neither a map nor a tagged array")
    if kind == "BlockStored":
        hashes = tuple(_h(x) for x in get("block_hashes") or ())
        parent = get("parent_block_hash")
        extra = get("extra_keys") or ()
        first = extra[0] if extra else None
        return Stored(
            block_hashes=hashes,
            parent=None if parent is None else _h(parent),
            block_size=int(get("block_size") or 0),
            num_tokens=len(get("token_ids") or ()),
            salted=bool(first),
            lora=get("lora_name") is not None or get("lora_id") is not None,
            medium=get("medium"),
            group=get("group_idx"),
        )
    if kind == "BlockRemoved":
        return Removed(tuple(_h(x) for x in get("block_hashes") or ()), get("medium"), get("group_idx"))
    if kind == "AllBlocksCleared":
        return Cleared()
    return None  # an event kind this gateway does not know: ignored


def decode_batch(payload: bytes) -> Batch:
    import msgpack  # the 'precise' extra: imported only where events are decoded

    try:
        raw = msgpack.unpackb(payload, raw=False, strict_map_key=False)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as exc:
        raise DecodeError(f"not msgpack: {exc}") from exc
    if isinstance(raw, dict):
        ts, events, rank = raw.get("ts"), raw.get("events"), raw.get("data_parallel_rank")
    elif isinstance(raw, list | tuple) and len(raw) >= 2:
        ts, events = raw[0], raw[1]
        rank = raw[2] if len(raw) > 2 else None
    else:
        raise DecodeError("batch is neither [ts, events, rank] nor a map")
    if not isinstance(events, list | tuple):
        raise DecodeError("batch events is not a list")
    decoded = tuple(e for e in map(_event, events) if e is not None)
    return Batch(float(ts or 0.0), decoded, rank)


def decode_seq(frame: bytes) -> int:
    if len(frame) != 8:
        raise DecodeError(f"sequence frame of {len(frame)} bytes")
    return int.from_bytes(frame, "big", signed=True)


# -- sequence numbers -----------------------------------------------------------------------------------
class SeqVerdict(Enum):
    APPLY = "apply"  # the next batch in order
    FIRST = "first"  # first batch seen from this topic (seq > 0: earlier batches were missed)
    GAP = "gap"  # batches between expected and this one were lost
    RESTART = "restart"  # the sequence went back with a newer time stamp: the replica restarted
    DUPLICATE = "duplicate"  # already applied (a replay overlapping live batches)


@dataclass(slots=True)
class SeqTracker:
    """Expected next sequence number of one topic, and the time stamp of the last batch applied.

    Live batches arrive in order on the SUB socket, so a sequence number below the expected one is
    either a batch already applied (live batches queued while a replay was served) or the first batches
    of a restarted publisher, whose numbering starts again at 0 (its batch 0 may itself be lost). The
    batch time stamp tells them apart: a restarted replica publishes later than anything applied.
    """

    expected: int | None = None
    last_ts: float = float("-inf")
    gaps: int = 0
    restarts: int = 0

    def check(self, seq: int, ts: float) -> SeqVerdict:
        if self.expected is None:
            return SeqVerdict.FIRST
        if seq == self.expected:
            return SeqVerdict.APPLY
        if seq > self.expected:
            self.gaps += 1
            return SeqVerdict.GAP
        if ts > self.last_ts:
            self.restarts += 1
            return SeqVerdict.RESTART
        return SeqVerdict.DUPLICATE

    def advance(self, seq: int, ts: float) -> None:
        self.expected = seq + 1
        self.last_ts = max(self.last_ts, ts)


# -- applying --------------------------------------------------------------------------------------------
@dataclass(slots=True)
class ApplyStats:
    stored: int = 0
    removed: int = 0
    cleared: int = 0
    skipped: int = 0  # other media, other KV groups, LoRA blocks
    block_size_mismatch: int = 0
    block_sizes: set[int] = field(default_factory=set)


def apply_events(
    index: ExactIndex,
    replica_id: str,
    events: Iterable[Event],
    engine_block_size: int | None = None,
    stats: ApplyStats | None = None,
) -> ApplyStats:
    """Apply one batch's events, in order, to ``replica_id``'s entries; the replica becomes live."""
    stats = stats or ApplyStats()
    index.mark_live(replica_id)
    for ev in events:
        if isinstance(ev, Stored):
            if ev.medium not in _PRIMARY_MEDIA or ev.group not in (None, 0) or ev.lora:
                stats.skipped += 1
                continue
            stats.block_sizes.add(ev.block_size)
            if engine_block_size is not None and ev.block_size != engine_block_size:
                stats.block_size_mismatch += 1
                continue
            index.stored(replica_id, ev.block_hashes)
            stats.stored += len(ev.block_hashes)
        elif isinstance(ev, Removed):
            if ev.medium not in _PRIMARY_MEDIA or ev.group not in (None, 0):
                stats.skipped += 1
                continue
            index.removed(replica_id, ev.block_hashes)
            stats.removed += len(ev.block_hashes)
        elif isinstance(ev, Cleared):
            index.cleared(replica_id)
            stats.cleared += 1
    return stats


def split_frames(frames: Sequence[bytes]) -> tuple[bytes, int, bytes]:
    """``(topic, seq, payload)`` of a published message."""
    if len(frames) != 3:
        raise DecodeError(f"expected 3 frames, got {len(frames)}")
    return bytes(frames[0]), decode_seq(frames[1]), bytes(frames[2])
