"""bench.fairness in a few model seconds: the modes do what the benchmark says they do."""

from __future__ import annotations

import argparse
import math
from typing import Any

from bench.fairness import (
    CALM,
    _tail_ttfts,
    capacity,
    entitled_shares,
    max_min_shares,
    simulate,
    summarize,
    workload,
)
from bench.fairness_dump import end_waits, pool_tails, waiters
from bench.fairness_procs import (
    HEADROOM,
    MAX_TOKENS,
    MODES,
    SLOTS,
    SMG_PRIORITY,
    SPREAD,
    output_tokens,
    policy,
    report,
)
from bench.fairness_procs import summarize as summarize_procs
from config.policy import Policy


def test_the_fair_queue_keeps_a_flood_from_starving_well_behaved_tenants_where_fifo_does_not():
    cap = capacity(2, 4, seconds=8.0)
    assert 5 < cap < 40
    out = {}
    for mode in ("fifo", "fair"):
        reqs = workload(4.0, 1.0, 10 * cap, 20, seed=1)
        out[mode] = summarize(simulate(mode, reqs, 2, 4, 4.0))
    fair, fifo = out["fair"], out["fifo"]
    assert fair["calm_shed"] == 0 and fair["calm_attain"] == 1.0
    assert fifo["calm_attain"] < 0.5  # behind the flood's FIFO backlog: shed at 5 s, or late
    assert fair["p99"] < 1.0
    assert set(fair["per"]) == set(CALM)
    assert fair["throughput"] > 0.8 * fifo["throughput"]  # a 4 s run: ramp-up dominates


def test_reserved_slots_keep_lower_classes_off_the_last_slots():
    reqs = workload(3.0, 0.0, 200.0, 0, seed=2)  # the flood only, standard class
    run = simulate("fair", reqs, 1, 4, 3.0, reserved=1)
    assert summarize(run)["throughput"] > 0
    assert run.extra["most_in_flight_low"] == 3  # the last of 4 slots is the highest class's
    run = simulate("fair", workload(3.0, 0.0, 200.0, 0, seed=2), 1, 4, 3.0, reserved=0)
    assert run.extra["most_in_flight_low"] == 4


