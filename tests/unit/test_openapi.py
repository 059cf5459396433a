"""docs/openapi.yaml and the routes the app registers name the same operations, and the document is
well-formed enough to be used (every $ref resolves, every operation has responses)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from gateway.server.app import create_app
from tests.support.stack import TEST_SECRET, policy_for

DOC = Path(__file__).resolve().parents[2] / "docs" / "openapi.yaml"
METHODS = {"get", "post", "put", "delete", "patch"}


def _doc() -> dict[str, Any]:
    return yaml.safe_load(DOC.read_text())


def _registered() -> set[tuple[str, str]]:
    app = create_app(policy_for(["http://127.0.0.1:9"]), secret=TEST_SECRET)
    out = set()
    for route in app.router.routes():
        if route.method == "HEAD":  # added by aiohttp beside every GET
            continue
        out.add((route.method.lower(), route.resource.canonical))
    return out


def test_every_route_is_documented_and_every_documented_operation_exists() -> None:
    documented = {(m, path) for path, ops in _doc()["paths"].items() for m in ops if m in METHODS}
    registered = _registered()
    assert registered - documented == set(), "routes missing from docs/openapi.yaml"
    assert documented - registered == set(), "documented operations that the app does not serve"


def test_refs_resolve_and_operations_are_complete() -> None:
    doc = _doc()
    assert doc["openapi"].startswith("3.")
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if k == "$ref":
                    refs.append(v)
                else:
                    walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(doc)
    for ref in refs:
        node: Any = doc
        for part in ref.removeprefix("#/").split("/"):
            node = node[part]
        assert node is not None, ref
    ids = []
    for path, ops in doc["paths"].items():
        params = set(re.findall(r"{(\w+)}", path))
        for method, op in ops.items():
            assert op.get("responses"), (method, path)
            ids.append(op["operationId"])
            declared = set()
            for p in op.get("parameters", []):
                if "$ref" in p:
                    p = doc["components"]["parameters"][p["$ref"].rsplit("/", 1)[1]]
                if p["in"] == "path":
                    declared.add(p["name"])
            assert declared == params, (method, path)
    assert len(ids) == len(set(ids)), "operationId must be unique"
