"""The batch file store on a real directory: OpenAI file objects, tenant isolation, named limits; and\nmalformed multipart uploads sent byte for byte to a real gateway process."""

from __future__ import annotations

import os
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import orjson
import pytest
import yaml

from bench.procs import running, start_gateway, start_sim
from config.batch import BatchLimitsConfig
from gateway.batch.files import FileStore
from gateway.batch.objects import result_file_id
from gateway.errors import GatewayError


async def chunks(data: bytes, size: int = 1000) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*") if p.is_file() and p.name.startswith("."))


async def test_upload_get_list_content_delete(tmp_path: Path) -> None:
    clock = iter(range(1000, 2000))
    store = FileStore(tmp_path, BatchLimitsConfig(), clock=lambda: next(clock))
    data = b'{"custom_id": "a"}\n' * 500
    a = await store.upload("acme", "input.jsonl", "batch", chunks(data))
    b = await store.upload("acme", "second.jsonl", "batch", chunks(b"x\n"))
    obj = a.to_openai()
    assert obj == {
        "id": a.id,
        "object": "file",
        "bytes": len(data),
        "created_at": 1000,
        "filename": "input.jsonl",
        "purpose": "batch",
        "status": "processed",
        "expires_at": None,
        "status_details": None,
    }
    assert a.id.startswith("file-") and len(a.id) == 37 and a.id != b.id
    assert await store.get("acme", a.id) == a
    path = store.content_path("acme", a.id)
    assert path is not None and path.read_bytes() == data
    page, more = await store.list("acme")
    assert [f.id for f in page] == [b.id, a.id] and not more  # newest first
    page, more = await store.list("acme", limit=1)
    assert [f.id for f in page] == [b.id] and more
    page, more = await store.list("acme", after=b.id, limit=1)
    assert [f.id for f in page] == [a.id] and not more
    assert [f.id for f in (await store.list("acme", order="asc"))[0]] == [a.id, b.id]
    assert (await store.list("acme", purpose="batch_output"))[0] == []
    assert await store.delete("acme", a.id)
    assert await store.get("acme", a.id) is None and store.content_path("acme", a.id) is None
    assert not await store.delete("acme", a.id)
    assert leftovers(tmp_path) == []


async def test_a_tenant_sees_only_its_own_files(tmp_path: Path) -> None:
    store = FileStore(tmp_path, BatchLimitsConfig())
    mine = await store.upload("acme", "in.jsonl", "batch", chunks(b"a\n"))
    for other in ("globex", "acme ", "../acme", "ACME"):
        assert await store.get(other, mine.id) is None
        assert store.content_path(other, mine.id) is None
        assert not await store.delete(other, mine.id)
        assert (await store.list(other))[0] == []
    assert await store.get("acme", mine.id) == mine
    for bad in ("../x", f"{mine.id}/../{mine.id}", mine.id + ".json", "file-" + "A" * 32, ""):
        assert await store.get("acme", bad) is None and store.content_path("acme", bad) is None
    # whatever the tenant id, its directory is one digest-named child of the root
    await store.upload("../../escape", "in.jsonl", "batch", chunks(b"a\n"))
    assert all(p.parent == tmp_path for p in tmp_path.iterdir()) and not (tmp_path.parent / "escape").exists()
    assert {len(p.name) for p in tmp_path.iterdir()} == {32}


