"""The request's records read from the source: each record's fields and the modules that write each
after construction (issue 27, item 1).

    python scripts/request_record.py [ROOT] [--fields]

ROOT is a checkout (default: this one), so an earlier commit is measured from an exported tree
(``git archive COMMIT | tar -x -C /tmp/before``). The records are the dataclasses of
``gateway/pipeline/context.py``. A write is an assignment (plain, augmented, or one target of a tuple)
to ``X.field`` anywhere under ``gateway/`` where ``X`` is spelled ``ctx`` or ends in ``.ctx`` (the
request's context: every stage, hook and front end names it so) or is spelled ``attempt`` or ends in
``.attempt`` (one attempt's record, where there is one). Constructor calls are counted apart: a record
built in one place is one writer whatever it holds. ``--fields`` lists every written field with its
writers.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from pathlib import Path

# The variable names each record is reached by (the script's one convention, said in the module).
HOLDERS = {"ctx": "RequestContext", "attempt": "Attempt"}


def records(context: Path) -> dict[str, list[str]]:
    """Each dataclass of ``context.py``: its fields, in order."""
    out: dict[str, list[str]] = {}
    for node in ast.parse(context.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and any("dataclass" in ast.unparse(d) for d in node.decorator_list):
            out[node.name] = [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign)
                and isinstance(s.target, ast.Name)
                and "ClassVar" not in ast.unparse(s.annotation)
            ]
    return out


def _holder(node: ast.expr) -> str | None:
    text = ast.unparse(node)
    for name, record in HOLDERS.items():
        if text == name or text.endswith("." + name):
            return record
    return None


def _targets(node: ast.AST) -> list[ast.expr]:
    if isinstance(node, ast.Assign):
        found: list[ast.expr] = []
        for t in node.targets:
            found.extend(t.elts if isinstance(t, ast.Tuple) else [t])
        return found
    if isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        return [node.target]
    return []


def writes(root: Path) -> tuple[dict[tuple[str, str], list[str]], dict[str, set[str]]]:
    """((record, field) → the module of each assignment to it, record → modules constructing it)."""
    written: dict[tuple[str, str], list[str]] = defaultdict(list)
    built: dict[str, set[str]] = defaultdict(set)
    names = set(records(root / "gateway/pipeline/context.py"))
    for path in sorted((root / "gateway").rglob("*.py")):
        module = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), module)):
            for target in _targets(node):
                if isinstance(target, ast.Attribute) and (record := _holder(target.value)) is not None:
                    written[(record, target.attr)].append(module)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                built[node.func.id].add(module)
    return written, built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parent.parent))
    parser.add_argument("--fields", action="store_true", help="list every written field and its writers")
    args = parser.parse_args(argv)
    root = Path(args.root)
    recs = records(root / "gateway/pipeline/context.py")
    written, built = writes(root)
    for record, fields in recs.items():
        sites = {f: written.get((record, f), []) for f in fields}
        mine = {f: sorted(set(s)) for f, s in sites.items()}
        after = [f for f, mods in mine.items() if mods]
        modules = sorted({m for mods in mine.values() for m in mods})
        multi = [f for f, mods in mine.items() if len(mods) > 1]
        print(
            f"{record}: {len(fields)} fields, {len(after)} written after construction "
            f"from {len(modules)} modules at {sum(map(len, sites.values()))} sites; "
            f"{len(multi)} fields by more than one module; "
            f"constructed in {len(built.get(record, ()))} module(s) {sorted(built.get(record, ()))}"
        )
        if args.fields:
            for f in after:
                print(f"    {f} ({len(sites[f])}): {', '.join(mine[f])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
