"""bench.fairness_trace on a few synthetic Mooncake records: tenants by conversation, weights honoured."""

from __future__ import annotations

import orjson

from bench import traces
from bench.fairness import simulate
from bench.fairness_trace import TENANTS, summarize, tenant_of, trace_reqs
from sim.engine import EngineCosts


def _records(tmp_path, n: int) -> list[traces.TraceRecord]:
    path = tmp_path / "t.jsonl"
    lines = []
    for i in range(n):  # conversation i % 8: its own second block, the shared first one
        conv = i % 8
        lines.append(
            {
                "timestamp": i * 20,
                "input_length": 1500,
                "output_length": 64,
                "hash_ids": [0, 1 + conv, 100 + i],
            }
        )
    path.write_bytes(b"\n".join(orjson.dumps(x) for x in lines) + b"\n")
    return traces.read_trace(path, traces.MOONCAKE)


def test_a_conversation_stays_with_one_tenant_and_the_weights_set_the_shares(tmp_path):
    recs = _records(tmp_path, 240)
    assert {tenant_of(r) for r in recs if r.hash_ids[1] == 3} == {tenant_of(recs[2])}
    assert {tenant_of(r) for r in recs} == set(TENANTS)
    scale = traces.Scale(traces.MOONCAKE, 8.0)
    shares = {}
    for mode in ("fifo", "fair"):
        reqs = trace_reqs(recs, scale, 1.0)
        seconds = reqs[-1].at
        run = simulate(
            mode, reqs, 1, 2, seconds, weights={"heavy": 3.0, "light": 1.0}, watch=frozenset(TENANTS),
            costs=EngineCosts().scaled(8.0), fifo_timeout_s=1e9,
        )  # fmt: skip
        shares[mode] = summarize(run.reqs, seconds, 0.0)["per"]["heavy"]["share"]
    assert abs(shares["fifo"] - 0.5) < 0.1  # offered half each, served in arrival order
    assert shares["fair"] > 0.65  # weight 3 of 4 while both are backlogged
