"""bench.profile charges each py-spy sample to the component doing the work (the leaf-most match)."""

from __future__ import annotations

from pathlib import Path

from bench.profile import charge, summarise

HANDLER = "handle (gateway/pipeline/handler.py:80)"
DISPATCH = "attempt_once (gateway/pipeline/dispatch.py:120)"


def test_the_leaf_most_component_wins() -> None:
    client = [HANDLER, DISPATCH, "ClientSession._request (aiohttp/client.py:819)"]
    assert charge(client) == "aiohttp client"
    assert charge([HANDLER, DISPATCH]) == "other gateway code"
    assert charge([HANDLER, DISPATCH, "PoolRouter.route (router/pool.py:10)"]) == "routing"
    assert charge(
        ["Thread.run (threading.py:1)", "SqliteLedger._run (cache/billing/ledger_sqlite.py:1)"]
    ) == ("billing ledger thread")
    assert charge(["<module> (x.py:1)"]) == "other (interpreter, GC, libraries)"


def test_shares_add_up(tmp_path: Path) -> None:
    raw = tmp_path / "stacks.txt"
    raw.write_text(f"{HANDLER};{DISPATCH} 3\n{HANDLER};PoolRouter.route (router/pool.py:10) 1\n")
    shares = dict(summarise(raw))
    assert shares == {"other gateway code": 0.75, "routing": 0.25}