async def test_limits_cut_an_upload_off_and_leave_nothing_behind(tmp_path: Path) -> None:
    lim = BatchLimitsConfig(max_file_bytes=10_000, max_tenant_bytes=15_000, max_tenant_files=3)
    store = FileStore(tmp_path, lim)
    with pytest.raises(GatewayError) as err:
        await store.upload("acme", "big.jsonl", "batch", chunks(b"x" * 10_001))
    assert (err.value.status, err.value.code) == (413, "file_too_large")
    assert (await store.list("acme"))[0] == [] and leftovers(tmp_path) == []
    await store.upload("acme", "a.jsonl", "batch", chunks(b"x" * 9000))
    with pytest.raises(GatewayError) as err:
        await store.upload("acme", "b.jsonl", "batch", chunks(b"x" * 7000))
    assert (err.value.status, err.value.code) == (413, "storage_quota_exceeded")
    await store.upload("globex", "b.jsonl", "batch", chunks(b"x" * 7000))  # quotas are per tenant
    await store.upload("acme", "c.jsonl", "batch", chunks(b"x"))
    await store.upload("acme", "d.jsonl", "batch", chunks(b"x"))
    with pytest.raises(GatewayError) as err:
        await store.upload("acme", "e.jsonl", "batch", chunks(b"x"))
    assert (err.value.status, err.value.code) == (429, "too_many_files")
    with pytest.raises(GatewayError) as err:
        await store.upload("globex", "x.jsonl", "fine-tune", chunks(b"x"))
    assert (err.value.status, err.value.param) == (400, "purpose")
    for name in ("", "a\nb", "n" * 256, "a\x7fb", "a\x85b", "a\u202egpj.exe", "a\udcffb"):
        with pytest.raises(GatewayError) as err:
            await store.upload("globex", name, "batch", chunks(b"x"))
        assert (err.value.status, err.value.code) == (400, "invalid_filename")
    assert leftovers(tmp_path) == []


async def test_result_files_are_rewritten_under_the_same_id(tmp_path: Path) -> None:
    store = FileStore(tmp_path, BatchLimitsConfig(max_tenant_bytes=1024, max_tenant_files=1))
    fid = result_file_id("batch_1", "output")

    async def lines(n: int) -> AsyncIterator[bytes]:
        for i in range(n):
            yield b'{"i": %d}' % i

    first = await store.write_result("acme", fid, "batch_1_output.jsonl", lines(3))
    again = await store.write_result(
        "acme", fid, "batch_1_output.jsonl", lines(200)
    )  # over quota: still written
    assert first.id == again.id == fid and again.purpose == "batch_output"
    path = store.content_path("acme", fid)
    assert path is not None and path.read_bytes().count(b"\n") == 200
    assert [f.id for f in (await store.list("acme"))[0]] == [fid]
    assert leftovers(tmp_path) == []


async def test_two_stores_on_one_shared_directory_see_the_same_files(tmp_path: Path) -> None:
    pod_a, pod_b = FileStore(tmp_path, BatchLimitsConfig()), FileStore(tmp_path, BatchLimitsConfig())
    up = await pod_a.upload("acme", "in.jsonl", "batch", chunks(b"line\n"))
    assert await pod_b.get("acme", up.id) == up
    assert await pod_b.delete("acme", up.id)
    assert await pod_a.get("acme", up.id) is None


async def test_a_failed_upload_stream_leaves_no_file(tmp_path: Path) -> None:
    store = FileStore(tmp_path, BatchLimitsConfig())

    async def broken() -> AsyncIterator[bytes]:
        yield b"x" * 5000
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        await store.upload("acme", "in.jsonl", "batch", broken())
    assert (await store.list("acme"))[0] == [] and leftovers(tmp_path) == []
    assert os.listdir(tmp_path)  # the tenant directory exists, empty of files


# -- malformed multipart over a real socket, against a real gateway process ---------------------------------

BOUNDARY = b"pgw-boundary"


def _part(headers: bytes, content: bytes) -> bytes:
    return b"--" + BOUNDARY + b"\r\n" + headers + b"\r\n\r\n" + content + b"\r\n"


_PURPOSE = _part(b'Content-Disposition: form-data; name="purpose"', b"batch")
_END = b"--" + BOUNDARY + b"--\r\n"


def _file(disposition: bytes) -> bytes:
    return _PURPOSE + _part(b"Content-Disposition: form-data; " + disposition, b"{}\n") + _END


