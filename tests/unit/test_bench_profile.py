"""bench.profile charges each py-spy sample to the component doing the work (the leaf-most match)."""

from __future__ import annotations

from pathlib import Path

from bench.profile import _difference, calls_by_component, charge, gc_summary, summarise, thread_rows

HANDLER = "handle (gateway/pipeline/handler.py:80)"
DISPATCH = "attempt_once (gateway/pipeline/dispatch.py:120)"


def test_the_leaf_most_component_wins() -> None:
    client = [HANDLER, DISPATCH, "ClientSession._request (aiohttp/client.py:819)"]
    assert charge(client) == "upstream client"
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


def test_calls_are_charged_by_file_and_a_builtins_to_its_callers() -> None:
    route = ("/x/router/pool.py", 10, "route")
    parse = ("/x/gateway/pipeline/parse.py", 5, "validate")
    builtin = ("~", 0, "<built-in method builtins.len>")
    stats = {
        route: (4, 4, 0.0, 0.0, {}),
        parse: (2, 2, 0.0, 0.0, {}),
        # 6 calls of len: 3 from route, 1 from validate (in pstats' caller tuples: cc, nc, tt, ct)
        builtin: (8, 8, 0.0, 0.0, {route: (6, 6, 0.0, 0.0), parse: (2, 2, 0.0, 0.0)}),
    }
    shares = calls_by_component(stats, 2)
    assert shares == {"routing": 2 + 3, "parse and validate": 1 + 1}


def test_the_difference_leaves_out_what_the_warm_up_alone_called() -> None:
    route = ("/x/router/pool.py", 10, "route")
    start = ("/x/gateway/cli/main.py", 1, "main")
    caller = ("/x/gateway/pipeline/dispatch.py", 3, "dispatch")
    before = {route: (5, 5, 1.0, 1.0, {caller: (5, 5, 1.0, 1.0)}), start: (1, 1, 2.0, 2.0, {})}
    after = {route: (12, 12, 2.0, 2.0, {caller: (12, 12, 2.0, 2.0)}), start: (1, 1, 2.0, 2.0, {})}
    diff = _difference(after, before)
    assert list(diff) == [route]
    assert diff[route][1] == 7 and diff[route][4] == {caller: 7}


def test_the_gc_summary_counts_only_collections_after_the_warm_up() -> None:
    seen = [(0, 0.5, 1.0), (2, 9.0, 1.5), (0, 0.001, 10.0), (0, 0.003, 11.0), (1, 0.002, 12.0)]
    lines = gc_summary(seen, since=5.0, n=10)
    assert (
        lines[0] == "generation 0: 2 collections, CPU p50 3.00 / p99 3.00 / max 3.00 ms, 400.0 us a request"
    )
    assert lines[1].startswith("generation 1: 1 collections, CPU p50 2.00")
    assert lines[2] == "generation 2: no collection"  # the full one ended during the warm-up


def test_thread_rows_put_the_event_loop_first_and_per_request() -> None:
    before = {10: (1.0, 0.5, 1.6, 10, 1), 11: (0.2, 0.1, 0.3, 0, 0), 12: (0.0, 0.0, 0.1, 0, 0)}
    after = {
        10: (3.0, 1.0, 4.1, 510, 201),
        11: (0.6, 0.3, 0.9, 5, 0),
        12: (0.0, 0.0, 0.1, 0, 0),
        13: (0.1, 0.0, 0.1, 1, 1),
    }
    rows = thread_rows(10, before, after, 1000)
    assert [r[0] for r in rows] == ["event loop (main thread)", "thread 11", "thread 13"]  # 12 did not run
    _, user, system, cpu, vol, invol = rows[0]
    assert (round(user, 3), round(system, 3), round(cpu, 3)) == (2.0, 0.5, 2.5)
    assert (vol, invol) == (0.5, 0.2)


def test_aiohttps_shared_modules_are_charged_to_their_caller() -> None:
    read = "StreamReader.read (aiohttp/streams.py:1)"
    write = "StreamWriter.write (aiohttp/http_writer.py:1)"
    client = [HANDLER, DISPATCH, "Upstream.read_all (gateway/upstream/client.py:90)", read]
    server = [
        "RequestHandler.start (aiohttp/web_protocol.py:1)",
        "StreamResponse.write (aiohttp/web_response.py:1)",
        write,
    ]
    assert charge(client) == "upstream client"  # before: "aiohttp server", by the leaf's file
    assert charge(server) == "aiohttp server"
    assert charge([read]) == "aiohttp (shared modules, caller not on the stack)"
    feed = ("/x/aiohttp/streams.py", 1, "feed_data")
    proto = ("/x/aiohttp/client_proto.py", 1, "data_received")
    web = ("/x/aiohttp/web_protocol.py", 1, "data_received")
    stats = {feed: (4, 4, 0.0, 0.0, {proto: (3, 3, 0.0, 0.0), web: (1, 1, 0.0, 0.0)})}
    assert calls_by_component(stats, 1) == {"upstream client": 3, "aiohttp server": 1}
