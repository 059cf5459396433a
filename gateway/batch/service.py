"""The batch service: the Batches API's operations, and the loop that runs each batch to its end.

The app wires it in as a thin layer (``gateway.process.process`` opens it, ``gateway.server.batch_api``
serves it): the ``/v1/batches`` handlers call ``create``, ``retrieve``, ``list`` and ``cancel`` (each
answers OpenAI's object or raises a ``GatewayError`` in OpenAI's shape), the ``/v1/files`` handlers call
the ``FileStore`` and ``delete_file``; ``fleet``, ``send`` and ``load`` are the gateway's pools, request
path and scraped queues (``gateway.batch.bridge``). Nothing here knows aiohttp.

A batch's life, each step under the batch's lease (see ``store``) and each move checked by the store:

    validating ─ validate_input ──► in_progress ─ plan + Runner ──► finalizing ─ result files ──► completed
         │  errors                     │ deadline                                          (partial results)
         └──────► failed               ├──────────► expired   (unanswered lines: batch_expired)
                                       └ cancel ──► cancelling ─► cancelled (unanswered: batch_cancelled)

Every step can be resumed by whichever process holds the lease next: validation is a pure function of
the (immutable) input file; a run plans only the lines without a result (re-plan, no stored plan: the
fleet may have changed meanwhile); a finalization rewrites the same result files. Validation, planning
and settling run on the event loop in slices (``gateway.batch.pace``), a line's body read back and
dropped one at a time.
"""

from __future__ import annotations

import asyncio
import bisect
import builtins
import contextlib
import functools
import logging
import os
import socket
import time
import uuid
from array import array
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import orjson

from config.batch import BatchConfig, window_seconds
from config.routing import RoutingConfig
from gateway.batch.files import FileStore
from gateway.batch.objects import (
    ACTIVE,
    CANCELLABLE,
    ENDPOINTS,
    BatchRecord,
    LineResult,
    batch_error,
    line_id,
    new_batch_id,
    result_file_id,
    unanswered,
)
from gateway.batch.pace import THREAD_LINE_BYTES, Pacer, drive
from gateway.batch.runner import BatchLine, Runner, RunStats, Send, SlotPool
from gateway.batch.store import JobStore
from gateway.batch.validate import LineIndex, Validated, iter_lines, read_body, validate_file
from gateway.errors import GatewayError
from router.batch_plan import LinePrefix, Plan, Prefixes, line_prefix, plan_steps, reserved_for_online
from router.tokenizers import Tokenizer
from router.types import OnlineReserve

log = logging.getLogger("prefix_gateway")

_CREATE_KEYS = frozenset({"input_file_id", "endpoint", "completion_window", "metadata"})
_METADATA_PAIRS, _METADATA_KEY_CHARS, _METADATA_VALUE_CHARS = 16, 64, 512  # OpenAI's metadata rules
_END_CODES = {"expired": "batch_expired", "cancelled": "batch_cancelled"}
_END_MESSAGES = {
    "expired": "this request could not be executed before the completion window expired",
    "cancelled": "this request was not executed because the batch was cancelled",
}
SETTLE_CHUNK = 500
"""Unanswered lines a cancel or the expiry settles in one store write (paced on the loop in between).
The whole list at once held the loop 390 ms for 50,000 lines and kept 50,000 result objects in memory
(``python -m bench.batch_memory``)."""


class Fleet(Protocol):
    """What the service needs of the gateway's model pools (``gateway.batch.bridge.PoolFleet``)."""

    def serves(self, model: str) -> bool: ...

    def allows(self, tenant: str, model: str) -> bool:
        """Whether the tenant may call the model (``tenancy.tenants[].models``)."""
        ...

    def replicas(self, model: str) -> Sequence[str]:
        """Ids of the pool's replicas that may take requests now."""
        ...

    def routing(self, model: str) -> RoutingConfig: ...

    def tokenizer(self, model: str) -> Tokenizer: ...


def _bad(message: str, param: str | None = None, code: str = "invalid_request") -> GatewayError:
    return GatewayError(400, message, param=param, code=code)


