"""Big batches through a real gateway process: RSS stays bounded and stops growing run over run, and a
50,000-line batch never holds the event loop (issue 31, item 2). The bounds and their history are in
``bench.batch_memory`` (``python -m bench.batch_memory`` runs 9 + 2 batches): here 4 runs of a one-line
10 MB batch, then one of 50,000 lines validated, planned, started, cancelled (every unanswered line
settled and written to the error file), with ``/health`` probed every 20 ms throughout. The gateway
before this change held the loop 300-340 ms in the 50,000-line batch (its plan's one sort of every
line's key, then the cancel's settlement built on the loop)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.batch_memory import GROWTH_BOUND_MIB, RSS_BOUND_MIB, STALL_CPU_BOUND_S, run

BIG, MANY = 3, 1


@pytest.mark.slow
def test_big_batches_keep_rss_bounded_and_never_hold_the_event_loop(tmp_path: Path) -> None:
    result = run(tmp_path, big=BIG, many=MANY)
    assert [r.kind for r in result.runs] == ["big"] * BIG + ["many"] * MANY
    assert [r.status for r in result.runs] == ["completed"] * BIG + ["cancelled"] * MANY
    many = result.runs[-1]
    assert many.counts["total"] == 50_000 and many.counts["completed"] + many.counts["failed"] == 50_000
    assert result.peak_mib() < RSS_BOUND_MIB
    assert result.big_growth_mib() < GROWTH_BOUND_MIB
    assert result.worst_ms("many") < STALL_CPU_BOUND_S * 1000, result.runs
    assert result.probes > 100 and result.probe_failures == 0
