"""The OpenAI Files and Batches API over HTTP: thin handlers over ``gateway.batch``.

| route | operation |
|---|---|
| ``POST /v1/files`` | multipart upload (``purpose`` then ``file``), streamed into ``FileStore.upload`` |
| ``GET /v1/files`` | ``purpose``, ``limit`` (1-10,000), ``after``, ``order`` (``asc`` / ``desc``) |
| ``GET /v1/files/{file_id}``, ``.../content`` | the file object; its bytes (``FileResponse``: sendfile) |
| ``DELETE /v1/files/{file_id}`` | ``BatchService.delete_file`` (409 while a live batch reads it) |
| ``POST /v1/batches`` | ``BatchService.create`` |
| ``GET /v1/batches`` | ``after``, ``limit`` (1-100) |
| ``GET /v1/batches/{batch_id}``, ``POST .../cancel`` | retrieve, cancel |

The tenant comes from the same resolver as the inference routes (API key or trusted header), and only
ever names its own files and batches: another tenant's id is a 404. Every error is OpenAI's shape.
With ``batch.enabled`` off the routes exist and answer 404 ``batch_api_disabled``.

An upload is never held in memory: the middleware does not read its body ahead (``STREAMED_PATHS``);
the parts are read chunk by chunk, each within ``limits.body_timeout_s`` (a stalled upload is a 408,
not a held connection), and the file store cuts it off at ``batch.limits.max_file_bytes`` and the
tenant's quota. The ``openai`` client (httpx) writes the form fields before the file; a ``file`` part
before ``purpose``, a part after ``file``, or an unknown field is a 400 and leaves nothing stored.

A malformed body is a 400 ``invalid_multipart`` whatever is wrong with it: a part header line without a
colon, a control character or a non-UTF-8 byte in a header, a header line over aiohttp's 16 KiB, too many
headers in a part, no closing boundary. aiohttp raises ``BadHttpMessage`` (``InvalidHeader``,
``LineTooLong``) or ``ValueError`` for these, with the client's bytes in the message: the answer names the
fault in fixed words, and nothing is logged (it was once a 500 and a traceback holding those bytes). A
bad ``Content-Disposition`` makes aiohttp warn with the raw header (a ``RuntimeWarning`` on stderr, once
per distinct text: the client's bytes, and a warnings registry growing with each); those two warnings are
ignored (``quiet_multipart_warnings``), the part is refused on its own terms (no name: 400).
"""

from __future__ import annotations

import asyncio
import re
import warnings
from collections.abc import AsyncIterator

import orjson
from aiohttp import BodyPartReader, web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.multipart import BadContentDispositionHeader, BadContentDispositionParam

from gateway.batch.service import BatchService
from gateway.errors import GatewayError, error_response
from gateway.pipeline.parse import check_content_type, decode_json_object, read_body
from gateway.process.process import PROCESS

STREAMED_PATHS = frozenset({"/v1/files"})
"""POST paths whose body the handler streams (the middleware must not read it ahead)."""

_CHUNK = 1 << 16
_FIELD_BYTES = 256  # a form field (purpose) longer than this is not one we know
_MULTIPART_SLACK = 64 * 1024  # part headers and boundaries beyond the file's own bytes
_MAX_FILES_LISTED, _MAX_BATCHES_LISTED = 10_000, 100
_FIELD_NAME = re.compile(r"^[A-Za-z0-9_.\-\[\]]{1,64}$")  # a form field name we may echo back as ``param``


def quiet_multipart_warnings() -> None:
    """Ignore aiohttp's warnings about a bad ``Content-Disposition`` (their text is the client's header)."""
    warnings.filterwarnings("ignore", category=BadContentDispositionHeader)
    warnings.filterwarnings("ignore", category=BadContentDispositionParam)


def _malformed(exc: Exception) -> GatewayError:
    """A 400 for what aiohttp's multipart reader refused, in fixed words (its message holds the bytes)."""
    if isinstance(exc, LineTooLong):
        message = "malformed multipart body: a part header line is too long"
    elif isinstance(exc, BadHttpMessage):
        message = (
            "malformed multipart body: a part header is invalid (a line without a colon, a control "
            "character, too many headers)"
        )
    else:
        message = "malformed multipart body"
    return _bad(message, code="invalid_multipart")


def _unknown_field(name: str | None) -> GatewayError:
    if name is None:
        return _bad(
            "a form part without a name (Content-Disposition: form-data; name=...)",
            code="invalid_multipart",
        )
    shown = name if _FIELD_NAME.match(name) else None
    return _bad(
        f"unsupported form field {shown!r}" if shown else "unsupported form field",
        shown,
        "unknown_parameter",
    )


def _service(request: web.Request) -> tuple[BatchService, str]:
    """The batch service and the caller's tenant id (401 without a valid key, 404 when batches are off)."""
    process = request.app[PROCESS]
    tenant = process.state.tenants.resolve(request.headers, request.remote)
    if process.batch is None:
        raise GatewayError(
            404,
            "the Files and Batches API is not enabled on this gateway (policy: batch.enabled)",
            code="batch_api_disabled",
        )
    return process.batch, tenant.id


def _json(data: object, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(data), content_type="application/json")


