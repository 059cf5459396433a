"""The soak as a test: 10,000 requests at concurrency 128 through a gateway process, zero errors,
RSS growth under 50 MB after warm-up, no leaked tasks or connections (see bench/soak.py). The full
50,000-request soak is ``python -m bench.soak`` (docs/benchmarks.md); this one is sized to CI's budget."""

from __future__ import annotations

import pytest

from bench.soak import check, run


@pytest.mark.slow
def test_soak_10k_requests_no_errors_no_leaks() -> None:
    result = run(requests=10_000, concurrency=128, warmup=2_500, replicas=2)
    assert result.warm is not None and result.end is not None
    assert check(result) == []
    assert result.errors == 0 and len(result.latencies) == 10_000
