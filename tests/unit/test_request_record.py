"""The request record's shape (issue 27, item 1): inputs written by the handler only, every other field
of the context by its one stage, attempts by dispatch and relay, one place that makes the ``Outcome``,
one that decides how an answer is served, one that builds the upstream request. Read from the source
with the same reader ``scripts/request_record.py`` measures with."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import gateway
from gateway.pipeline.context import INPUTS, WRITERS, Attempt, Outcome, RequestContext, Served
from scripts.request_record import writes

ROOT = Path(gateway.__file__).resolve().parent.parent
MUTATORS = {"append", "extend", "insert", "pop", "remove", "clear", "update", "setdefault", "__setitem__"}


def _calls(name: str) -> list[tuple[str, str]]:
    """(module, enclosing function) of every call of ``name`` under gateway/."""
    found = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                call = isinstance(node, ast.Call)
                if call and ast.unparse(node.func).split(".")[-1] == name:
                    found.append((str(path.relative_to(ROOT)), fn.name))
    return sorted(set(found))


def test_every_field_of_the_context_names_its_one_writer() -> None:
    fields = {f.name for f in dataclasses.fields(RequestContext)}
    assert set(WRITERS) == fields  # a new field says which module writes it
    assert set(INPUTS) <= fields


def test_no_module_assigns_a_context_field_but_its_writer() -> None:
    written, _ = writes(ROOT)
    strays = {
        (field, module)
        for (record, field), modules in written.items()
        if record == "RequestContext"
        for module in modules
        if module != WRITERS.get(field)
    }
    assert strays == set()


def test_no_module_mutates_a_context_field_in_place_but_its_writer() -> None:
    """``ctx.attempts.append(...)`` is a write too: only dispatch adds an attempt."""
    strays = []
    for path in sorted((ROOT / "gateway").rglob("*.py")):
        module = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            target = node.func.value
            if node.func.attr in MUTATORS and isinstance(target, ast.Attribute):
                holder = ast.unparse(target.value)
                if (holder == "ctx" or holder.endswith(".ctx")) and WRITERS.get(
                    target.attr, module
                ) != module:
                    strays.append((module, target.attr))
    assert strays == []


def test_an_attempt_is_written_by_dispatch_and_relay_only() -> None:
    written, built = writes(ROOT)
    modules = {m for (record, _), ms in written.items() if record == "Attempt" for m in ms}
    assert modules == {"gateway/pipeline/dispatch.py", "gateway/pipeline/relay.py"}
    assert built["Attempt"] == {"gateway/pipeline/dispatch.py"}
    assert {f.name for f in dataclasses.fields(Attempt)} >= {
        "decision",
        "propagate",
        "generation_started",
        "error",
    }


def test_the_outcome_is_made_in_one_function() -> None:
    assert _calls("Outcome") == [("gateway/pipeline/respond.py", "conclude")]
    assert Outcome.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_how_an_answer_is_served_is_decided_in_one_function() -> None:
    assert _calls("Served") == [("gateway/pipeline/cache.py", "_serve_as")]
    assert Served.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_the_upstream_request_is_built_in_one_function() -> None:
    """Markers, PII masking, the usage chunk, model name and salt: one builder, called by the cache
    stage; the body sent is its bytes (no other module serialises a request for a replica)."""
    assert _calls("UpstreamRequest") == [("gateway/pipeline/upstream_request.py", "build")]
    assert [m for m, _ in _calls("build") if m.startswith("gateway/pipeline/")] == [
        "gateway/pipeline/cache.py"
    ]
    assert _calls("strip_markers") == [
        (
            "gateway/pipeline/protocols/messages.py",
            "prepare_count",
        ),  # a count_tokens body, never sent as chat
        ("gateway/pipeline/upstream_request.py", "build"),
    ]
    assert [m for m, _ in _calls("mask_request")] == ["gateway/pipeline/upstream_request.py"]


def test_the_reader_sees_a_stray_write(tmp_path: Path) -> None:
    """The scan is not vacuous: a module outside the handler assigning an input is reported."""
    (tmp_path / "gateway/pipeline").mkdir(parents=True)
    (tmp_path / "gateway/pipeline/context.py").write_text(
        (ROOT / "gateway/pipeline/context.py").read_text(encoding="utf-8")
    )
    (tmp_path / "gateway/pipeline/stray.py").write_text(
        "def f(ctx, self):\n    ctx.pool = None\n    self.ctx.tenant, x = None, 1\n    ctx.attempt.error = 'x'\n"
    )
    written, _ = writes(tmp_path)
    assert written[("RequestContext", "pool")] == ["gateway/pipeline/stray.py"]
    assert written[("RequestContext", "tenant")] == ["gateway/pipeline/stray.py"]
    assert written[("Attempt", "error")] == ["gateway/pipeline/stray.py"]
