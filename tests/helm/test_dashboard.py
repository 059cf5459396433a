"""The Grafana dashboard ConfigMap: discoverable by the Grafana sidecar, and wired to real metric names."""

from __future__ import annotations

import json
import re

from tests.helm.chart import CHART_DIR, FULLNAME, kinds, only, render

# The gateway's metrics (prefix prefix_gateway_), with their labels.
METRICS: dict[str, set[str]] = {
    "requests_total": {"model", "replica", "status"},
    "request_duration_seconds": {"model"},
    "time_to_first_byte_seconds": {"model"},
    "in_flight": {"replica"},
    "routing_decisions_total": {"model", "policy", "reason"},
    "prefix_match_fraction": {"model"},
    "prefix_predicted_tokens_total": {"replica"},
    "prefix_reported_cached_tokens_total": {"replica"},
    "routing_available_tokens_total": {"pool", "replica"},
    "routing_achieved_cached_tokens_total": {"pool", "replica"},
    "cache_requests_total": {"result"},
    "cache_bypass_total": {"reason"},
    "ratelimited_total": {"tenant", "kind"},
    "billed_tokens_total": {"tenant", "kind"},
    "billed_cost_micros_total": {"tenant"},
    "replica_healthy": {"replica"},
    "upstream_errors_total": {"replica", "kind"},
    "advice_saving_micros_per_day": {"tenant", "kind"},
    "advice_findings": {"tenant", "kind"},
    "batches": {"status"},
    "batch_lines_total": {"outcome"},
    "batch_retries_total": set(),
    "batch_stolen_lines_total": set(),
    "batch_tokens_total": {"kind"},
    "batch_in_flight": {"model", "replica"},
    "fair_queue_depth": {"pool", "tenant", "priority"},
    "fair_queue_wait_seconds": {"pool", "tenant", "priority"},
    "fair_shed_total": {"pool", "priority", "reason"},
    "fair_priority_capped_total": {"tenant"},
    "fair_headroom_slots": {"pool"},
    "ttft_objective_total": {"pool", "priority", "outcome"},
}
HISTOGRAMS = {
    "request_duration_seconds",
    "time_to_first_byte_seconds",
    "prefix_match_fraction",
    "fair_queue_wait_seconds",
}
METRIC_RE = re.compile(r"prefix_gateway_([a-z_]+)")


def dashboard() -> dict:
    cm = only(render({"dashboard": {"enabled": True}}), "ConfigMap", f"{FULLNAME}-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    return json.loads(cm["data"]["prefix-gateway.json"])


def exprs(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])]


def test_dashboard_is_optional() -> None:
    assert f"{FULLNAME}-dashboard" not in {m.name for m in render() if m.kind == "ConfigMap"}
    assert "ConfigMap" in kinds(render())


def test_dashboard_json_is_shipped_verbatim() -> None:
    assert dashboard() == json.loads((CHART_DIR / "files" / "dashboard.json").read_text())


def test_every_query_uses_known_metrics_and_labels() -> None:
    for title, expr in exprs(dashboard()):
        names = METRIC_RE.findall(expr)
        assert names, f"{title}: no prefix_gateway_ metric in {expr}"
        for name in names:
            base = name.removesuffix("_bucket")
            assert base in METRICS, f"{title}: unknown metric {name}"
            if name.endswith("_bucket"):
                assert base in HISTOGRAMS, f"{title}: {base} is not a histogram"
            for by in re.findall(r"by \(([^)]*)\)", expr):
                labels = {label.strip() for label in by.split(",")} - {"le"}
                assert labels <= METRICS[base], f"{title}: {base} has no label {labels - METRICS[base]}"


def test_dashboard_covers_the_operating_questions() -> None:
    used = {n.removesuffix("_bucket") for _, e in exprs(dashboard()) for n in METRIC_RE.findall(e)}
    assert set(METRICS) - used == set()
    text = " ".join(e for _, e in exprs(dashboard()))
    assert 'result="hit"' in text  # cache hit ratio
    assert 'result="coalesced"' in text
    assert 'status=~"5.."' in text  # errors
    assert "histogram_quantile(0.95" in text


def test_panels_are_laid_out_without_overlap() -> None:
    cells: set[tuple[int, int]] = set()
    ids = set()
    for p in dashboard()["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        ids.add(p["id"])
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps at {(x, y)}"
                cells.add((x, y))
    assert len(ids) == len(dashboard()["panels"])


def test_metric_labels_match_what_the_gateway_exports() -> None:
    """Metrics the gateway already defines carry the labels the dashboard groups by (no drift)."""
    from prometheus_client import Counter, Histogram
    from prometheus_client.metrics import MetricWrapperBase

    from gateway.observability.metrics import GatewayMetrics

    checked = 0
    for metric in vars(GatewayMetrics()).values():
        if not isinstance(metric, MetricWrapperBase):
            continue
        # prometheus_client keeps a metric's name and label names on the wrapper (no public getter)
        name = metric._name.removeprefix("prefix_gateway_") + (
            "_total" if isinstance(metric, Counter) else ""
        )
        if name not in METRICS:
            continue
        assert set(metric._labelnames) == METRICS[name], name
        assert (name in HISTOGRAMS) == isinstance(metric, Histogram), name
        checked += 1
    assert checked >= 5, (
        "the gateway exports fewer of the dashboard's metrics than it did when this was written"
    )


def test_dashboard_json_is_what_the_generator_makes() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_dashboard", CHART_DIR / "files" / "gen_dashboard.py")
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert (CHART_DIR / "files" / "dashboard.json").read_text() == gen.render(), "run files/gen_dashboard.py"


def test_generator_is_not_packaged() -> None:
    import helm_python as helm

    with helm.Chart.load(CHART_DIR) as chart:
        names = {f["name"] for f in chart.files}
    assert "files/dashboard.json" in names
    assert "files/gen_dashboard.py" not in names


def test_batch_collector_labels_match_the_dashboard() -> None:
    """The batch runner's metrics come from a collector (gateway/batch/metrics.py), not the table."""
    from types import SimpleNamespace

    from gateway.batch.metrics import BatchCollector
    from gateway.batch.runner import RunStats, SlotPool

    pool = SlotPool()
    assert pool.take("r0", 1)
    service = SimpleNamespace(
        stats=RunStats(completed=3, failed=1, prompt_tokens=10, cached_tokens=8), slots={"m": pool}
    )
    seen = {}
    for family in BatchCollector(service).collect():  # type: ignore[arg-type]
        for sample in family.samples:
            name = sample.name.removeprefix("prefix_gateway_")
            assert set(sample.labels) == METRICS[name], name
            seen[(name, tuple(sorted(sample.labels.items())))] = sample.value
    assert seen[("batch_lines_total", (("outcome", "failed"),))] == 1
    assert seen[("batch_tokens_total", (("kind", "cached"),))] == 8
    assert seen[("batch_in_flight", (("model", "m"), ("replica", "r0")))] == 1
    assert {n for n, _ in seen} == {n for n in METRICS if n.startswith("batch_")}
