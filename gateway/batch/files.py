"""OpenAI-compatible file store for batches: uploads (``purpose="batch"``) and result files.

One directory per tenant under ``batch.dir``, named by a digest of the tenant id (no tenant id reaches
a path, whatever characters it holds), so a tenant can only ever name its own files: another tenant's
file id is simply not found (404, never 403, so ids leak nothing). Each file is its content
(``<id>``) and its ``file`` object (``<id>.json``). Both are written to a temporary name, fsynced and
renamed; the object is renamed last and is the commit point, so a crash mid-upload leaves no listed
half file. Several pods share files by pointing ``batch.dir`` at one shared volume: the same code, no
coordination needed (every write is a rename of a file only one writer produces).

Limits (``batch.limits``): ``max_file_bytes`` per upload and ``max_tenant_bytes`` / ``max_tenant_files``
per tenant are checked while the upload streams, so an oversized upload is cut off at the limit and
never held in memory or kept on disk. A tenant's result files count towards its quota but are always
written (a finished batch never loses its results to a full quota; the next upload is refused).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import re
import time
import unicodedata
from collections.abc import AsyncIterable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from config.batch import BatchLimitsConfig
from gateway.batch.objects import new_file_id
from gateway.errors import GatewayError

UPLOAD_PURPOSES = frozenset({"batch"})
RESULT_PURPOSE = "batch_output"
_FILE_ID = re.compile(r"^file-[0-9a-f]{32}$")
# Not in a filename: controls (C0, DEL, C1), format characters (bidi overrides that disguise a name),
# surrogates (a non-UTF-8 byte aiohttp kept as one: unencodable in the JSON of the file object),
# private use, line and paragraph separators.
_NOT_IN_FILENAMES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def printable(name: str) -> bool:
    return not any(unicodedata.category(c) in _NOT_IN_FILENAMES for c in name)


@dataclass(frozen=True, slots=True)
class FileObject:
    id: str
    bytes: int
    created_at: int
    filename: str
    purpose: str

    def to_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "file",
            "bytes": self.bytes,
            "created_at": self.created_at,
            "filename": self.filename,
            "purpose": self.purpose,
            "status": "processed",
            "expires_at": None,
            "status_details": None,
        }


class FileStore:
    def __init__(self, root: str | Path, limits: BatchLimitsConfig, clock: Callable[[], float] = time.time):
        self.root = Path(root)
        self.limits = limits
        self.clock = clock

    def _dir(self, tenant: str) -> Path:
        return self.root / hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def content_path(self, tenant: str, file_id: str) -> Path | None:
        """Where a tenant's file's content is (to serve or read it), or None if it has no such file."""
        if not _FILE_ID.match(file_id):
            return None
        d = self._dir(tenant)
        if not (d / f"{file_id}.json").is_file():
            return None
        return d / file_id

    async def get(self, tenant: str, file_id: str) -> FileObject | None:
        if not _FILE_ID.match(file_id):
            return None
        return await asyncio.to_thread(_read_object, self._dir(tenant) / f"{file_id}.json")

    async def upload(
        self, tenant: str, filename: str, purpose: str, chunks: AsyncIterable[bytes]
    ) -> FileObject:
        """Store an upload streamed as ``chunks`` under a new id, within the limits."""
        lim = self.limits
        if purpose not in UPLOAD_PURPOSES:
            raise GatewayError(
                400,
                f"purpose must be 'batch' (this gateway stores files for batches), got {purpose!r}",
                param="purpose",
                code="invalid_purpose",
            )
        if not filename or len(filename) > lim.max_filename_chars or not printable(filename):
            raise GatewayError(
                400,
                f"filename must be 1 to {lim.max_filename_chars} printable characters",
                param="file",
                code="invalid_filename",
            )
        d = self._dir(tenant)
        used_bytes, used_files = await asyncio.to_thread(_usage, d)
        if used_files >= lim.max_tenant_files:
            raise GatewayError(
                429,
                f"a tenant may keep at most {lim.max_tenant_files} files; delete some first",
                code="too_many_files",
            )
        room = min(lim.max_file_bytes, lim.max_tenant_bytes - used_bytes)

        async def bounded() -> AsyncIterable[bytes]:
            size = 0
            async for chunk in chunks:
                size += len(chunk)
                if size > room:
                    if size > lim.max_file_bytes:
                        raise GatewayError(
                            413,
                            f"file exceeds the limit of {lim.max_file_bytes} bytes",
                            code="file_too_large",
                        )
                    raise GatewayError(
                        413,
                        f"the tenant's files would exceed {lim.max_tenant_bytes} bytes; delete some first",
                        code="storage_quota_exceeded",
                    )
                yield chunk

        return await self._write(d, new_file_id(), filename, purpose, bounded())

    async def write_result(
        self, tenant: str, file_id: str, filename: str, lines: AsyncIterable[bytes]
    ) -> FileObject:
        """Write (or rewrite, on a resumed finalization) a batch's result file: one JSON line per item."""

        async def with_newlines() -> AsyncIterable[bytes]:
            async for line in lines:
                yield line + b"\n"

        return await self._write(self._dir(tenant), file_id, filename, RESULT_PURPOSE, with_newlines())

    async def _write(
        self, d: Path, file_id: str, filename: str, purpose: str, chunks: AsyncIterable[bytes]
    ) -> FileObject:
        if not _FILE_ID.match(file_id):
            raise ValueError(f"not a file id: {file_id!r}")
        await asyncio.to_thread(d.mkdir, parents=True, exist_ok=True)
        part = d / f".{file_id}.{os.getpid()}.part"
        f: BinaryIO = await asyncio.to_thread(open, part, "wb")  # closed by _finish / _discard
        size = 0
        try:
            buf = bytearray()
            async for chunk in chunks:
                buf += chunk
                size += len(chunk)
                if len(buf) >= 1 << 20:
                    await asyncio.to_thread(f.write, bytes(buf))
                    buf.clear()
            await asyncio.to_thread(_finish, f, bytes(buf))
        except BaseException:
            await asyncio.to_thread(_discard, f, part)
            raise
        obj = FileObject(file_id, size, int(self.clock()), filename, purpose)
        await asyncio.to_thread(_commit, part, d / file_id, d / f"{file_id}.json", obj)
        return obj

    async def list(
        self,
        tenant: str,
        *,
        purpose: str | None = None,
        after: str | None = None,
        limit: int = 10_000,
        order: str = "desc",
    ) -> tuple[list[FileObject], bool]:
        """A page of the tenant's files, newest first (``order="desc"``), after the file ``after``; and
        whether more follow."""
        objs = await asyncio.to_thread(_objects, self._dir(tenant))
        objs.sort(key=lambda o: (o.created_at, o.id), reverse=order == "desc")
        if purpose is not None:
            objs = [o for o in objs if o.purpose == purpose]
        if after is not None:
            ids = [o.id for o in objs]
            objs = objs[ids.index(after) + 1 :] if after in ids else []
        return objs[:limit], len(objs) > limit

    async def delete(self, tenant: str, file_id: str) -> bool:
        if not _FILE_ID.match(file_id):
            return False
        return await asyncio.to_thread(_delete, self._dir(tenant), file_id)


