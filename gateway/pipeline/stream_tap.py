"""Watch an upstream SSE stream on its way to the client.

The tap re-frames the stream event by event (``data: ...\\n\\n``, as vLLM and SGLang write it), so it can:
- assemble the complete answer when someone needs it (a cache fill, coalesced followers);
- find the usage chunk (billing) and drop it when the gateway asked for it and the client did not;
- unmask PII placeholders per request (mask mode), holding back a placeholder split across deltas;
- hand each parsed chunk to coalesced followers as it arrives;
- notice a choice that ends with ``finish_reason: "abort"`` (vLLM gave the request up);
- hold back the final ``[DONE]``: the relay writes it once the request's ledger row is written;
- re-encode each chunk in the client's API when it is not the replica's (the front end's encoder).
Events are JSON-parsed only when one of these needs it; otherwise their bytes pass through as they came.
When nothing needs the events themselves (no assembly, unmasking, followers or re-encoding), the
leading whole single-line ``data: `` events of a chunk, up to the first ``[DONE]``, usage or abort, go
out as the same bytes without being split into events (``_plain_head``): the parser's output for them
would be those bytes. A replica that sends a token per chunk has nothing else; one whose whole answer
arrives at once leaves the parser only its last two events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson

from cache.entry import aborted
from cache.pii import ChunkUnmasker
from cache.sse import DONE, SSEParser, StreamAssembler

if TYPE_CHECKING:
    from gateway.pipeline.protocols.base import Encoder


def _may_carry_usage(event: str) -> bool:
    """Cheap test before parsing: OpenAI-style servers put ``"usage": null`` in every chunk."""
    return '"usage"' in event and '"usage":null' not in event and '"usage": null' not in event


def _may_abort(event: str) -> bool:
    """Cheap test before parsing: only a final chunk carries a finish reason of ``abort``."""
    return '"abort"' in event and "finish_reason" in event


def _plain_head(data: bytes, max_bytes: int) -> int:
    """How many leading bytes of ``data`` may go to the client as they came: whole ``data: <payload>``
    events, one line each (re-framing them would give the same bytes), before anything the tap acts
    on (the ``[DONE]`` it holds back, a usage chunk, an abort; a ``"usage": null`` on every chunk, as
    some servers send, is not usage). 0: the parser takes it all."""
    if len(data) > max_bytes or not data.startswith(b"data: "):
        return 0
    stop = len(data)
    for needle in (b"[DONE]", b'"abort"'):
        i = data.find(needle, 0, stop)
        if i != -1:
            stop = i
    i = data.find(b'"usage"', 0, stop)
    while i != -1:
        if not (data.startswith(b'"usage":null', i) or data.startswith(b'"usage": null', i)):
            stop = i
            break
        i = data.find(b'"usage"', i + 7, stop)
    end = data.rfind(b"\n\n", 0, stop) + 2 if stop < len(data) or not data.endswith(b"\n\n") else stop
    if end < 2:
        return 0
    events = data.count(b"\n\n", 0, end)
    if data.find(b"\r", 0, end) != -1 or data.count(b"\n", 0, end) != 2 * events:
        return 0
    if data.count(b"\n\ndata: ", 0, end) != events - 1:  # every event one line, "data: " its only field
        return 0
    return end


def is_usage_only(chunk: Any) -> bool:
    """The final usage chunk of a stream: ``choices`` empty and ``usage`` set."""
    return isinstance(chunk, dict) and chunk.get("choices") == [] and chunk.get("usage") is not None


class StreamTap:
    def __init__(
        self,
        *,
        assemble: bool = False,
        strip_usage: bool = False,
        unmasker: ChunkUnmasker | None = None,
        publish: Callable[[Any], None] | None = None,
        encoder: Encoder | None = None,
    ):
        self.parser = SSEParser()
        self.assembler = StreamAssembler() if assemble or publish is not None else None
        self.strip_usage = strip_usage
        self.unmasker = unmasker if unmasker is not None and unmasker.mapping else None
        self.publish = publish
        self.encoder = encoder  # None: chunks go out in the replica's own framing
        # nothing reads the events' contents: chunks that carry nothing to act on may skip the parser
        self.reads_events = (
            self.assembler is not None
            or self.unmasker is not None
            or (publish is not None or encoder is not None)
        )
        self.usage: dict[str, Any] | None = None
        self.done = False
        self.aborted = False  # a chunk ended a choice with finish_reason "abort"
        self.events = 0

    def feed(self, data: bytes) -> bytes:
        """Bytes from upstream in, bytes for the client out (possibly fewer, possibly rewritten)."""
        out: list[bytes] = []
        if not self.reads_events and self.parser.idle:
            head = _plain_head(data, self.parser.max_event_bytes)
            if head:
                self.events += data.count(b"\n\n", 0, head)
                if head == len(data):
                    return data
                out.append(data[:head])
                data = data[head:]
        for event in self.parser.feed(data):
            self.events += 1
            if event == DONE:
                # Held back: the relay writes it after the ledger row (respond.close_stream).
                self.done = True
                self.events -= 1
                if self.assembler is not None:
                    self.assembler.add(DONE)
                if self.publish is not None:
                    self.publish(DONE)
                continue
            needs_json = (
                self.assembler is not None
                or self.unmasker is not None
                or self.encoder is not None
                or _may_carry_usage(event)
                or _may_abort(event)
            )
            chunk: Any = None
            if needs_json:
                try:
                    chunk = orjson.loads(event)
                except orjson.JSONDecodeError:
                    chunk = None
                if chunk is None:
                    if self.assembler is not None:
                        self.assembler.bad = True
                    out.append(b"data: " + event.encode() + b"\n\n")
                    continue
                if self.assembler is not None:
                    self.assembler.add(chunk)
                if self.publish is not None:
                    self.publish(chunk)
                if isinstance(chunk, dict) and isinstance(chunk.get("usage"), dict):
                    self.usage = chunk["usage"]
                if isinstance(chunk, dict) and aborted(chunk):
                    self.aborted = True
                if self.encoder is not None:
                    if self.unmasker is not None:
                        chunk = self.unmasker.process(chunk)
                    out.append(self.encoder.chunk(chunk))
                    continue
                if self.strip_usage and is_usage_only(chunk):
                    continue
                if self.unmasker is not None:
                    out.append(b"data: " + orjson.dumps(self.unmasker.process(chunk)) + b"\n\n")
                    continue
            out.append(b"data: " + event.encode() + b"\n\n")
        return b"".join(out)

    def result(self) -> dict[str, Any] | None:
        """The assembled answer when the stream ended normally, else None (never cached)."""
        return self.assembler.result() if self.assembler is not None else None
