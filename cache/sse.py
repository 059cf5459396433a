"""Server-sent events: incremental parsing, stream assembly, and replay of cached answers (pure).

* ``SSEParser`` turns bytes as they arrive from a socket into event data strings; an event, a line,
  a ``\\r\\n`` pair or a UTF-8 character may be split across reads.
* ``StreamAssembler`` / ``assemble_stream`` turn the chunks of an OpenAI-style stream into the
  equivalent non-stream response, or None if the stream did not end normally (it is then never cached).
* ``replay_chunks`` / ``replay_sse`` render a non-stream response (a cache hit) as the stream chunks
  (framed as SSE) a client that asked for ``stream: true`` expects.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

DONE = "[DONE]"
_TEXT_FIELDS = ("content", "reasoning_content", "refusal")


class SSEError(ValueError):
    """The stream is not valid SSE (e.g. one event larger than the parser's bound)."""


class SSEParser:
    """Incremental SSE parser: ``feed(bytes)`` returns the data of every event completed so far.

    Comment lines and fields other than ``data`` are ignored; several ``data`` lines of one event are
    joined with ``\\n`` as the SSE specification says. An event still open at end of stream is dropped.
    """

    def __init__(self, max_event_bytes: int = 8 * 1024 * 1024):
        self.max_event_bytes = max_event_bytes
        self._buf = bytearray()
        self._data: list[bytes] = []
        self._event_bytes = 0

    @property
    def idle(self) -> bool:
        """No partial line or event is held: the next bytes start a new event."""
        return not self._buf and not self._data

    def feed(self, chunk: bytes) -> list[str]:
        self._buf += chunk
        events: list[str] = []
        start = 0
        buf = self._buf
        n = len(buf)
        # No CR anywhere (what vLLM and SGLang send): a line ends at its LF, and the CR search a line
        # below finds nothing; one search for all of them instead (a call a line less).
        plain = buf.find(b"\r") == -1
        while start < n:
            nl = buf.find(b"\n", start)
            if plain:
                if nl == -1:
                    break
                self._line(bytes(buf[start:nl]), events)
                start = nl + 1
                continue
            cr = buf.find(b"\r", start, nl if nl != -1 else n)
            if cr != -1:
                if cr == n - 1:
                    break  # a lone \r at the end may be the first half of \r\n: wait for more
                end, nxt = cr, cr + 2 if buf[cr + 1 : cr + 2] == b"\n" else cr + 1
            elif nl != -1:
                end, nxt = nl, nl + 1
            else:
                break
            self._line(bytes(buf[start:end]), events)
            start = nxt
        del self._buf[:start]
        if len(self._buf) + self._event_bytes > self.max_event_bytes:
            raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
        return events

    def _line(self, line: bytes, events: list[str]) -> None:
        if not line:
            if self._data:
                events.append(b"\n".join(self._data).decode("utf-8", errors="replace"))
            self._data = []
            self._event_bytes = 0
            return
        if line.startswith(b"data: "):  # the usual field: what the split below gives, in fewer calls
            self._data.append(line[6:])
            self._event_bytes += len(line) - 6
            if self._event_bytes > self.max_event_bytes:
                raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")
            return
        if line.startswith(b":"):
            return
        name, sep, value = line.partition(b":")
        if name != b"data":
            return
        if sep and value.startswith(b" "):
            value = value[1:]
        self._data.append(value)
        self._event_bytes += len(value)
        if self._event_bytes > self.max_event_bytes:
            raise SSEError(f"SSE event larger than {self.max_event_bytes} bytes")


def _merge_logprobs(acc: dict[str, Any] | None, new: Any) -> dict[str, Any] | None:
    if not isinstance(new, Mapping):
        return acc
    if acc is None:
        acc = {}
    for k, v in new.items():
        if isinstance(v, list):
            existing = acc.get(k)
            acc[k] = [*(existing or []), *v]
        elif v is not None or k not in acc:
            acc[k] = v
    return acc


class StreamAssembler:
    """Accumulates the chunks of one stream; ``result()`` is the equivalent non-stream response."""

    def __init__(self) -> None:
        self.done = False
        self.kind: str | None = None  # "chat" or "text"
        self._head: dict[str, Any] = {}
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None
        self.bad = False

    def add_event(self, data: str) -> None:
        """One SSE event's data string (JSON chunk or ``[DONE]``)."""
        if data.strip() == DONE:
            self.done = True
            return
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.bad = True
            return
        self.add(chunk)

    def add(self, chunk: Any) -> None:
        if chunk == DONE:
            self.done = True
            return
        if not isinstance(chunk, Mapping):
            self.bad = True
            return
        if "error" in chunk and "choices" not in chunk:
            self.bad = True  # an in-band error event: the stream did not complete normally
            return
        obj = chunk.get("object")
        if self.kind is None and obj is not None:
            self.kind = "chat" if obj == "chat.completion.chunk" else "text"
        for key in ("id", "created", "model"):
            if key not in self._head and chunk.get(key) is not None:
                self._head[key] = chunk[key]
        if chunk.get("system_fingerprint") is not None:
            self._head["system_fingerprint"] = chunk["system_fingerprint"]
        if chunk.get("usage") is not None:
            self._usage = chunk["usage"]
        for c in chunk.get("choices") or ():
            if isinstance(c, Mapping):
                self._add_choice(c)

    def _add_choice(self, c: Mapping[str, Any]) -> None:
        idx = c.get("index", 0)
        st = self._choices.get(idx)
        if st is None:
            st = self._choices[idx] = {"text": [], "fields": {}, "tool_calls": {}, "finish_reason": None}
        if "delta" in c and self.kind is None:
            self.kind = "chat"
        if isinstance(c.get("text"), str):
            st["text"].append(c["text"])
        delta = c.get("delta")
        if isinstance(delta, Mapping):
            if delta.get("role") and "role" not in st:
                st["role"] = delta["role"]
            for key in _TEXT_FIELDS:
                if isinstance(delta.get(key), str):
                    st["fields"].setdefault(key, []).append(delta[key])
            for call in delta.get("tool_calls") or ():
                self._add_call(st["tool_calls"], call)
        if c.get("logprobs") is not None:
            st["logprobs"] = _merge_logprobs(st.get("logprobs"), c["logprobs"])
        if c.get("finish_reason") is not None:
            st["finish_reason"] = c["finish_reason"]
        if c.get("stop_reason") is not None:
            st["stop_reason"] = c["stop_reason"]

    @staticmethod
    def _add_call(calls: dict[int, dict[str, Any]], call: Any) -> None:
        if not isinstance(call, Mapping):
            return
        i = call.get("index", len(calls))
        acc = calls.setdefault(i, {"id": None, "type": None, "name": [], "arguments": []})
        if call.get("id"):
            acc["id"] = call["id"]
        if call.get("type"):
            acc["type"] = call["type"]
        fn = call.get("function")
        if isinstance(fn, Mapping):
            if isinstance(fn.get("name"), str):
                acc["name"].append(fn["name"])
            if isinstance(fn.get("arguments"), str):
                acc["arguments"].append(fn["arguments"])

    def result(self) -> dict[str, Any] | None:
        """The assembled response, or None if the stream was cut, errored, or left a choice unfinished."""
        if not self.done or self.bad or not self._choices:
            return None
        if any(st["finish_reason"] is None for st in self._choices.values()):
            return None
        chat = self.kind == "chat"
        out: dict[str, Any] = {
            "id": self._head.get("id"),
            "object": "chat.completion" if chat else "text_completion",
            "created": self._head.get("created"),
            "model": self._head.get("model"),
        }
        if "system_fingerprint" in self._head:
            out["system_fingerprint"] = self._head["system_fingerprint"]
        choices = []
        for idx in sorted(self._choices):
            st = self._choices[idx]
            choice: dict[str, Any] = {"index": idx}
            if chat:
                msg: dict[str, Any] = {"role": st.get("role", "assistant")}
                fields = st["fields"]
                msg["content"] = "".join(fields["content"]) if "content" in fields else None
                for key in ("reasoning_content", "refusal"):
                    if key in fields:
                        msg[key] = "".join(fields[key])
                if st["tool_calls"]:
                    msg["tool_calls"] = [
                        {
                            "id": c["id"],
                            "type": c["type"] or "function",
                            "function": {"name": "".join(c["name"]), "arguments": "".join(c["arguments"])},
                        }
                        for _, c in sorted(st["tool_calls"].items())
                    ]
                elif msg["content"] is None:
                    msg["content"] = ""
                choice["message"] = msg
            else:
                choice["text"] = "".join(st["text"])
            choice["logprobs"] = st.get("logprobs")
            choice["finish_reason"] = st["finish_reason"]
            if "stop_reason" in st:
                choice["stop_reason"] = st["stop_reason"]
            choices.append(choice)
        out["choices"] = choices
        if self._usage is not None:
            out["usage"] = self._usage
        return out


def assemble_stream(chunks: Iterable[Mapping[str, Any] | str]) -> dict[str, Any] | None:
    """The non-stream equivalent of a stream's parsed chunks; ``"[DONE]"`` marks the normal end.

    Returns None when the stream did not end normally: no ``[DONE]``, an unfinished choice, or an error.
    """
    asm = StreamAssembler()
    for chunk in chunks:
        asm.add(chunk)
    return asm.result()


def _event(obj: Any) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _pieces(text: str, size: int | None) -> list[str]:
    if not size or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def replay_sse(
    response: Mapping[str, Any],
    *,
    include_usage: bool = False,
    chunk_chars: int | None = None,
    response_id: str | None = None,
    created: int | None = None,
) -> list[bytes]:
    """Render a non-stream ``chat.completion`` / ``text_completion`` as SSE events, ending in [DONE]:
    the chunks of ``replay_chunks``, framed."""
    chunks = replay_chunks(
        response,
        include_usage=include_usage,
        chunk_chars=chunk_chars,
        response_id=response_id,
        created=created,
    )
    return [*map(_event, chunks), b"data: [DONE]\n\n"]


def replay_chunks(
    response: Mapping[str, Any],
    *,
    include_usage: bool = False,
    chunk_chars: int | None = None,
    response_id: str | None = None,
    created: int | None = None,
) -> list[dict[str, Any]]:
    """The stream chunks equivalent to a non-stream ``chat.completion`` / ``text_completion``.

    Per choice: a role chunk (chat), content chunk(s) of at most ``chunk_chars`` characters (all of it in
    one chunk when None), tool calls, then a finish chunk; a usage chunk (empty ``choices``) when
    ``include_usage``. ``response_id``/``created`` override the cached values (a replay is a new answer).
    """
    chat = response.get("object") == "chat.completion" or any(
        isinstance(c, Mapping) and "message" in c for c in response.get("choices") or ()
    )
    head: dict[str, Any] = {
        "id": response_id if response_id is not None else response.get("id"),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created if created is not None else response.get("created", int(time.time())),
        "model": response.get("model"),
    }
    if "system_fingerprint" in response:
        head["system_fingerprint"] = response["system_fingerprint"]
    events: list[dict[str, Any]] = []

    def emit(choice: dict[str, Any]) -> None:
        events.append({**head, "choices": [choice]})

    for c in response.get("choices") or ():
        idx = c.get("index", 0)
        logprobs = c.get("logprobs")
        extra = {"stop_reason": c["stop_reason"]} if "stop_reason" in c else {}
        if chat:
            msg = c.get("message") or {}
            emit(
                {
                    "index": idx,
                    "delta": {"role": msg.get("role", "assistant")},
                    "logprobs": None,
                    "finish_reason": None,
                }
            )
            for key in _TEXT_FIELDS:
                value = msg.get(key)
                if isinstance(value, str) and (value or key == "content"):
                    for i, piece in enumerate(_pieces(value, chunk_chars)):
                        lp = logprobs if (key == "content" and i == 0) else None
                        emit({"index": idx, "delta": {key: piece}, "logprobs": lp, "finish_reason": None})
                        if key == "content" and i == 0:
                            logprobs = None
            for i, call in enumerate(msg.get("tool_calls") or ()):
                fn = call.get("function") or {}
                emit(
                    {
                        "index": idx,
                        "delta": {
                            "tool_calls": [
                                {
                                    "index": i,
                                    "id": call.get("id"),
                                    "type": call.get("type", "function"),
                                    "function": {
                                        "name": fn.get("name", ""),
                                        "arguments": fn.get("arguments", ""),
                                    },
                                }
                            ]
                        },
                        "logprobs": None,
                        "finish_reason": None,
                    }
                )
            emit(
                {
                    "index": idx,
                    "delta": {},
                    "logprobs": logprobs,
                    "finish_reason": c.get("finish_reason"),
                    **extra,
                }
            )
        else:
            text = c.get("text") or ""
            for i, piece in enumerate(_pieces(text, chunk_chars)):
                emit(
                    {
                        "index": idx,
                        "text": piece,
                        "logprobs": logprobs if i == 0 else None,
                        "finish_reason": None,
                    }
                )
            emit(
                {"index": idx, "text": "", "logprobs": None, "finish_reason": c.get("finish_reason"), **extra}
            )
    if include_usage and response.get("usage") is not None:
        events.append({**head, "choices": [], "usage": response["usage"]})
    return events
