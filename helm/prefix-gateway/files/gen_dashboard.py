"""Generate files/dashboard.json, the Grafana dashboard the chart ships (not packaged: see .helmignore).

    python helm/prefix-gateway/files/gen_dashboard.py

Edit the panels here and regenerate; tests/helm/test_dashboard.py fails when the JSON and this file
disagree, and checks every query against the gateway's metric names and labels.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).with_name("dashboard.json")
P = "prefix_gateway_"
DS = {"type": "prometheus", "uid": "${datasource}"}
MODEL = '{model=~"$model"}'
RATE = "[$__rate_interval]"

Panel = dict[str, Any]


def timeseries(
    title: str,
    targets: list[tuple[str, str]],
    unit: str = "short",
    *,
    width: int = 12,
    desc: str = "",
    stack: bool = False,
) -> Panel:
    return {
        "type": "timeseries",
        "title": title,
        "description": desc,
        "datasource": DS,
        "fieldConfig": {
            "defaults": {"unit": unit, "custom": {"stacking": {"mode": "normal" if stack else "none"}}},
            "overrides": [],
        },
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["mean", "max"]},
            "tooltip": {"mode": "multi"},
        },
        "targets": [
            {"refId": chr(65 + i), "expr": expr, "legendFormat": legend, "datasource": DS}
            for i, (expr, legend) in enumerate(targets)
        ],
        "_width": width,
    }


def stat(
    title: str,
    expr: str,
    unit: str = "percentunit",
    *,
    desc: str = "",
    steps: list[tuple[str, float | None]] | None = None,
) -> Panel:
    steps = steps or [("green", None)]
    return {
        "type": "stat",
        "title": title,
        "description": desc,
        "datasource": DS,
        "fieldConfig": {
            "defaults": {
                "unit": unit,
                "thresholds": {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]},
            },
            "overrides": [],
        },
        "options": {"reduceOptions": {"calcs": ["lastNotNull"]}, "colorMode": "value"},
        "targets": [{"refId": "A", "expr": expr, "datasource": DS}],
        "_width": 6,
    }


def row(title: str) -> Panel:
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "_width": 24}


def quantiles(metric: str, qs: tuple[float, ...]) -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by (le) (rate({P}{metric}_bucket{MODEL}{RATE})))",
            f"p{round(q * 100)}",
        )
        for q in qs
    ]


def ratio(numerator: str, denominator: str) -> str:
    return f"sum(rate({numerator}{RATE})) / clamp_min(sum(rate({denominator}{RATE})), 1e-9)"


def panels() -> list[Panel]:
    replica_health = timeseries(
        "Replica health",
        [(f"min by (replica) ({P}replica_healthy)", "{{replica}}")],
        width=24,
        desc="Down when any gateway pod has ejected the replica.",
    )
    replica_health |= {
        "type": "state-timeline",
        "fieldConfig": {
            "defaults": {
                "mappings": [
                    {
                        "type": "value",
                        "options": {
                            "0": {"text": "down", "color": "red"},
                            "1": {"text": "up", "color": "green"},
                        },
                    }
                ],
                "thresholds": {
                    "mode": "absolute",
                    "steps": [{"color": "red", "value": None}, {"color": "green", "value": 1}],
                },
            },
            "overrides": [],
        },
        "options": {"showValue": "never", "mergeValues": True},
    }
    return [
        row("Traffic"),
        stat("Request rate", f"sum(rate({P}requests_total{MODEL}{RATE}))", unit="reqps"),
        stat(
            "Error ratio (5xx)",
            ratio(f'{P}requests_total{{model=~"$model",status=~"5.."}}', f"{P}requests_total{MODEL}"),
            steps=[("green", None), ("orange", 0.01), ("red", 0.05)],
        ),
        stat(
            "Response cache hit ratio",
            ratio(f'{P}cache_requests_total{{result="hit"}}', f"{P}cache_requests_total"),
        ),
        stat(
            "Healthy replicas",
            f"count(max by (replica) ({P}replica_healthy) == 1) or vector(0)",
            unit="short",
            desc="Replicas that at least one gateway pod routes to.",
        ),
        timeseries(
            "Requests by model and status",
            [(f"sum by (model, status) (rate({P}requests_total{MODEL}{RATE}))", "{{model}} {{status}}")],
            unit="reqps",
        ),
        timeseries(
            "Upstream errors by replica and kind",
            [(f"sum by (replica, kind) (rate({P}upstream_errors_total{RATE}))", "{{replica}} {{kind}}")],
            unit="reqps",
        ),
        row("Latency"),
        timeseries("Request duration", quantiles("request_duration_seconds", (0.5, 0.95, 0.99)), unit="s"),
        timeseries(
            "Time to first byte", quantiles("time_to_first_byte_seconds", (0.5, 0.95, 0.99)), unit="s"
        ),
        row("Routing"),
        timeseries(
            "Routing decisions by reason",
            [(f"sum by (reason) (rate({P}routing_decisions_total{MODEL}{RATE}))", "{{reason}}")],
            unit="reqps",
            stack=True,
        ),
        timeseries(
            "Prefix match fraction", quantiles("prefix_match_fraction", (0.5, 0.9)), unit="percentunit"
        ),
        timeseries(
            "Prefix tokens: predicted vs reported cached",
            [
                (f"sum by (replica) (rate({P}prefix_predicted_tokens_total{RATE}))", "predicted {{replica}}"),
                (
                    f"sum by (replica) (rate({P}prefix_reported_cached_tokens_total{RATE}))",
                    "reported {{replica}}",
                ),
            ],
            desc="Tokens the gateway's index expected the replica to have cached vs what the replica "
            "reported (usage.prompt_tokens_details.cached_tokens).",
        ),
        timeseries(
            "Prefix hit available vs achieved",
            [
                (
                    f'sum by (pool, replica) (rate({P}routing_available_tokens_total{{pool=~"$model"}}{RATE}))',
                    "available {{pool}} {{replica}}",
                ),
                (
                    f'sum by (pool, replica) (rate({P}routing_achieved_cached_tokens_total{{pool=~"$model"}}{RATE}))',
                    "achieved {{pool}} {{replica}}",
                ),
            ],
            desc="Per replica chosen: prompt tokens the index said the fleet held for its requests (the "
            "longest match over every replica) vs what it reported cached. Achieved below available: "
            "requests went where less was cached (spills, a stale index, evictions). "
            "GET /admin/routing/explain shows one request's terms.",
        ),
        timeseries("In-flight requests by replica", [(f"sum by (replica) ({P}in_flight)", "{{replica}}")]),
        row("Response cache and anti-stampede"),
        timeseries(
            "Cache results",
            [(f"sum by (result) (rate({P}cache_requests_total{RATE}))", "{{result}}")],
            unit="reqps",
            stack=True,
        ),
        timeseries(
            "Coalesced requests",
            [(f'sum(rate({P}cache_requests_total{{result="coalesced"}}{RATE}))', "coalesced")],
            unit="reqps",
            desc="Requests answered by following an identical in-flight request instead of going to the fleet.",
        ),
        timeseries(
            "Cache bypass by reason",
            [(f"sum by (reason) (rate({P}cache_bypass_total{RATE}))", "{{reason}}")],
            unit="reqps",
        ),
        timeseries(
            "Rate-limited requests",
            [(f"sum by (tenant, kind) (rate({P}ratelimited_total{RATE}))", "{{tenant}} {{kind}}")],
            unit="reqps",
        ),
        row("Billing"),
        timeseries(
            "Billed tokens by kind",
            [(f"sum by (kind) (rate({P}billed_tokens_total{RATE}))", "{{kind}}")],
            stack=True,
        ),
        timeseries(
            "Billed cost by tenant (per hour)",
            [(f"sum by (tenant) (rate({P}billed_cost_micros_total{RATE})) * 3600 / 1e6", "{{tenant}}")],
            unit="currencyUSD",
        ),
        row("Prompt layout advice"),
        timeseries(
            "Potential saving per day, by tenant and finding",
            [(f"sum by (tenant, kind) ({P}advice_saving_micros_per_day) / 1e6", "{{tenant}} {{kind}}")],
            unit="currencyUSD",
            desc="What each tenant would save per day by changing its prompt layout as GET /admin/advice says "
            "(advisor.enabled in the policy).",
        ),
        timeseries(
            "Layout findings",
            [(f"sum by (tenant, kind) ({P}advice_findings)", "{{tenant}} {{kind}}")],
        ),
        row("Offline batches"),
        stat(
            "Batches in progress",
            f'max({P}batches{{status=~"validating|in_progress|finalizing|cancelling"}}) or vector(0)',
            unit="short",
            desc="Batches that have not ended, from the job store (every pod reports the same count: max).",
        ),
        stat(
            "Batch prompt-cache hit rate",
            ratio(f'{P}batch_tokens_total{{kind="cached"}}', f'{P}batch_tokens_total{{kind="prompt"}}'),
            desc="Cached share of the prompt tokens of answered batch lines: what the shared-prefix order buys.",
        ),
        stat(
            "Batch line failure ratio",
            ratio(f'{P}batch_lines_total{{outcome="failed"}}', f"{P}batch_lines_total"),
            steps=[("green", None), ("orange", 0.01), ("red", 0.05)],
        ),
        stat("Batch line retries", f"sum(rate({P}batch_retries_total{RATE}))", unit="reqps"),
        timeseries(
            "Batches by status",
            [(f"max by (status) ({P}batches)", "{{status}}")],
            desc="From the job store; every pod reports every pod's batches.",
        ),
        timeseries(
            "Batch lines answered",
            [
                (f"sum by (outcome) (rate({P}batch_lines_total{RATE}))", "{{outcome}}"),
                (f"sum(rate({P}batch_stolen_lines_total{RATE}))", "stolen by idle replicas"),
            ],
            unit="reqps",
        ),
        timeseries(
            "Batch tokens by kind",
            [(f"sum by (kind) (rate({P}batch_tokens_total{RATE}))", "{{kind}}")],
        ),
        timeseries(
            "Batch lines in flight by replica",
            [(f"sum by (replica) ({P}batch_in_flight)", "{{replica}}")],
            desc="At most the batch share of each replica (batch.share x batch.replica_slots), less while "
            "its online queue grows.",
        ),
        row("Fairness: saturated pools (fairness.enabled)"),
        stat(
            "TTFT objective attainment",
            ratio(f'{P}ttft_objective_total{{outcome="met"}}', f"{P}ttft_objective_total"),
            desc="Requests with a TTFT objective whose first byte came within it; a request answered 429 "
            "at once as predicted unattainable (outcome shed) counts as missed.",
            steps=[("red", None), ("orange", 0.9), ("green", 0.99)],
        ),
        stat("Requests shed", f"sum(rate({P}fair_shed_total{RATE}))", unit="reqps"),
        stat(
            "Priorities capped",
            f"sum(rate({P}fair_priority_capped_total{RATE}))",
            unit="reqps",
            desc="Requests that asked for a class above their tenant's ceiling and were served at it.",
        ),
        timeseries(
            "Waiting at the gateway by tenant and class",
            [(f"sum by (tenant, priority) ({P}fair_queue_depth)", "{{tenant}} {{priority}}")],
            desc="Requests held while every replica of their pool holds its slots.",
            stack=True,
        ),
        timeseries(
            "Wait at the gateway, p99 by class",
            [
                (
                    f"histogram_quantile(0.99, sum by (le, priority) (rate({P}fair_queue_wait_seconds_bucket{RATE})))",
                    "{{priority}}",
                )
            ],
            unit="s",
        ),
        timeseries(
            "Shed by reason",
            [(f"sum by (priority, reason) (rate({P}fair_shed_total{RATE}))", "{{priority}} {{reason}}")],
            unit="reqps",
            desc="objective: predicted over its TTFT objective (429); tenant_cap: its tenant's queue full "
            "(429); queue_full, preempted, timeout: 503.",
        ),
        timeseries(
            "TTFT objective outcomes by class",
            [
                (
                    f"sum by (priority, outcome) (rate({P}ttft_objective_total{RATE}))",
                    "{{priority}} {{outcome}}",
                )
            ],
            unit="reqps",
        ),
        timeseries(
            "Headroom kept for the highest class (derived)",
            [(f"max by (pool) ({P}fair_headroom_slots)", "{{pool}}")],
            desc="Slots of each replica only the highest class may take, derived from its recent "
            "concurrency (fairness.auto_headroom): the part of its 0.9 quantile it does not hold now.",
        ),
        timeseries(
            "Priority ceilings applied by tenant",
            [(f"sum by (tenant) (rate({P}fair_priority_capped_total{RATE}))", "{{tenant}}")],
            unit="reqps",
        ),
        row("Replicas"),
        replica_health,
    ]


def layout(items: list[Panel]) -> list[Panel]:
    """Place panels left to right on Grafana's 24-column grid; a row header starts a new line."""
    x = y = line_height = 0
    out = []
    for pid, panel in enumerate(items, start=1):
        width = panel.pop("_width")
        height = {"row": 1, "stat": 4}.get(panel["type"], 8)
        if panel["type"] == "row" or x + width > 24:
            y += line_height
            x = line_height = 0
        panel["id"] = pid
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        x += width
        line_height = max(line_height, height)
        out.append(panel)
    return out


def dashboard() -> dict[str, Any]:
    label_query = f"label_values({P}requests_total, model)"
    return {
        "uid": "prefix-gateway",
        "title": "prefix-gateway",
        "description": "Traffic, latency, routing, response cache, rate limits, billing, offline batches and replica health.",
        "tags": ["prefix-gateway", "llm"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-3h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "label": "Data source",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "model",
                    "type": "query",
                    "label": "Model",
                    "datasource": DS,
                    "query": {"query": label_query, "refId": "model"},
                    "definition": label_query,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": layout(panels()),
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
