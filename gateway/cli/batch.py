"""``prefix-gateway batch``: a running gateway's Batch API from the command line, on the real ``openai`` client.

    prefix-gateway batch submit FILE [--wait] [--json] [--endpoint URL] [--window 24h] [--metadata KEY=VALUE ...]
    prefix-gateway batch status ID
    prefix-gateway batch list [--limit N] [--json]
    prefix-gateway batch results ID -o OUT [--errors FILE]
    prefix-gateway batch cancel ID

``--url``, ``--api-key`` and ``--config`` go before or after the verb (``batch submit f.jsonl --url
...`` as ``batch --url ... submit f.jsonl``).

The gateway is ``--url`` (else ``$PREFIX_GATEWAY_URL``, else the address of the ``--config`` policy, else
http://127.0.0.1:8080); the tenant's key ``--api-key`` (else ``$OPENAI_API_KEY``, else ``EMPTY`` for a
gateway that allows anonymous callers). ``submit`` prints the batch id on stdout (and, with ``--wait``,
the finished batch); with ``--json`` stdout is one JSON document, the batch object (the finished one
with ``--wait``), which ``jq`` reads, and everything else goes to stderr; ``--wait`` polls every ``--poll`` seconds with a progress bar on stderr (lines
answered of the batch's total) until the batch ends, and exits 0 only if it completed (a failed batch's
errors are printed with their line numbers). ``status`` prints the batch object as JSON; ``results``
writes the output file (and the error file, if asked and there is one); ``cancel`` prints the status the
batch moved to. Needs the ``batch`` extra (``pip install 'prefix-gateway[batch]'``: the ``openai``
client, whose dependency ``tqdm`` draws the bar).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson

from config import PolicyError, load_policy
from gateway.cli.advise import gateway_url


def _batch_extra() -> tuple[ModuleType, ModuleType] | None:
    """The ``openai`` client and ``tqdm`` (the batch extra), loaded when a batch command runs, or None
    when the extra is not installed. Not at import: this module is part of every ``prefix-gateway``
    start, and importing ``openai`` cost each ``serve`` and ``check-config`` 0.47 s of its 1.9 s
    (``python -X importtime -c 'import gateway.cli.main'``) for a command they never run."""
    try:
        return importlib.import_module("openai"), importlib.import_module("tqdm")
    except ImportError:
        return None


ENDED = frozenset({"completed", "failed", "expired", "cancelled"})
DEFAULT_URL = "http://127.0.0.1:8080"


def _connection_args(p: Any, default: Any) -> None:
    """``--url``, ``--config``, ``--api-key``: on ``batch`` and on each verb (a verb's default is
    SUPPRESS, so one given before the verb is not overwritten by the verb's parser)."""
    p.add_argument(
        "--url",
        default=default,
        help=f"the gateway's base URL ($PREFIX_GATEWAY_URL, or the policy's, or {DEFAULT_URL})",
    )
    p.add_argument("--config", default=default, help="the gateway's policy file (for its address)")
    p.add_argument("--api-key", default=default, help="the tenant's API key ($OPENAI_API_KEY, or EMPTY)")


def add_batch_command(sub: Any) -> None:
    p = sub.add_parser("batch", help="submit, follow, list, fetch and cancel batches on a running gateway")
    _connection_args(p, None)
    verbs = p.add_subparsers(dest="verb", required=True)

    def verb(name: str, help: str) -> Any:
        parser = verbs.add_parser(name, help=help)
        _connection_args(parser, argparse.SUPPRESS)
        return parser

    submit = verb("submit", "upload a JSONL file and create a batch over it")
    submit.add_argument("file", type=Path)
    submit.add_argument(
        "--endpoint", default="/v1/chat/completions", help="the lines' url (default %(default)s)"
    )
    submit.add_argument("--window", default="24h", help="completion window (default %(default)s)")
    submit.add_argument("--metadata", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument(
        "--wait", action="store_true", help="follow the batch to its end, with a progress bar"
    )
    submit.add_argument("--poll", type=float, default=2.0, help="seconds between polls with --wait")
    submit.add_argument(
        "--json", action="store_true", help="stdout: one JSON document, the batch (progress on stderr)"
    )
    status = verb("status", "the batch object, as JSON")
    status.add_argument("id")
    listing = verb("list", "the tenant's batches, newest first")
    listing.add_argument("--limit", type=int, default=20, help="at most this many (default %(default)s)")
    listing.add_argument("--json", action="store_true", help="stdout: one JSON document, the list")
    results = verb("results", "download a batch's output (and error) file")
    results.add_argument("id")
    results.add_argument("-o", "--output", required=True, type=Path, help="where to write the output file")
    results.add_argument("--errors", type=Path, help="where to write the error file, if the batch has one")
    cancel = verb("cancel", "cancel a batch (its answered lines are kept)")
    cancel.add_argument("id")
    p.set_defaults(func=cmd_batch)


def base_url(args: Any) -> str:
    if args.url:
        return args.url
    if os.environ.get("PREFIX_GATEWAY_URL"):
        return os.environ["PREFIX_GATEWAY_URL"]
    if args.config:
        return gateway_url(load_policy(args.config))
    return DEFAULT_URL


def cmd_batch(args: Any) -> int:
    extra = _batch_extra()
    if extra is None:
        print(
            "error: this command needs the openai client: pip install 'prefix-gateway[batch]'",
            file=sys.stderr,
        )
        return 2
    try:
        url = base_url(args).rstrip("/")
    except PolicyError as err:
        print(err.render(), file=sys.stderr)
        return 1
    key = args.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
    openai, _ = extra
    client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=2)
    try:
        return VERBS[args.verb](client, args)
    except openai.APIStatusError as err:
        print(f"error: {url} answered {err.status_code}: {_message(err)}", file=sys.stderr)
        return 1
    except openai.APIConnectionError as err:
        print(f"error: cannot reach the gateway at {url}: {err}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        client.close()


def _message(err: Any) -> str:
    body = err.body if isinstance(err.body, dict) else {}
    inner = body.get("error", body) if isinstance(body, dict) else {}
    return str(inner.get("message") if isinstance(inner, dict) and inner.get("message") else err.message)


def _metadata(pairs: list[str]) -> dict[str, str] | None:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--metadata takes KEY=VALUE, got {pair!r}")
        out[key] = value
    return out or None


def _dump(batch: Any) -> str:
    return orjson.dumps(batch.model_dump(), option=orjson.OPT_INDENT_2).decode()


def submit(client: Any, args: Any) -> int:
    metadata = _metadata(args.metadata)
    with args.file.open("rb") as f:
        uploaded = client.files.create(file=(args.file.name, f), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=args.endpoint, completion_window=args.window, metadata=metadata
    )
    if not args.json:
        print(batch.id, flush=True)
    if not args.wait:
        print(
            f"batch {batch.id}: {batch.status} ({uploaded.bytes} bytes uploaded as {uploaded.id})",
            file=sys.stderr,
        )
        if args.json:
            print(_dump(batch))
        return 0
    batch = follow(client, batch, args.poll)
    print(_dump(batch))
    return _verdict(batch)


def follow(client: Any, batch: Any, poll_s: float) -> Any:
    """Poll until the batch ends, drawing its progress on stderr."""
    extra = _batch_extra()
    assert extra is not None  # cmd_batch checked
    with extra[1].tqdm(total=0, unit="line", desc=batch.status, file=sys.stderr, dynamic_ncols=True) as bar:
        while True:
            counts = batch.request_counts
            if counts is not None:
                bar.total = counts.total
                bar.n = counts.completed + counts.failed
                bar.set_postfix(failed=counts.failed, refresh=False)
            bar.set_description(batch.status, refresh=False)
            bar.refresh()
            if batch.status in ENDED:
                return batch
            time.sleep(poll_s)
            batch = client.batches.retrieve(batch.id)


def _verdict(batch: Any) -> int:
    if batch.status == "completed":
        return 0
    errors = batch.errors.data if batch.errors is not None and batch.errors.data else []
    for e in errors:
        where = f"line {e.line}: " if e.line is not None else ""
        print(f"{where}{e.code}: {e.message}", file=sys.stderr)
    print(f"batch {batch.id} ended {batch.status}", file=sys.stderr)
    return 1


def status(client: Any, args: Any) -> int:
    print(_dump(client.batches.retrieve(args.id)))
    return 0


def listing(client: Any, args: Any) -> int:
    if not 1 <= args.limit <= 100:
        raise ValueError(f"--limit takes 1 to 100, got {args.limit}")
    page = client.batches.list(limit=args.limit)
    batches = list(page.data)
    if args.json:
        doc = {"object": "list", "data": [b.model_dump() for b in batches], "has_more": bool(page.has_more)}
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
        return 0
    for b in batches:
        counts = b.request_counts
        done = f"{counts.completed + counts.failed}/{counts.total}" if counts is not None else "-"
        failed = f" ({counts.failed} failed)" if counts is not None and counts.failed else ""
        print(f"{b.id}  {b.status:<11} {done}{failed}  created {b.created_at}")
    if not batches:
        print("no batches", file=sys.stderr)
    return 0


def results(client: Any, args: Any) -> int:
    batch = client.batches.retrieve(args.id)
    if batch.status not in ENDED:
        print(f"error: batch {batch.id} is {batch.status}; its results come when it ends", file=sys.stderr)
        return 1
    wrote = []
    for file_id, path in ((batch.output_file_id, args.output), (batch.error_file_id, args.errors)):
        if file_id is None or path is None:
            continue
        client.files.content(file_id).write_to_file(path)
        wrote.append(f"{path} ({file_id})")
    counts = batch.request_counts
    done = f"{counts.completed} completed, {counts.failed} failed" if counts is not None else ""
    print(f"batch {batch.id} {batch.status}: {done}; wrote {', '.join(wrote) or 'nothing'}", file=sys.stderr)
    if batch.output_file_id is None:
        print("the batch has no output file (no line completed)", file=sys.stderr)
        return 1
    return 0


def cancel(client: Any, args: Any) -> int:
    batch = client.batches.cancel(args.id)
    print(f"batch {batch.id}: {batch.status}")
    return 0


VERBS = {"submit": submit, "status": status, "list": listing, "results": results, "cancel": cancel}