# Each carries a marker (CLIENTBYTES0, ...) where the client's bytes are: no log line may hold one.
MALFORMED: dict[str, bytes] = {
    "a header line without a colon": _part(b'Content-Disposition form-data; name="CLIENTBYTES0"', b"batch")
    + _END,
    "a filename with \\x01": _file(b'name="file"; filename="CLIENTBYTES1-\x01.jsonl"'),
    "a field name with \\x7f": _part(b'Content-Disposition: form-data; name="CLIENTBYTES2\x7f"', b"batch")
    + _END,
    "a 200 KB part header": _part(
        b'Content-Disposition: form-data; name="purpose"\r\nX-CLIENTBYTES3: ' + b"A" * 200_000, b"batch"
    )
    + _END,
    "a 200 KB Content-Disposition": _file(
        b'name="file"; filename="CLIENTBYTES4' + b"A" * 200_000 + b'.jsonl"'
    ),
    "a NUL in a filename": _file(b'name="file"; filename="CLIENTBYTES5\x00.jsonl"'),
    "5,000 part headers": _part(
        b'Content-Disposition: form-data; name="purpose"\r\n'
        + b"\r\n".join(b"X-CLIENTBYTES6-%d: y" % i for i in range(5000)),
        b"batch",
    )
    + _END,
    "a filename that is not UTF-8": _file(b'name="file"; filename="CLIENTBYTES7-\xff.jsonl"'),
    "a field name that is not UTF-8": _part(
        b'Content-Disposition: form-data; name="CLIENTBYTES8\xff"', b"batch"
    )
    + _END,
    "a DEL in an encoded filename": _file(b"name=\"file\"; filename*=utf-8''CLIENTBYTES9%7f.jsonl"),
    "a C1 control in an encoded filename": _file(
        b"name=\"file\"; filename*=utf-8''CLIENTBYTES10%c2%85.jsonl"
    ),
    "a broken encoded filename": _file(b"name=\"file\"; filename*=utf-8''CLIENTBYTES11%01%ff.jsonl"),
    "a broken Content-Disposition": _part(b'Content-Disposition: ;;;"CLIENTBYTES12', b"batch") + _END,
    "a part without Content-Disposition": _part(b"X-CLIENTBYTES13: b", b"batch") + _END,
    "no closing boundary": _PURPOSE
    + _part(b'Content-Disposition: form-data; name="file"; filename="CLIENTBYTES14"', b"{}")[:-2],
}


def _raw_upload(url: str, body: bytes) -> tuple[int, bytes]:
    """POST /v1/files with exactly these bytes (no client library in between); (status, body)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    head = (
        b"POST /v1/files HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
        b"Content-Type: multipart/form-data; boundary=" + BOUNDARY + b"\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body)
    )
    with socket.create_connection((host, int(port)), timeout=20) as s:
        s.sendall(head + body)
        answer = b""
        while chunk := s.recv(1 << 16):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_every_malformed_upload_is_a_400_in_openais_shape_and_no_log_holds_its_bytes(tmp_path: Path) -> None:
    sim, urls = start_sim(1)
    policy = {
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0]}]}],
        "billing": {"ledger": {"path": ":memory:"}},
        "batch": {"enabled": True, "dir": str(tmp_path / "files"), "sqlite_path": str(tmp_path / "jobs.db")},
        "server": {"access_log": True, "log_level": "debug"},
    }
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    log = tmp_path / "gateway.log"
    with running(sim):
        gw = start_gateway(["--config", str(path)], log_path=str(log))
        with running(gw):
            answers = {name: _raw_upload(gw.url, body) for name, body in MALFORMED.items()}
            assert {name: a for name, a in answers.items() if a[0] != 400} == {}
            for name, (_, answer) in answers.items():
                error = orjson.loads(answer)["error"]
                assert set(error) == {"message", "type", "param", "code"}, name
                assert error["type"] == "invalid_request_error" and error["code"], (name, error)
            # The gateway still serves a well-formed upload, and kept none of the malformed ones.
            status, answer = _raw_upload(gw.url, _file(b'name="file"; filename="good.jsonl"'))
            assert status == 200 and orjson.loads(answer)["filename"] == "good.jsonl", answer
            listed = httpx.get(gw.url + "/v1/files").json()["data"]
            assert [f["filename"] for f in listed] == ["good.jsonl"]
            assert gw.popen.poll() is None
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and "internal_error" not in text
    for marker in ("CLIENTBYTES", "A" * 64):
        assert marker not in text, f"the log holds the client's bytes:\n{text[-3000:]}"
