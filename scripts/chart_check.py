#!/usr/bin/env python3
"""Render and check the Helm chart offline, without a helm binary or a cluster.

    python scripts/chart_check.py -f my-values.yaml              # check, print a summary
    python scripts/chart_check.py -f my-values.yaml --out out/   # also write the manifests (like helm template)

Checks, in order: values.schema.json (Helm enforces it while rendering), `helm lint --strict`, every
rendered object against the Kubernetes JSON schemas in strict mode (kubernetes-validate; CRDs such as
ServiceMonitor are listed as not checked), and the rendered policy with the gateway's own validator
(`prefix-gateway check-config`), with `${ENV}` references filled as the pod would fill them (values
from Secrets become placeholders), from --env NAME=VALUE (for envFrom sources) and the environment. Needs `pip install helm-python-sdk kubernetes-validate`. Exit status 0 when all pass.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART_DIR = ROOT / "helm" / "prefix-gateway"
POLICY_PATH = "/etc/prefix-gateway/policy.yaml"


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Merge values files as helm does for several -f: maps merge, anything else is replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load_values(files: list[Path], sets: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for f in files:
        values = merge(values, yaml.safe_load(f.read_text()) or {})
    for expression in sets:
        values = merge(values, helm.parse_set_string(expression))
    return values


def render(values: dict[str, Any], release: str, namespace: str) -> dict[str, str]:
    with helm.Chart.load(CHART_DIR) as chart:
        return chart.render(values, name=release, namespace=namespace, is_install=True)


def objects(rendered: dict[str, str]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for source, text in sorted(rendered.items()):
        if source.endswith("NOTES.txt"):
            continue
        out.extend((source, doc) for doc in yaml.safe_load_all(text) if doc)
    return out


def validate_objects(objs: list[tuple[str, dict[str, Any]]], kube_version: str) -> list[str]:
    problems = []
    for source, doc in objs:
        what = f"{source}: {doc['kind']}/{doc['metadata']['name']}"
        try:
            kubernetes_validate.validate(doc, kube_version, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            print(f"  not checked (no Kubernetes schema for {doc['apiVersion']}): {what}")
        except kubernetes_validate.ValidationError as err:
            problems.append(f"{what}: {err.message} at {'.'.join(str(p) for p in err.path)}")
    return problems


def pod_env(objs: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
    """The gateway container's env as the pod would see it; values from Secrets become placeholders."""
    env: dict[str, str] = {}
    for _, doc in objs:
        if doc["kind"] != "Deployment":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            for e in container.get("env", []):
                env[e["name"]] = e["value"] if "value" in e else f"placeholder-{e['name'].lower()}"
    return env


def check_policy(objs: list[tuple[str, dict[str, Any]]], env: dict[str, str]) -> list[str]:
    """Run `prefix-gateway check-config` on the policy of the gateway ConfigMap."""
    mounted = [doc for _, doc in objs if doc["kind"] == "ConfigMap" and "policy.yaml" in doc.get("data", {})]
    if len(mounted) != 1:
        return [f"expected one ConfigMap with policy.yaml, found {len(mounted)}"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "policy.yaml"
        path.write_text(mounted[0]["data"]["policy.yaml"])
        result = subprocess.run(
            [sys.executable, "-m", "gateway", "check-config", str(path)],
            cwd=ROOT,
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
    if result.returncode != 0:
        return [result.stderr.strip().replace(str(path), POLICY_PATH)]
    print(f"  {result.stdout.strip().replace(str(path), POLICY_PATH)}")
    return []


def write_out(rendered: dict[str, str], out: Path) -> None:
    for source, text in rendered.items():
        if not text.strip():
            continue
        target = out / source
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-f", "--values", type=Path, action="append", default=[], help="values file (repeat)")
    parser.add_argument("--set", action="append", default=[], help="helm --set expression (repeat)")
    parser.add_argument("--release", default="pgw")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--kube-version", default="1.30.0", help="Kubernetes version of the schemas")
    parser.add_argument(
        "--env", action="append", default=[], metavar="NAME=VALUE", help="for ${ENV} in the policy"
    )
    parser.add_argument("--out", type=Path, help="write the rendered manifests under this directory")
    args = parser.parse_args(argv)

    values = load_values(args.values, args.set)
    problems: list[str] = []
    print("values schema + render:")
    try:
        rendered = render(values, args.release, args.namespace)
    except helm.HelmError as err:
        print(f"  FAILED\n{err}")
        return 1
    print(f"  OK: {sum(1 for t in rendered.values() if t.strip())} templates rendered")

    print("helm lint --strict:")
    report = helm.lint(CHART_DIR, values, strict=True, namespace=args.namespace)
    lint_problems = [f"{m['path']}: {m['error']}" for m in report["messages"] if m["severity"] >= 2]
    problems += lint_problems + report["errors"]
    print("  OK" if not lint_problems and not report["errors"] else "  FAILED")

    objs = objects(rendered)
    print(f"Kubernetes {args.kube_version} schemas (strict), {len(objs)} objects:")
    found = validate_objects(objs, args.kube_version)
    problems += found
    print("  OK" if not found else "  FAILED")

    print("policy (prefix-gateway check-config):")
    env = pod_env(objs) | dict(e.split("=", 1) for e in args.env)
    found = check_policy(objs, env)
    problems += found

    if args.out:
        write_out(rendered, args.out)
        print(f"manifests written under {args.out}")
    for p in problems:
        print(f"PROBLEM: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
