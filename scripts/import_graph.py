"""The project's import graph read from the source: its cycles, run-time and type-only, and the edges
that cross a component boundary.

    python scripts/import_graph.py [ROOT] [--cycles]

ROOT is a checkout (default: this one), so an earlier commit is measured from an exported tree
(``git archive COMMIT | tar -x -C /tmp/before``) without installing it. Every import counts, at module
level or inside a function; ``if TYPE_CHECKING:`` imports are the type-only edges, reported apart
(``tests/unit/test_import_graph.py`` fails on a run-time cycle; a type-only one is a layering smell it
lets through). A cycle is a strongly connected component of more than one module; ``--cycles`` lists
each one's modules.

The boundaries (docs/architecture.md, "Layers"): product code (``gateway``, ``router``, ``cache``,
``config``) never imports ``bench``, ``tests`` or ``scripts``; the simulator (``sim``) imports none of
them either, so the wheel ships it with the product; ``bench`` never imports ``tests``, and the tooling
of ``scripts`` imports neither.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGES = ("config", "router", "cache", "gateway", "sim", "bench", "scripts", "tests")
PRODUCT = ("config", "router", "cache", "gateway")
# (importer's packages, imported packages that are off limits to them)
BOUNDARIES = (
    (PRODUCT, ("bench", "tests", "scripts")),
    (("sim",), ("bench", "tests", "scripts", "gateway")),
    (("scripts",), ("bench", "tests")),
    (("bench",), ("tests",)),
)

Edges = dict[str, set[str]]


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules(root: Path) -> dict[str, Path]:
    return {
        module_name(root, path): path
        for pkg in PACKAGES
        if (root / pkg).is_dir()
        for path in sorted((root / pkg).rglob("*.py"))
    }


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(path: Path, name: str, modules: dict[str, Path]) -> tuple[set[str], set[str]]:
    """The project modules ``name`` imports: (at run time, under ``TYPE_CHECKING`` only)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    run: set[str] = set()
    typed: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def targets(node: ast.Import | ast.ImportFrom) -> Iterable[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names if a.name in modules]
        base = node.module or ""
        if node.level:
            anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        out = []
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            if sub in modules:
                out.append(sub)
            elif base in modules:
                out.append(base)
        return out

    def visit(node: ast.AST, into: set[str]) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                visit(child, typed)
            for child in node.orelse:
                visit(child, into)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            into.update(targets(node))
        for child in ast.iter_child_nodes(node):
            visit(child, into)

    visit(tree, run)
    run.discard(name)
    typed -= run | {name}
    return run, typed


def graphs(root: Path) -> tuple[Edges, Edges]:
    """(run-time edges, run-time and type-only edges) of every module under ``root``."""
    modules = project_modules(root)
    run: Edges = {}
    every: Edges = {}
    for name, path in modules.items():
        r, t = imports_of(path, name, modules)
        run[name] = r
        every[name] = r | t
    return run, every


def cycles(edges: Edges) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative), largest first."""
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
    return sorted(out, key=lambda c: (-len(c), c))


def crossings(edges: Edges) -> list[tuple[str, str]]:
    """Edges that cross a boundary of ``BOUNDARIES``, sorted."""
    out = []
    for m, deps in edges.items():
        for importers, banned in BOUNDARIES:
            if m.split(".")[0] in importers:
                out += [(m, d) for d in deps if d.split(".")[0] in banned]
    return sorted(out)


def top(component: list[str]) -> str:
    """The top-level packages a cycle spans."""
    return "+".join(sorted({m.split(".")[0] for m in component}))


def report(root: Path, list_cycles: bool) -> list[str]:
    run, every = graphs(root)
    run_cycles, all_cycles = cycles(run), cycles(every)
    lines = [f"root: {root}", f"modules: {len(run)}"]
    for label, found in (("run-time", run_cycles), ("with TYPE_CHECKING imports", all_cycles)):
        sizes = ", ".join(f"{len(c)} ({top(c)})" for c in found) or "none"
        lines.append(f"cycles {label}: {len(found)}: modules in each: {sizes}")
        if list_cycles:
            lines += [f"  {' '.join(c)}" for c in found]
    crossed = crossings(every)
    lines.append(f"boundary crossings (run time or type-only): {len(crossed)}")
    lines += [f"  {m} -> {d}" for m, d in crossed]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--cycles", action="store_true", help="list every cycle's modules")
    args = parser.parse_args(argv)
    print("\n".join(report(Path(args.root).resolve(), args.cycles)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