def _bad(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


def _int_param(request: web.Request, name: str, default: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(f"'{name}' must be an integer", name) from None
    if not 1 <= value <= high:
        raise _bad(f"'{name}' must be between 1 and {high}", name)
    return value


# -- files ------------------------------------------------------------------------------------------------


async def _chunks(part: BodyPartReader, idle_s: float) -> AsyncIterator[bytes]:
    """The part's bytes as they arrive; 408 when none arrive for ``idle_s``."""
    while True:
        try:
            async with asyncio.timeout(idle_s):
                chunk = await part.read_chunk(_CHUNK)
        except TimeoutError:
            raise GatewayError(408, "upload not received in time", code="request_timeout") from None
        except (BadHttpMessage, ValueError) as exc:
            raise _malformed(exc) from None
        if not chunk:
            return
        yield chunk


async def _field(part: BodyPartReader, idle_s: float) -> str:
    data = b""
    async for chunk in _chunks(part, idle_s):
        data += chunk
        if len(data) > _FIELD_BYTES:
            raise _bad(f"form field '{part.name}' is longer than {_FIELD_BYTES} bytes", part.name)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(f"form field '{part.name}' is not UTF-8", part.name) from None


async def upload_file(request: web.Request) -> web.StreamResponse:
    """``POST /v1/files``. The body is streamed: any error ends the connection (its rest is unread)."""
    try:
        return await _upload(request)
    except GatewayError as err:
        resp = error_response(err)
        resp.force_close()
        return resp


async def _upload(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    limits, idle = service.files.limits, request.app[PROCESS].state.policy.limits.body_timeout_s
    mime = request.content_type
    if mime != "multipart/form-data":
        raise GatewayError(
            415,
            f"Content-Type must be multipart/form-data, got {mime or 'nothing'}",
            code="unsupported_media_type",
        )
    declared = request.content_length
    if declared is not None and declared > limits.max_file_bytes + _MULTIPART_SLACK:
        raise GatewayError(
            413, f"file exceeds the limit of {limits.max_file_bytes} bytes", code="file_too_large"
        )
    try:
        reader = await request.multipart()
    except (AssertionError, ValueError) as exc:
        raise _malformed(exc) from None
    purpose: str | None = None
    stored = None
    try:
        while True:
            try:
                part = await reader.next()
            except (BadHttpMessage, ValueError) as exc:
                raise _malformed(exc) from None
            if part is None:
                break
            if stored is not None or not isinstance(part, BodyPartReader):
                raise _bad("the 'file' part must be the last part of the form", "file")
            if part.name == "purpose":
                purpose = await _field(part, idle)
            elif part.name == "file":
                if purpose is None:
                    raise _bad("'purpose' must come before 'file' in the form", "purpose")
                stored = await service.files.upload(tenant, part.filename or "", purpose, _chunks(part, idle))
            else:
                raise _unknown_field(part.name)
    except BaseException:
        if stored is not None:
            await service.files.delete(tenant, stored.id)
        raise
    if stored is None:
        raise _bad("'file' is a required form field", "file", "missing_required_parameter")
    return _json(stored.to_openai())


async def list_files(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    order = request.query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise _bad("'order' must be 'asc' or 'desc'", "order")
    limit = _int_param(request, "limit", _MAX_FILES_LISTED, _MAX_FILES_LISTED)
    objs, more = await service.files.list(
        tenant,
        purpose=request.query.get("purpose"),
        after=request.query.get("after"),
        limit=limit,
        order=order,
    )
    data = [o.to_openai() for o in objs]
    return _json(
        {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }
    )


def _no_file(file_id: str) -> GatewayError:
    return GatewayError(404, f"no file found with id {file_id!r}", param="file_id", code="file_not_found")


async def retrieve_file(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    file_id = request.match_info["file_id"]
    found = await service.files.get(tenant, file_id)
    if found is None:
        raise _no_file(file_id)
    return _json(found.to_openai())


async def file_content(request: web.Request) -> web.StreamResponse:
    service, tenant = _service(request)
    file_id = request.match_info["file_id"]
    path = service.files.content_path(tenant, file_id)
    if path is None:
        raise _no_file(file_id)
    return web.FileResponse(path, headers={"Content-Type": "application/octet-stream"})


async def delete_file(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    return _json(await service.delete_file(tenant, request.match_info["file_id"]))


# -- batches ----------------------------------------------------------------------------------------------


async def create_batch(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    check_content_type(request)
    body = decode_json_object(await read_body(request, request.app[PROCESS].state.policy.limits))
    return _json(await service.create(tenant, body))


async def list_batches(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    limit = _int_param(request, "limit", 20, _MAX_BATCHES_LISTED)
    return _json(await service.list(tenant, after=request.query.get("after"), limit=limit))


async def retrieve_batch(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    return _json(await service.retrieve(tenant, request.match_info["batch_id"]))


async def cancel_batch(request: web.Request) -> web.Response:
    service, tenant = _service(request)
    return _json(await service.cancel(tenant, request.match_info["batch_id"]))


def add_batch_routes(app: web.Application) -> None:
    app.router.add_post("/v1/files", upload_file)
    app.router.add_get("/v1/files", list_files)
    app.router.add_get("/v1/files/{file_id}", retrieve_file)
    app.router.add_delete("/v1/files/{file_id}", delete_file)
    app.router.add_get("/v1/files/{file_id}/content", file_content)
    app.router.add_post("/v1/batches", create_batch)
    app.router.add_get("/v1/batches", list_batches)
    app.router.add_get("/v1/batches/{batch_id}", retrieve_batch)
    app.router.add_post("/v1/batches/{batch_id}/cancel", cancel_batch)