class BatchService:
    def __init__(
        self,
        cfg: BatchConfig,
        *,
        store: JobStore,
        files: FileStore,
        fleet: Fleet,
        send: Send,
        load: Callable[[str, str], float | None],
        max_line_bytes: int,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
    ):
        self.cfg, self.store, self.files, self.fleet = cfg, store, files, fleet
        self.send, self.load, self.clock = send, load, clock
        self.max_line_bytes = cfg.limits.max_line_bytes or max_line_bytes
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.slots: dict[str, SlotPool] = {}  # per model: every batch of the process on it shares one
        self.stats = RunStats()  # every run of this process, for metrics
        self._runners: dict[str, Runner] = {}
        self._running_on: dict[str, str] = {}  # batch id -> the model its runner sends to
        self._drives: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._closing = False
        self._closed = asyncio.Event()
        self._watched: frozenset[str] = frozenset()  # models some process runs a batch on (the store's view)

    def _now(self) -> int:
        return int(self.clock())

    # -- the API ----------------------------------------------------------------------------------------

    async def create(self, tenant: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """``POST /v1/batches``: a new batch in ``validating``; it runs in the background."""
        unknown = sorted(set(body) - _CREATE_KEYS)
        if unknown:
            raise _bad(f"unsupported parameter {unknown[0]!r}", unknown[0], "unknown_parameter")
        for name in ("input_file_id", "endpoint", "completion_window"):
            if name not in body:
                raise _bad(f"'{name}' is a required property", name, "missing_required_parameter")
            if not isinstance(body[name], str):
                raise _bad(f"'{name}' must be a string", name)
        endpoint, window = body["endpoint"], body["completion_window"]
        if endpoint not in ENDPOINTS:
            raise _bad(f"endpoint must be one of {sorted(ENDPOINTS)}, got {endpoint!r}", "endpoint")
        if window not in self.cfg.completion_windows:
            raise _bad(f"completion_window must be one of {self.cfg.completion_windows}", "completion_window")
        metadata = _check_metadata(body.get("metadata"))
        found = await self.files.get(tenant, body["input_file_id"])
        if found is None or found.purpose != "batch":
            raise _bad(
                f"no file with id {body['input_file_id']!r} and purpose 'batch'",
                "input_file_id",
                "file_not_found",
            )
        if len(await self.store.active(tenant)) >= self.cfg.limits.max_active_batches:
            raise GatewayError(
                429,
                f"a tenant may have at most {self.cfg.limits.max_active_batches} batches in progress",
                code="too_many_batches",
            )
        now = self._now()
        rec = BatchRecord(
            id=new_batch_id(),
            tenant=tenant,
            endpoint=endpoint,
            input_file_id=found.id,
            completion_window=window,
            status="validating",
            created_at=now,
            expires_at=now + window_seconds(window),
            metadata=metadata,
        )
        await self.store.create(rec)
        self._wake.set()
        return rec.to_openai(0, 0)

    async def _own(self, tenant: str, batch_id: str) -> BatchRecord:
        rec = await self.store.get(batch_id) if isinstance(batch_id, str) else None
        if rec is None or rec.tenant != tenant:  # another tenant's batch does not exist for this one
            raise GatewayError(404, f"no batch found with id {batch_id!r}", code="batch_not_found")
        return rec

    async def _openai(self, rec: BatchRecord) -> dict[str, Any]:
        counts = rec.final_counts or await self.store.counts(rec.id)
        return rec.to_openai(*counts)

    async def retrieve(self, tenant: str, batch_id: str) -> dict[str, Any]:
        """``GET /v1/batches/{id}``."""
        return await self._openai(await self._own(tenant, batch_id))

    async def list(self, tenant: str, *, after: str | None = None, limit: int = 20) -> dict[str, Any]:
        """``GET /v1/batches?after=&limit=``: newest first, OpenAI's list object."""
        if not 1 <= limit <= 100:
            raise _bad("limit must be between 1 and 100", "limit")
        recs, more = await self.store.list(tenant, after=after, limit=limit)
        data = [await self._openai(r) for r in recs]
        return {
            "object": "list",
            "data": data,
            "first_id": data[0]["id"] if data else None,
            "last_id": data[-1]["id"] if data else None,
            "has_more": more,
        }

    async def cancel(self, tenant: str, batch_id: str) -> dict[str, Any]:
        """``POST /v1/batches/{id}/cancel``: ``cancelling`` now, ``cancelled`` with partial results soon."""
        rec = await self._own(tenant, batch_id)
        if rec.status in CANCELLABLE:
            rec = await self.store.move(batch_id, "cancelling", self._now()) or await self._own(
                tenant, batch_id
            )
            runner = self._runners.get(batch_id)
            if runner is not None:
                runner.stop("cancelled")
            self._wake.set()
        if rec.status not in ("cancelling", "cancelled"):
            raise GatewayError(
                409, f"a batch that is {rec.status} cannot be cancelled", code="batch_not_cancellable"
            )
        return await self._openai(rec)

    async def delete_file(self, tenant: str, file_id: str) -> dict[str, Any]:
        """``DELETE /v1/files/{id}``, refused while a batch that has not ended reads it."""
        if any(r.input_file_id == file_id for r in await self.store.active(tenant)):
            raise GatewayError(409, "the file is the input of a batch in progress", code="file_in_use")
        if not await self.files.delete(tenant, file_id):
            raise GatewayError(404, f"no file found with id {file_id!r}", code="file_not_found")
        return {"id": file_id, "object": "file", "deleted": True}

    # -- running batches --------------------------------------------------------------------------------

    async def run(self) -> None:
        """Until ``close()``: claim runnable batches (this process's share of them) and drive each."""
        while not self._closing:
            self._wake.clear()
            try:
                await self._claim_some()
            except Exception:  # the store is unreachable: try again next round
                log.warning("batch: claiming batches failed", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.cfg.poll_s)

    async def _claim_some(self) -> None:
        for batch_id in await self.store.runnable():
            if len(self._drives) >= self.cfg.limits.max_running_batches or self._closing:
                return
            if batch_id not in self._drives and await self.store.claim(
                batch_id, self.owner, self.cfg.lease_ttl_s
            ):
                task = asyncio.get_running_loop().create_task(self._drive(batch_id))
                self._drives[batch_id] = task

    async def close(self) -> None:
        """Stop running batches: in-flight lines are cut off and leases released, so another process
        (or the next start) resumes them at once."""
        self._closing = True
        self._closed.set()
        self._wake.set()
        while self._drives:  # a drive claimed while closing sees _closing and ends at once
            for runner in self._runners.values():
                runner.stop("shutdown")
            await asyncio.gather(*self._drives.values(), return_exceptions=True)

    async def _drive(self, batch_id: str) -> None:
        lost = asyncio.Event()
        beat = asyncio.get_running_loop().create_task(self._heartbeat(batch_id, lost))
        try:
            rec = await self.store.get(batch_id)
            while rec is not None and rec.status in ACTIVE and not lost.is_set() and not self._closing:
                rec = await self._step(rec)
        except Exception:
            log.warning(
                "batch: running a batch failed; it will be retried", extra={"batch": batch_id}, exc_info=True
            )
        finally:
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beat
            with contextlib.suppress(Exception):
                await self.store.release(batch_id, self.owner)
            del self._drives[batch_id]
            self._wake.set()

    async def _heartbeat(self, batch_id: str, lost: asyncio.Event) -> None:
        """Renew the lease every third of it; notice a cancel made through another process."""
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(min(self.cfg.poll_s, self.cfg.lease_ttl_s / 3))
            if time.monotonic() - renewed >= self.cfg.lease_ttl_s / 3:
                if not await self.store.claim(batch_id, self.owner, self.cfg.lease_ttl_s):
                    lost.set()
                    if (runner := self._runners.get(batch_id)) is not None:
                        runner.stop("lost")
                    return
                renewed = time.monotonic()
            runner = self._runners.get(batch_id)
            if runner is not None:
                rec = await self.store.get(batch_id)
                if rec is not None and rec.status == "cancelling":
                    runner.stop("cancelled")

    async def _step(self, rec: BatchRecord) -> BatchRecord | None:
        """One step of the batch's life; the record after it (None: stop driving it)."""
        if rec.status in ("validating", "in_progress") and self._now() >= rec.expires_at:
            return await self._finish(rec, "expired")
        if rec.status == "validating":
            return await self._validate(rec)
        if rec.status == "in_progress":
            return await self._execute(rec)
        return await self._finish(rec, "completed" if rec.status == "finalizing" else "cancelled")

    async def _index(self, rec: BatchRecord) -> tuple[Path | None, Validated]:
        """The input file and the index of its lines (validation is a pure function of the file)."""
        path = self.files.content_path(rec.tenant, rec.input_file_id)
        if path is None:
            return None, Validated(
                errors=[batch_error("file_not_found", "the input file no longer exists")], error_count=1
            )
        lim = self.cfg.limits
        return path, await validate_file(
            path,
            endpoint=rec.endpoint,
            serves=lambda model: self.fleet.serves(model) and self.fleet.allows(rec.tenant, model),
            max_file_bytes=lim.max_file_bytes,
            max_line_bytes=self.max_line_bytes,
            max_lines=lim.max_lines,
            max_custom_id_chars=lim.max_custom_id_chars,
            max_reported_errors=lim.max_reported_errors,
        )

    async def _validate(self, rec: BatchRecord) -> BatchRecord | None:
        _, v = await self._index(rec)
        if v.ok:
            new = await self.store.move(rec.id, "in_progress", self._now(), model=v.model, total=len(v.lines))
        else:
            errors = list(v.errors)
            if v.error_count > len(errors):
                errors.append(
                    batch_error("too_many_errors", f"{v.error_count - len(errors)} more errors not listed")
                )
            new = await self.store.move(rec.id, "failed", self._now(), errors=errors, final_counts=(0, 0))
        return new or await self.store.get(rec.id)

    async def _execute(self, rec: BatchRecord) -> BatchRecord | None:
        path, v = await self._index(rec)
        if path is None or not v.ok or rec.model is None:  # the input file went away under the batch
            counts = await self.store.counts(rec.id)
            new = await self.store.move(
                rec.id, "failed", self._now(), errors=v.errors or None, final_counts=counts
            )
            return new or await self.store.get(rec.id)
        done = await self.store.recorded(rec.id)
        index, pace = v.lines, Pacer()
        todo = array("q")  # positions in the index of the lines without a result
        for i, cid in enumerate(index.custom_ids):
            if cid not in done:
                todo.append(i)
            await pace()
        del done
        params = self.cfg.pool(rec.model)
        replicas = self.fleet.replicas(rec.model)
        reserve = reserved_for_online(replicas, params.online_replicas, rec.model)
        runs_on = [r for r in replicas if r not in reserve]
        the_plan = await self._plan(rec, path, index, todo, runs_on, pace)
        if self._closing:
            return None
        kind, model, base = ENDPOINTS[rec.endpoint], rec.model, path

        async def read(key: int) -> BatchLine:
            line = index[bisect.bisect_left(index.numbers, key)]  # key: its line number (ascending)
            body = await asyncio.to_thread(read_body, base, line)
            if params.engine_priority is not None:
                body["priority"] = params.engine_priority
            return BatchLine(
                rec.id,
                rec.tenant,
                line.number,
                line.custom_id,
                line_id(rec.id, line.custom_id),
                kind,
                rec.endpoint,
                model,
                body,
            )

        runner = Runner(
            the_plan,
            read=read,
            send=self.send,
            load=functools.partial(self.load, model),
            params=params,
            slots=self.slots.setdefault(model, SlotPool()),
            record=lambda result: self.store.record(rec.id, [result]),
            max_attempts=self.cfg.max_attempts,
            backoff_s=self.cfg.retry_backoff_s,
            backoff_max_s=self.cfg.retry_backoff_max_s,
            poll_s=self.cfg.poll_s,
            stats=self.stats,
            reserve=reserve,
        )
        self._runners[rec.id], self._running_on[rec.id] = runner, model
        deadline = asyncio.get_running_loop().call_later(
            max(0.0, rec.expires_at - self.clock()), runner.stop, "expired"
        )
        try:
            reason = await runner.run()
        finally:
            deadline.cancel()
            del self._runners[rec.id], self._running_on[rec.id]
        if reason == "done":
            return await self.store.move(rec.id, "finalizing", self._now()) or await self.store.get(rec.id)
        if reason == "expired":
            return await self._finish(rec, "expired")
        if reason == "cancelled":
            return await self.store.get(rec.id)
        return None  # lost the lease, or shutting down: the next holder resumes

    def online_reserve(self, model: str) -> OnlineReserve | None:
        """The replicas of ``model``'s pool that running batches leave to online traffic, which
        ``router.filters.online_reserve`` prefers: the reserves of this process's runners on it, else,
        while the store says another process runs one (``watch``), the same rendezvous choice over the
        pool's healthy replicas; None while no batch runs on it or it keeps none."""
        mine = [r.reserve for b, r in self._runners.items() if self._running_on[b] == model]
        if not mine and model not in self._watched:
            return None
        params = self.cfg.pool(model)
        if mine:
            replicas = frozenset().union(*mine)
        else:
            replicas = reserved_for_online(self.fleet.replicas(model), params.online_replicas, model)
        return OnlineReserve(replicas, params.replica_slots) if replicas else None

    def watches(self) -> bool:
        """Whether any pool keeps online replicas: only then is the store watched."""
        return self.cfg.online_replicas > 0 or any(p.online_replicas for p in self.cfg.pools.values())

    async def watch(self) -> None:
        """Until ``close()``: every ``poll_s``, read which models a batch runs on anywhere (every process
        and pod of the store), so online requests of a process that runs none still prefer the reserve."""
        while not self._closing:
            try:
                self._watched = frozenset(await self.store.running_models())
            except Exception:  # the store is unreachable: keep the last view, try again next round
                log.warning("batch: reading the running batches failed", exc_info=True)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._closed.wait(), self.cfg.poll_s)

    async def _plan(
        self,
        rec: BatchRecord,
        path: Path,
        index: LineIndex,
        todo: Sequence[int],
        replicas: builtins.list[str],
        pace: Pacer,
    ) -> Plan:
        """The plan of the lines ``todo`` (positions in ``index``), on the loop in slices (``pace``). Each
        body is read back, hashed and dropped: what the plan keeps of a line is its key, its hashes and
        two counts."""
        assert rec.model is not None
        model, kind = rec.model, ENDPOINTS[rec.endpoint]
        routing, tokenizer = self.fleet.routing(model), self.fleet.tokenizer(model)
        prefixes = Prefixes()

        def prefix(number: int, raw: bytes) -> LinePrefix:
            body = orjson.loads(raw)["body"]
            out = self.cfg.default_output_tokens
            return line_prefix(number, kind, body, model, tokenizer, routing, default_output_tokens=out)

        async for line, raw in iter_lines(path, (index[i] for i in todo), pace):
            if len(raw) >= THREAD_LINE_BYTES:
                prefixes.append(await asyncio.to_thread(prefix, line.number, raw))
            else:
                prefixes.append(prefix(line.number, raw))
        steps = plan_steps(
            prefixes,
            replicas,
            block_size=routing.block_size,
            warm_tokens=self.cfg.warm_prefix_tokens,
            tolerance=self.cfg.balance_tolerance,
        )
        return await drive(steps, pace)

    async def _finish(self, rec: BatchRecord, final: str) -> BatchRecord | None:
        """End a batch in ``final``: settle unanswered lines, write the result files, move, drop the rows."""
        if final in _END_CODES and rec.total:
            _, v = await self._index(rec)
            done = await self.store.recorded(rec.id)
            code, message = _END_CODES[final], _END_MESSAGES[final]
            chunk: list[LineResult] = []
            pace = Pacer()
            for line in v.lines:  # settled SETTLE_CHUNK at a time, one store write each
                if line.custom_id not in done:
                    chunk.append(unanswered(rec.id, line.custom_id, line.number, code, message))
                    if len(chunk) == SETTLE_CHUNK:
                        await self.store.record(rec.id, chunk)
                        chunk = []
                await pace()
            if chunk:
                await self.store.record(rec.id, chunk)
        completed, failed = await self.store.counts(rec.id)
        usage = RunStats()
        output_id = error_id = None
        if completed:
            output_id = result_file_id(rec.id, "output")
            await self.files.write_result(
                rec.tenant, output_id, f"{rec.id}_output.jsonl", self._lines(rec.id, True, usage)
            )
        if failed:
            error_id = result_file_id(rec.id, "error")
            await self.files.write_result(
                rec.tenant, error_id, f"{rec.id}_error.jsonl", self._lines(rec.id, False, None)
            )
        new = await self.store.move(
            rec.id,
            final,
            self._now(),
            output_file_id=output_id,
            error_file_id=error_id,
            usage=_batch_usage(usage) if completed else None,
            final_counts=(completed, failed),
        )
        if new is not None:
            await self.store.drop_results(rec.id)
        return new or await self.store.get(rec.id)

    async def _lines(self, batch_id: str, ok: bool, usage: RunStats | None) -> AsyncIterator[bytes]:
        """The result-file lines of the ok (or failed) results, in input order; sums usage on the way."""
        async for r in self.store.results(batch_id):
            if r.ok == ok:
                if usage is not None:
                    usage.add_usage((orjson.loads(r.record).get("response") or {}).get("body"))
                yield r.record


def _batch_usage(s: RunStats) -> dict[str, Any]:
    """OpenAI's ``BatchUsage`` of a batch's answered lines."""
    return {
        "input_tokens": s.prompt_tokens,
        "input_tokens_details": {"cached_tokens": s.cached_tokens},
        "output_tokens": s.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": s.reasoning_tokens},
        "total_tokens": s.prompt_tokens + s.completion_tokens,
    }


def _check_metadata(metadata: Any) -> dict[str, str] | None:
    if metadata is None:
        return None
    if not isinstance(metadata, dict) or len(metadata) > _METADATA_PAIRS:
        raise _bad(f"metadata must be an object of at most {_METADATA_PAIRS} pairs", "metadata")
    for k, v in metadata.items():
        if not isinstance(v, str) or len(k) > _METADATA_KEY_CHARS or len(v) > _METADATA_VALUE_CHARS:
            raise _bad(
                f"metadata keys are strings of at most {_METADATA_KEY_CHARS} characters and values of at most "
                f"{_METADATA_VALUE_CHARS}",
                "metadata",
            )
    return dict(metadata)