def _read_object(path: Path) -> FileObject | None:
    try:
        return FileObject(**orjson.loads(path.read_bytes()))
    except FileNotFoundError:
        return None


def _objects(d: Path) -> list[FileObject]:
    if not d.is_dir():
        return []
    out = []
    for entry in os.scandir(d):
        if entry.name.endswith(".json") and not entry.name.startswith("."):
            obj = _read_object(Path(entry.path))
            if obj is not None:
                out.append(obj)
    return out


def _usage(d: Path) -> tuple[int, int]:
    """Bytes and number of the files (uploads and results) kept in a tenant's directory."""
    if not d.is_dir():
        return 0, 0
    total = count = 0
    for entry in os.scandir(d):
        if entry.name.startswith("."):
            continue
        if entry.name.endswith(".json"):
            count += 1
        else:
            total += entry.stat().st_size
    return total, count


def _finish(f: BinaryIO, tail: bytes) -> None:
    f.write(tail)
    f.flush()
    os.fsync(f.fileno())
    f.close()


def _discard(f: BinaryIO, part: Path) -> None:
    f.close()
    with contextlib.suppress(FileNotFoundError):
        part.unlink()


def _commit(part: Path, content: Path, meta: Path, obj: FileObject) -> None:
    os.replace(part, content)
    tmp = meta.with_name(f".{meta.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(orjson.dumps(asdict(obj)))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, meta)


def _delete(d: Path, file_id: str) -> bool:
    meta = d / f"{file_id}.json"
    try:
        meta.unlink()  # the object first: from here on the file does not exist
    except FileNotFoundError:
        return False
    with contextlib.suppress(FileNotFoundError):
        (d / file_id).unlink()
    return True
