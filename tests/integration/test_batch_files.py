"""The batch file store on a real directory: OpenAI file objects, tenant isolation, named limits."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

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
    for name in ("", "a\nb", "n" * 256):
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
