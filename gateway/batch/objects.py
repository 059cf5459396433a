"""The Batch API's objects: a batch's record and status machine, ids, and the lines of its result files.

Shapes follow OpenAI's (``openai.types.Batch``, the output and error file lines) so the real ``openai``
client reads them unchanged. Ids of everything a batch produces are derived from the batch id, so a
batch resumed after a crash writes the same line ids and the same result files, never a second copy.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

import orjson
import xxhash

ENDPOINTS: dict[str, str] = {
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/v1/embeddings": "embeddings",
}
"""Batch endpoints and the router's name of each."""

STATUSES = (
    "validating",
    "failed",
    "in_progress",
    "finalizing",
    "completed",
    "expired",
    "cancelling",
    "cancelled",
)
TERMINAL = frozenset({"failed", "completed", "expired", "cancelled"})
ACTIVE = frozenset(STATUSES) - TERMINAL
CANCELLABLE = frozenset({"validating", "in_progress"})
_NEXT: dict[str, frozenset[str]] = {
    "validating": frozenset({"in_progress", "failed", "cancelling", "expired"}),
    "in_progress": frozenset({"finalizing", "failed", "cancelling", "expired"}),
    "finalizing": frozenset({"completed"}),
    "cancelling": frozenset({"cancelled"}),
}
"""Allowed transitions. ``expired`` and ``cancelled`` keep the partial results, as OpenAI does."""


def can_move(frm: str, to: str) -> bool:
    return to in _NEXT.get(frm, frozenset())


def new_batch_id() -> str:
    return f"batch_{uuid.uuid4().hex}"


def new_file_id() -> str:
    return f"file-{uuid.uuid4().hex}"


def _digest(*parts: str) -> str:
    return xxhash.xxh3_128_hexdigest("\x00".join(parts).encode("utf-8", "surrogatepass"))


def line_id(batch_id: str, custom_id: str) -> str:
    """The output line's ``id``, also the request id of the line's request (idempotent billing)."""
    return f"batch_req_{_digest(batch_id, custom_id)}"


def result_file_id(batch_id: str, kind: str) -> str:
    """``kind`` ``output`` or ``error``: the same id however often the batch is finalized."""
    return f"file-{_digest(batch_id, kind)}"


@dataclass(slots=True)
class BatchRecord:
    """What the store keeps of a batch. ``request_counts`` are derived from the recorded lines while
    the batch runs and frozen into ``final_counts`` when it ends (its line results are then dropped)."""

    id: str
    tenant: str
    endpoint: str
    input_file_id: str
    completion_window: str
    status: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None = None
    model: str | None = None
    total: int = 0
    errors: list[dict[str, Any]] | None = None
    output_file_id: str | None = None
    error_file_id: str | None = None
    usage: dict[str, Any] | None = None
    final_counts: tuple[int, int] | None = None  # (completed, failed) once terminal
    in_progress_at: int | None = None
    finalizing_at: int | None = None
    completed_at: int | None = None
    failed_at: int | None = None
    expired_at: int | None = None
    cancelling_at: int | None = None
    cancelled_at: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> BatchRecord:
        kw = {f.name: d[f.name] for f in fields(cls) if f.name in d}
        if kw.get("final_counts") is not None:
            kw["final_counts"] = tuple(kw["final_counts"])
        return cls(**kw)

    def moved(self, to: str, now: int, **changes: Any) -> BatchRecord:
        """A copy in status ``to`` with its ``<to>_at`` set; raises on a transition the machine forbids."""
        if not can_move(self.status, to):
            raise ValueError(f"batch {self.id}: {self.status} -> {to} is not a transition")
        d = self.to_dict()
        d.update(changes, status=to)
        d[f"{to}_at"] = now
        return BatchRecord.from_dict(d)

    def to_openai(self, completed: int, failed: int) -> dict[str, Any]:
        """The OpenAI ``batch`` object; ``completed``/``failed`` count the lines answered so far."""
        if self.final_counts is not None:
            completed, failed = self.final_counts
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "model": self.model,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "in_progress_at": self.in_progress_at,
            "expires_at": self.expires_at,
            "finalizing_at": self.finalizing_at,
            "completed_at": self.completed_at,
            "failed_at": self.failed_at,
            "expired_at": self.expired_at,
            "cancelling_at": self.cancelling_at,
            "cancelled_at": self.cancelled_at,
            "request_counts": {"total": self.total, "completed": completed, "failed": failed},
            "usage": self.usage,
            "metadata": self.metadata,
        }


@dataclass(frozen=True, slots=True)
class LineResult:
    """One answered line: ``record`` is its result-file line (JSON bytes), ``ok`` sends it to the output
    file (a 2xx answer) rather than the error file."""

    custom_id: str
    line: int
    ok: bool
    record: bytes


def batch_error(
    code: str, message: str, *, line: int | None = None, param: str | None = None
) -> dict[str, Any]:
    """One entry of a batch's ``errors.data`` (``line`` is 1-based, as OpenAI's)."""
    return {"code": code, "message": message, "param": param, "line": line}


def answered(batch_id: str, custom_id: str, line: int, status: int, body: Any) -> LineResult:
    """A line the fleet answered (any status: 2xx goes to the output file, the rest to the error file
    with the answer's body, as OpenAI does)."""
    rid = line_id(batch_id, custom_id)
    rec = {
        "id": rid,
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": rid, "body": body},
        "error": None,
    }
    return LineResult(custom_id, line, 200 <= status < 300, orjson.dumps(rec))


def unanswered(batch_id: str, custom_id: str, line: int, code: str, message: str) -> LineResult:
    """A line without an answer (``batch_expired``, ``batch_cancelled``, ``request_failed``)."""
    rec = {
        "id": line_id(batch_id, custom_id),
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
    return LineResult(custom_id, line, False, orjson.dumps(rec))
