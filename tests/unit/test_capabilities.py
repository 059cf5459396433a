"""The fleet's subsystems and the process's loops receive what they use, not the ``Process``: no module
under ``gateway/fleet/``, none of ``gateway/batch/`` and none of the process's own loops (reload,
reconcile, exposition) imports ``gateway.process.process``, even under ``TYPE_CHECKING`` (issue 27,
item 3). Read from the source with ``scripts/import_graph.py``; the named tasks the loops are given
(``gateway.fleet.tasks.Tasks``) are checked for what the process relied on."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

from gateway.fleet.tasks import Tasks
from scripts.import_graph import Edges, cycles, graphs

ROOT = Path(__file__).resolve().parents[2]
PROCESS = "gateway.process.process"
# Below the process (docs/architecture.md, "Layers"), and the loops the process starts.
NARROW = ("gateway.fleet", "gateway.batch", "gateway.process.reload", "gateway.process.reconcile")
NARROW += ("gateway.process.exposition",)


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