def test_headroom_runs_the_flood_at_the_slots_and_the_engines_one_batch_wider():
    reqs = workload(3.0, 0.0, 200.0, 0, seed=2)  # the flood only, standard class
    run = simulate("fair", reqs, 1, 4, 3.0, headroom=2)
    assert run.extra["most_in_flight_low"] == 4  # the headroom is none of the flood's
    assert run.extra["engine_batch"] == 6
    waits = {}
    for headroom in (0, 2):
        reqs = workload(4.0, 0.3, 200.0, 0, seed=2)  # 1.5 interactive requests a second beside the flood
        run = simulate("fair", reqs, 1, 4, 4.0, headroom=headroom)
        waits[headroom] = sorted(
            r.decision.routed_at - r.at for r in run.reqs if r.tenant in CALM and r.decision
        )
    assert len(waits[2]) >= 4
    assert waits[2][len(waits[2]) * 3 // 4] == 0.0  # most find the headroom free at once
    assert sum(waits[0]) > 5 * sum(waits[2])  # without it they wait for one of the flood's to end


def test_the_sockets_benchmark_builds_valid_policies_and_an_smg_config_that_fits_its_capacity():
    urls = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    fair = Policy.model_validate(policy("fair", urls)).fairness
    assert fair.enabled and (fair.slots_per_replica, fair.headroom_slots) == (SLOTS, HEADROOM)
    assert Policy.model_validate(policy("fifo", urls)).limits.max_concurrent_per_replica == SLOTS
    assert not Policy.model_validate(policy("none", urls)).fairness.enabled
    assert set(MODES) == {
        "alone",
        "none",
        "fifo",
        "fair",
        "fair-prefill",
        "fair-headroom3",
        "fair-headroom3-prio",
        "fair-auto",
        "smg",
    }
    auto = Policy.model_validate(policy("fair-auto", urls)).fairness
    assert auto.auto_headroom and (auto.slots_per_replica, auto.headroom_slots) == (SLOTS + HEADROOM, 0)
    bounded = Policy.model_validate(policy("fair-prefill", urls, 512)).fairness
    assert (bounded.max_queued_prefill_tokens, bounded.headroom_slots) == (512, HEADROOM)
    wider = Policy.model_validate(policy("fair-headroom3", urls)).fairness
    assert wider.slots_per_replica + wider.headroom_slots == SLOTS + HEADROOM  # the same engine batch
    prio = Policy.model_validate(policy("fair-headroom3-prio", urls))
    assert (
        prio.models[0].engine_priority == "vllm" and prio.fairness == wider
    )  # fair-headroom3, and the field
    assert Policy.model_validate(policy("fair-headroom3", urls)).models[0].engine_priority == "none"
    classes = SMG_PRIORITY["classes"]
    assert set(classes) == {"system", "interactive", "default", "bulk"}  # smg's four, all required
    assert sum(c["reserved_floor"] for c in classes.values()) <= SLOTS * len(urls)  # else it falls back


def test_entitled_shares_are_weighted_max_min_of_what_each_tenant_offers():
    # the five ask 1 each, less than a sixth of 20: the flood (always backlogged) is entitled to the rest
    offered = {**{t: 1.0 for t in CALM}, "flood": math.inf}
    assert max_min_shares(offered, {}, 20.0) == {**{t: 1.0 for t in CALM}, "flood": 15.0}
    assert entitled_shares(offered, 20.0)["flood"] == 0.75
    # everyone backlogged: the weights' shares (3 : 1)
    assert max_min_shares({"h": math.inf, "l": math.inf}, {"h": 3, "l": 1}, 8.0) == {"h": 6.0, "l": 2.0}
    # the light one asks less than its weight's part: it gets what it asks, the heavy one the rest
    assert max_min_shares({"h": 10.0, "l": 1.0}, {"h": 3, "l": 1}, 8.0) == {"h": 7.0, "l": 1.0}
    # capacity beyond every demand: nobody is entitled to more than it asked
    assert max_min_shares({"a": 1.0, "b": 2.0}, {}, 10.0) == {"a": 1.0, "b": 2.0}
    # the flood asks for 10 x the fleet while the others are backlogged too: each its sixth
    backlogged = {**{t: 100.0 for t in CALM}, "flood": 1000.0}
    assert math.isclose(entitled_shares(backlogged, 60.0)["flood"], 1 / 6)


def test_the_report_counts_the_floods_entitled_share_from_the_offered_requests():
    cap = capacity(2, 4, seconds=8.0)
    reqs = workload(4.0, 1.0, 10 * cap, 0, seed=1)
    s = summarize(simulate("fifo", reqs, 2, 4, 4.0))
    assert 0.5 < s["flood_entitled"] < 1.0  # what the five leave of the completions
    assert math.isnan(
        summarize(simulate("alone", workload(4.0, 1.0, 0.0, 0, seed=1), 2, 4, 4.0))["flood_entitled"]
    )


def test_the_dump_reader_finds_the_end_free_gap_a_waiting_request_fell_in():
    # one replica's view: three flood streams end at 1.0 / 1.0 / 2.0; three well-behaved streams come at
    # 1.1, 1.2 and 1.3 (queued 0.7 s: admitted at 2.0, after the next end)
    def gen(rep: int, at: float, end: float, calm: bool) -> dict[str, object]:
        return {"replica": rep, "received_at": at, "first_write_at": at + 0.05 + at / 100, "finished_at": end,
                "calm": calm}  # fmt: skip

    gens = [gen(0, 0.0, 1.0, False), gen(0, 0.0, 1.0, False), gen(0, 0.0, 2.0, False)]
    gens += [gen(0, 1.1, 2.5, True), gen(0, 1.2, 2.6, True), gen(0, 2.001, 3.0, True)]
    waited = gens[-1]
    row = {"tenant": "calm0", "replica": "r0", "queue": 0.7, "hop": 0.001,
           "engine": waited["first_write_at"] - waited["received_at"]}  # fmt: skip
    (w,) = waiters(gens, [row, {"tenant": "calm1", "replica": "r0", "queue": 0.0}])
    assert w["gap_start"] == 1.0 and abs(w["gap"] - 1.0) < 1e-9  # the end at 1.0 to the one at 2.0
    assert w["came"] == 3  # two at the replica, one queued
    assert (w["class_open"], w["flood_open"]) == (0, 1)  # 10 ms after 1.0: the third flood stream
    assert [round(x, 3) for x in end_waits([1.0, 2.0], 0.5, 1.5, 0.25)] == [0.5, 0.25, 1.0, 0.75]


def test_spread_tokens_vary_each_requests_output_around_the_same_mean_from_a_generator_of_their_own():
    assert {output_tokens(False, "flood", 0, i) for i in range(50)} == {MAX_TOKENS}
    spread = [output_tokens(True, "flood", 0, i) for i in range(2000)]
    assert min(spread) >= SPREAD[0] and max(spread) <= SPREAD[1] and len(set(spread)) > 50
    assert abs(sum(spread) / len(spread) - MAX_TOKENS) < 3  # the same mean: the same work a request
    assert spread[:20] == [output_tokens(True, "flood", 0, i) for i in range(20)]  # a run repeats
    assert spread[:20] != [output_tokens(True, "flood", 1000, i) for i in range(20)]  # each run its own


def test_the_tails_count_every_request_a_shed_one_as_no_first_token():
    cap = capacity(2, 4, seconds=8.0)
    run = simulate("fifo", workload(6.0, 1.0, 10 * cap, 0, seed=1), 2, 4, 6.0)
    for t in CALM:
        xs = _tail_ttfts(run, t)
        mine = [r for r in run.reqs if r.tenant == t]
        assert len(xs) == len(mine) and xs.count(math.inf) == sum(1 for r in mine if r.first is None)
    assert sum(r.shed is not None for r in run.reqs if r.tenant in CALM) > 0  # FIFO sheds some at 5 s


def test_the_sockets_report_judges_each_tenant_on_its_runs_pooled_against_its_own_alone():
    def res(scale: dict[str, float], unanswered: int) -> dict[str, Any]:
        calm = {
            t: {"ttfts": [scale.get(t, 1.0) * (0.1 + i / 4000) for i in range(400)], "errors": {"503": unanswered},
                "sent": 400 + unanswered, "traced": []}
            for t in CALM
        }  # fmt: skip
        return {"calm": calm, "flood": None, "wall": 10.0}

    runs = [
        {"alone": summarize_procs(res({}, 0), 10.0), "fair": summarize_procs(res({"calm0": 3.0}, 0), 10.0)},
        {"alone": summarize_procs(res({}, 0), 10.0), "fair": summarize_procs(res({}, 5), 10.0)},
    ]
    assert runs[1]["fair"]["per_tail"]["calm1"].count(math.inf) == 5
    args = argparse.Namespace(seconds=10.0, flood_concurrency=48, spread_tokens=False, runs=2)
    md = report(runs, [{"alone": "0.5", "fair": "0.5"}] * 2, "cmd", args)
    p99 = md.split("| mode | n a tenant | pooled p99 x alone |")[1].splitlines()
    fair = next(line for line in p99 if line.startswith("| fair |"))
    cells = [c.strip() for c in fair.strip("|").split("|")]
    assert cells[1] == "805-805"  # 2 x 400 answered + 5 not, every tenant
    assert cells[3].endswith("missed")  # calm0 at 3 x alone in one of its two runs
    # calm1 as alone but 5 of 805 unanswered (inf): 1.00 x, and the interval's top rank falls on them
    assert cells[4].startswith("1.00 [0.99, open]") and cells[4].endswith("unresolved")


def test_the_dump_reader_pools_tails_over_dumps_and_leaves_out_a_loaded_run():
    def run(x: float) -> dict[str, Any]:
        return {"per_tail": {t: [x, x, "Infinity" if x > 1 else x] for t in CALM}}

    a = {"runs": [{"alone": run(0.1), "fair": run(0.2)}], "loads": [{"alone": "1.0", "fair": "5.0"}]}
    b = {"runs": [{"alone": run(0.1), "fair": run(2.0)}], "loads": [{"alone": "2.0", "fair": "2.5"}]}
    tails, left = pool_tails([a, b], max_load=3.0)
    assert left == 1 and len(tails["alone"]["calm0"]) == 6
    assert tails["fair"]["calm3"] == [
        2.0,
        2.0,
        math.inf,
    ]  # a's fair run (load 5) left out; JSON's inf read back
    assert pool_tails([a, b])[1] == 0 and len(pool_tails([a, b])[0]["fair"]["calm0"]) == 6


def test_engine_priority_lets_interactive_requests_pass_the_floods_engine_queue():
    """No gateway queue, the flood in the engines' queues: FCFS engines make an interactive request
    wait behind it; priority engines (each request carrying its band) admit it at the next free seat."""
    worst = {}
    for prio in (False, True):
        reqs = workload(4.0, 0.5, 150.0, 0, seed=3)
        run = simulate("none", reqs, 1, 4, 4.0, engine_priority=prio)
        calm = [r.first - r.at if r.first is not None else math.inf for r in run.reqs if r.tenant in CALM]
        assert len(calm) >= 5
        worst[prio] = max(calm)  # one never answered (past the horizon): inf
        found, sent, _ = summarize(run)["engine_queue"]
        assert found == sent > 0  # every one found the flood queued in the engine
    assert worst[True] < 1.0 < worst[False]


def test_the_engine_time_splits_at_the_step_that_first_scheduled_the_request():
    reqs = workload(3.0, 1.0, 60.0, 0, seed=4)
    run = simulate("fair", reqs, 1, 4, 3.0, headroom=2)
    served = [r for r in run.reqs if r.tenant in CALM and r.first is not None]
    assert served and all(r.decision.routed_at <= r.scheduled < r.first for r in served)  # type: ignore[union-attr,operator]
    parts = summarize(run)["engine_parts"]
    assert len(parts) == 6 and parts[2] >= parts[0] >= 0 and parts[5] >= parts[3] > 0
