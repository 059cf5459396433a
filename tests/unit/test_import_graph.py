"""The import graph of the project's packages, read from their source: no cycles, and layers respected.

Every import counts, at module level or inside a function, so that a cycle cannot be hidden by moving
an import into a function; only imports under ``if TYPE_CHECKING:`` are left out (annotations only).
"""

from __future__ import annotations

import functools
from pathlib import Path

from scripts.import_graph import cycles, graphs

ROOT = Path(__file__).resolve().parents[2]

# gateway's sub-packages, lowest first: a module may import its own layer and those below it.
GATEWAY_LAYERS = (
    "errors",
    "observability",
    "upstream",
    "fleet",
    "pipeline",
    "batch",
    "process",
    "admin",
    "server",
    "cli",
)


@functools.cache
def graph() -> dict[str, set[str]]:
    """The run-time edges (``scripts.import_graph``, the tool docs/architecture.md's table is made with),
    read once per test process (four tests read it; each read parses every module)."""
    return graphs(ROOT)[0]


def test_the_graph_is_read_from_the_source() -> None:
    edges = graph()
    assert "gateway.server.app" in edges["gateway.cli.lifecycle"]
    assert "router.pool" in edges["gateway.fleet.pools"]
    # an import under TYPE_CHECKING is not an edge
    assert "gateway.process.process" not in edges["gateway.fleet.probes"]


def test_cycle_detection_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(graph()) == []


def test_pure_packages_never_import_the_gateway() -> None:
    edges = graph()
    bad = {
        (m, d)
        for m, deps in edges.items()
        if m.split(".")[0] in ("config", "router", "cache")
        for d in deps
        if d.split(".")[0] in ("gateway", "bench", "scripts")
    }
    assert bad == set()
    assert {d.split(".")[0] for m, deps in edges.items() if m.startswith("config") for d in deps} <= {
        "config"
    }


def test_gateway_layers_are_respected() -> None:
    edges = graph()
    subpackages = {m.split(".")[1] for m in edges if m.startswith("gateway.") and m.count(".") >= 1}
    assert subpackages - {"__main__"} <= set(GATEWAY_LAYERS), "a new gateway sub-package needs a layer"
    rank = {name: i for i, name in enumerate(GATEWAY_LAYERS)}
    upward = {
        (m, d)
        for m, deps in edges.items()
        if m.startswith("gateway.") and m.split(".")[1] in rank
        for d in deps
        if d.startswith("gateway.")
        and d.split(".")[1] in rank
        and rank[d.split(".")[1]] > rank[m.split(".")[1]]
    }
    assert upward == set()
