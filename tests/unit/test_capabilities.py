"""The fleet's subsystems and the process's loops receive what they use, not the ``Process``: no module
under ``gateway/fleet/``, none of ``gateway/batch/`` and none of the process's own loops (reload,
reconcile, exposition) imports ``gateway.process.process``, even under ``TYPE_CHECKING`` (issue 27,
item 3). Read from the source with ``scripts/import_graph.py``; the named tasks the loops are given
(``gateway.fleet.tasks.Tasks``) are checked for what the process relied on.

The request path (``gateway/pipeline/``) is typed by what its stages use (``pipeline.services``), not
by the ``Process``: none of its modules names a ``gateway.process`` module, even for a type, but the
policy-derived state a request is served with (``PIPELINE_MAY_NAME``), and the gateway's one type-only
cycle left is the request record's own, inside the pipeline (``RECORD_CYCLE``)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
from pathlib import Path

from gateway.batch.service import BatchService
from gateway.fleet.tasks import Tasks
from gateway.pipeline.services import Batches, FairQueues, Meter, ReplicaSlots, Services, Waiting
from gateway.process.admission import Admission, Queued
from gateway.process.fair_admission import FairAdmission
from gateway.process.metering import Metering
from gateway.process.process import Process
from scripts.import_graph import Edges, cycles, graphs

ROOT = Path(__file__).resolve().parents[2]
PROCESS = "gateway.process.process"
# Below the process (docs/architecture.md, "Layers"), and the loops the process starts.
NARROW = ("gateway.fleet", "gateway.batch", "gateway.process.reload", "gateway.process.reconcile")
NARROW += ("gateway.process.exposition",)
# What the request path may still name of ``gateway.process``, for a type only: the ``State`` a request
# is served with (``ctx.state``: the policy, pools, tenants, prices a reload swaps) and the
# ``CacheRuntime`` it holds (``state.cache``). Both are built from the policy and import nothing that
# leads back to the pipeline's context (the cycle test below); moving them under the pipeline would move
# what ``process`` builds, not a type.
PIPELINE_MAY_NAME = frozenset({"gateway.process.state", "gateway.process.cache_runtime"})


@functools.cache
def every_import(root: Path) -> Edges:
    """Run-time and type-only edges of the tree at ``root`` (read once: parsing every module is slow)."""
    return graphs(root)[1]


def importers_of_the_process(root: Path) -> list[str]:
    """Modules of ``NARROW`` that import ``gateway.process.process`` at run time or for a type."""
    every = every_import(root)
    return sorted(m for m, deps in every.items() if m.startswith(NARROW) and PROCESS in deps)


def test_nothing_below_the_process_imports_its_type() -> None:
    every = every_import(ROOT)
    assert "gateway.fleet.discovery" in every and "gateway.fleet.kv_events" in every  # the scan read them
    assert importers_of_the_process(ROOT) == []


def test_no_fleet_module_is_in_an_import_cycle() -> None:
    """The type-only cycle through the process spanned discovery, KV events, probes, scrape, adapters."""
    found = [m for c in cycles(every_import(ROOT)) for m in c if m.startswith("gateway.fleet")]
    assert found == []


def process_modules_the_pipeline_names(root: Path) -> list[tuple[str, str]]:
    """(module of ``gateway/pipeline/``, ``gateway.process`` module it imports, run time or for a type)."""
    every = every_import(root)
    return sorted(
        (m, d)
        for m, deps in every.items()
        if m == "gateway.pipeline" or m.startswith("gateway.pipeline.")
        for d in deps
        if (d == "gateway.process" or d.startswith("gateway.process.")) and d not in PIPELINE_MAY_NAME
    )


def test_the_request_path_names_no_process_module() -> None:
    every = every_import(ROOT)
    assert "gateway.pipeline.context" in every and "gateway.pipeline.handler" in every  # the scan read them
    assert process_modules_the_pipeline_names(ROOT) == []
    run = graphs(ROOT)[0]  # and those it may name, only under TYPE_CHECKING
    assert [
        (m, d)
        for m, deps in run.items()
        if m.startswith("gateway.pipeline")
        for d in deps & PIPELINE_MAY_NAME
    ] == []


# The one type-only cycle the gateway keeps, inside the request path: the request record
# (``pipeline.context``) holds values whose types are defined beside the functions that take the record
# back: the billing marker (``billing.Marked``), the fairness ticket (``fairness.Ticket``), the front end
# and its encoder (``protocols.base``), and, through ``services.Services.hooks``, the hooks
# (``lifecycle.Hooks``, whose ``emit`` takes the context). No run-time edge closes it, and no module
# outside ``gateway/pipeline/`` is in it: the ``Process`` is not.
RECORD_CYCLE = [
    "gateway.pipeline.billing",
    "gateway.pipeline.context",
    "gateway.pipeline.fairness",
    "gateway.pipeline.lifecycle",
    "gateway.pipeline.protocols.base",
    "gateway.pipeline.services",
]


def test_the_gateway_has_no_type_only_cycle_but_the_request_records() -> None:
    """The 33-module one ran through ``RequestContext.process`` typed ``Process``; what is left is the
    record's own, and it must not grow (a module added to it fails here, naming it)."""
    found = [c for c in cycles(every_import(ROOT)) if any(m.startswith("gateway.") for m in c)]
    assert found == [RECORD_CYCLE]
    assert "gateway.process.process" not in every_import(ROOT)["gateway.pipeline.context"]


