"""The soak as a test: 50,000 requests at concurrency 128 through a gateway process, zero errors,
RSS growth under 50 MB after warm-up, no leaked tasks or connections (see bench/soak.py)."""

from __future__ import annotations

import pytest

from bench.soak import check, run


@pytest.mark.slow
def test_soak_50k_requests_no_errors_no_leaks() -> None:
    result = run(requests=50_000, concurrency=128, warmup=5_000, replicas=2)
    assert result.warm is not None and result.end is not None
    assert check(result) == []
    assert result.errors == 0 and len(result.latencies) == 50_000
