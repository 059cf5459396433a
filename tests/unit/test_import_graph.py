"""The import graph of the project's packages, read from their source: no cycles, and layers respected.

Every import counts, at module level or inside a function, so that a cycle cannot be hidden by moving
an import into a function; only imports under ``if TYPE_CHECKING:`` are left out (annotations only).
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("config", "router", "cache", "gateway", "sim", "bench", "scripts")

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


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    out = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            out[module_name(path)] = path
    return out


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, name: str, modules: dict[str, Path]) -> set[str]:
    """Project modules ``name`` imports at run time (``from a import b`` counts ``a.b`` when it is a
    module, else ``a``)."""
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules:
                    found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    found.add(sub)
                elif base in modules:
                    found.add(base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    found.discard(name)
    return found


@functools.cache
def graph() -> dict[str, set[str]]:
    """Read once per test process (four tests read it; each read parses every module)."""
    modules = project_modules()
    return {name: imports_of(path, name, modules) for name, path in modules.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on_stack.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


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
