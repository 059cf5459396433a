"""Issue 19, item 3: a stalled Redis must not slow everything down.

A real redis-server holds the response cache, coalescing leases, buckets and the billing ledger of a
real gateway process under load; it is SIGSTOPped (a partition: its sockets stay open, nothing
answers) for a few seconds, then resumed. Before the deadline and breaker, cacheable requests took
about 4 s each meanwhile and the others 1 s (``python -m bench.redis_stall --baseline``). Now: nothing
fails, both kinds stay near their normal latency, the cache serves hits again after SIGCONT and every
answered request has its ledger row.
"""

from __future__ import annotations

import asyncio

from bench.redis_stall import KINDS, scenario


def test_a_sigstopped_redis_costs_requests_almost_nothing_and_everything_recovers() -> None:
    r = asyncio.run(
        scenario("test", before_s=2.0, stall_s=3.0, after_s=3.0, concurrency=8, keys=20, ledger_wait_s=20.0)
    )
    assert r.failures() == 0, [s.status for s in r.samples if s.status != 200][:10]
    for kind in KINDS:
        before, stalled, after = (r.p50_ms(p, kind) for p in ("before", "stalled", "after"))
        assert stalled <= 5 * before + 100, (kind, before, stalled)  # was ~4,000 ms (cacheable), ~1,000 ms
        assert after <= 5 * before + 100, (kind, before, after)
        rate_before = len(r.select("before", kind)) / 2.0
        assert len(r.select("stalled", kind)) / 3.0 >= rate_before / 4, kind  # was 2 a second at most
    assert any(s.cache == "hit" for s in r.select("after", "cacheable")), "the cache serves again"
    assert r.ledger_rows == r.answered()  # rows refused during the stall were kept and written
    assert 'prefix_gateway_redis_breaker_transitions_total{to="open"}' in r.metrics
    assert "prefix_gateway_redis_breaker_state 0.0" in r.metrics  # closed again
