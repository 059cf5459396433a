"""The soak's leak checks as a test: 3,000 requests at concurrency 128 through a gateway process, zero
errors, RSS growth under 50 MB after the warm-up, no leaked tasks or connections at rest (bench/soak.py).
A leak of a task or a connection per request shows after any number of requests; the 50,000-request
soak, whose RSS curve is the measurement, is ``python -m bench.soak`` (docs/benchmarks.md)."""

from __future__ import annotations

import pytest

from bench.soak import check, run


@pytest.mark.slow
def test_soak_no_errors_no_leaks() -> None:
    result = run(requests=3_000, concurrency=128, warmup=1_000, replicas=2)
    assert result.warm is not None and result.end is not None
    assert check(result) == []
    assert result.errors == 0 and len(result.latencies) == 3_000