def test_the_process_has_every_member_the_request_path_reads() -> None:
    """``Process`` satisfies ``pipeline.services.Services`` structurally: each member is one of its fields."""
    members = {n for n, v in vars(Services).items() if isinstance(v, property)}
    assert {"metrics", "hooks", "state", "fair", "batch"} <= members
    assert members <= {f.name for f in dataclasses.fields(Process)}


def test_the_classes_above_the_pipeline_have_what_its_small_protocols_list() -> None:
    """Each method of a small protocol is the implementing class's, with the same parameters; each
    property is one of its fields."""
    pairs = [(FairQueues, FairAdmission), (ReplicaSlots, Admission), (Waiting, Queued)]
    pairs += [(Meter, Metering), (Batches, BatchService)]
    for proto, cls in pairs:
        listed = {n: v for n, v in vars(proto).items() if not n.startswith("_")}
        assert listed, proto
        for name, member in listed.items():
            if isinstance(member, property):
                assert name in {f.name for f in dataclasses.fields(cls)}, (cls, name)
                continue
            got = inspect.signature(getattr(cls, name)).parameters
            assert list(got) == list(inspect.signature(member).parameters), (cls, name)


def test_a_type_only_import_of_the_process_by_a_stage_is_found(tmp_path: Path) -> None:
    for pkg in ("gateway", "gateway/process", "gateway/pipeline"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    for name in ("process", "state", "fair_admission"):
        (tmp_path / "gateway" / "process" / f"{name}.py").write_text("class X: ...\n")
    (tmp_path / "gateway" / "pipeline" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway.process.process import Process\n"
    )
    (tmp_path / "gateway" / "pipeline" / "b.py").write_text("from gateway.process import fair_admission\n")
    (tmp_path / "gateway" / "pipeline" / "c.py").write_text("from gateway.process.state import X\n")
    assert process_modules_the_pipeline_names(tmp_path) == [
        ("gateway.pipeline.a", "gateway.process.process"),
        ("gateway.pipeline.b", "gateway.process.fair_admission"),
    ]


def test_an_import_of_the_process_is_found_even_for_a_type(tmp_path: Path) -> None:
    """The scan sees the process's type imported under TYPE_CHECKING and in a function."""
    for pkg in ("gateway", "gateway/process", "gateway/fleet"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "gateway" / "process" / "process.py").write_text("class Process: ...\n")
    (tmp_path / "gateway" / "fleet" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gateway.process.process import Process\n"
    )
    (tmp_path / "gateway" / "fleet" / "b.py").write_text("def f():\n    import gateway.process.process\n")
    (tmp_path / "gateway" / "fleet" / "c.py").write_text("from gateway.process import process\n")
    assert importers_of_the_process(tmp_path) == ["gateway.fleet.a", "gateway.fleet.b", "gateway.fleet.c"]


async def test_a_name_holds_one_task_and_close_waits_for_every_one() -> None:
    tasks = Tasks()
    ended: list[str] = []

    async def loop(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(name)

    tasks.start("discovery:a", loop("a1"))
    tasks.start("discovery:b", loop("b"))
    await asyncio.sleep(0)
    tasks.start("discovery:a", loop("a2"))  # the running "a" is cancelled: one task a name
    await asyncio.sleep(0)
    assert ended == ["a1"]
    assert tasks.alive("discovery:") == {"discovery:a": True, "discovery:b": True}
    stopped = tasks.stop("discovery:b")
    assert stopped is not None and tasks.stop("discovery:b") is None
    await asyncio.gather(stopped, return_exceptions=True)
    assert stopped.cancelled() and tasks.alive("discovery:") == {"discovery:a": True}
    await tasks.close()
    assert sorted(ended) == ["a1", "a2", "b"] and tasks.alive("") == {}
