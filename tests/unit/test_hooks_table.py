"""The hooks' one registration table (issue 27, item 2): a process's hooks are the table's, in its
order, and each concern's hooks live in its own file under gateway/pipeline/hooks/."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import gateway.pipeline.hooks as hooks_pkg
from gateway.pipeline.hooks import HOOKS, TRACE_HOOKS, registered_hooks, trace
from gateway.pipeline.lifecycle import Event
from gateway.process.process import Process

HOOKS_DIR = Path(hooks_pkg.__file__).parent
PIPELINE = HOOKS_DIR.parent


def test_a_process_runs_the_tables_hooks_in_its_order() -> None:
    built = registered_hooks()._hooks  # the registration itself is what is tested
    for event in Event:
        assert [h for h, _ in built[event]] == [h for e, h in HOOKS if e is event]
    assert Process.__dataclass_fields__["hooks"].default_factory is registered_hooks


def test_every_hook_in_the_table_comes_from_a_file_of_the_hooks_folder() -> None:
    files = {Path(inspect.getfile(hook)).parent for _, hook in HOOKS}
    assert files == {HOOKS_DIR}


def test_nothing_outside_the_table_registers_a_hook() -> None:
    """``hooks.on`` is called only by ``registered_hooks``: no stage, process or app installs its own."""
    callers = []
    for path in PIPELINE.parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            call = isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            if call and node.func.attr == "on" and ast.unparse(node.func.value).endswith("hooks"):
                callers.append(str(path.relative_to(PIPELINE.parent)))
    assert callers == ["pipeline/hooks/__init__.py"]


def test_the_trace_hooks_are_dropped_and_only_they() -> None:
    """Without tracing a process drops the trace hooks at its start (``Process.start``); the others
    keep their order."""
    assert {
        trace.admitted,
        trace.routing,
        trace.routed,
        trace.first_byte,
        trace.answered,
        trace.finished,
    } == TRACE_HOOKS
    hooks = registered_hooks()
    assert hooks.live == set(Event) - {Event.CANCELLED}  # every event some hook of the table observes
    hooks.drop(TRACE_HOOKS)
    assert hooks.live == {e for e, h in HOOKS if h not in TRACE_HOOKS}  # admitted, routing, failed: none
    for event in Event:
        assert [h for h, _ in hooks._hooks[event]] == [
            h for e, h in HOOKS if e is event and h not in TRACE_HOOKS
        ]
