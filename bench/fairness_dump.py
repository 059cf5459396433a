"""What a ``bench.fairness_procs --dump`` file says about the slow well-behaved requests: the gaps between ends.

    python -m bench.fairness_dump DUMP.json [--modes fair-headroom3 fair-auto ...]
    python -m bench.fairness_dump DUMP.json [DUMP.json ...] --tails [--max-load 3]

Reads the dump's simulator generations (each stream's replica, arrival at the replica, end, whether
a well-behaved tenant sent it) and its ``where`` rows (each answered well-behaved request's parts,
``queue``: seconds in the gateway's fair queue). A request that waits there waits for an end: a slot
frees only when some stream ends. So per run and mode:

- the well-behaved streams' peak count at the replicas (the class's own burst: ``alone`` has it too);
- the ends: per second, and the wait from an instant to the next end of any stream (mean / p99 over
  a 1 ms grid), against the ``1 / rate`` that ends at random would leave: with every stream of the
  same length (the bench's ``max_tokens``) and a closed-loop flood, streams admitted together end
  together;
- each request that waited (queue > 10 ms): the end-free gap it fell in (the last end at or before
  it was queued to the next one), the streams open 10 ms into that gap (the slot its end freed
  taken) and the slots free then (the two replicas' engine batches of 10, less those), and the
  well-behaved requests that came in it (to the replicas, or queued). A wait means more of the class
  came in one gap than were free at its start: no slot frees before the gap's end.

Model-free and offline: only the dump's wall clocks (one machine, one clock).
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
from pathlib import Path
from typing import Any

from bench.fairness import CALM, tails_md
from bench.fairness_procs import HEADROOM, SLOTS
from bench.report import percentile, table

WAITED_S = 0.01  # a request queued longer than this waited for an end
GRID_S = 0.001
SETTLE_S = 0.01  # after an end, the freed slot is taken (the hop to the replica) within this


def _open_at(gens: list[dict[str, Any]], at: float, calm: bool | None = None) -> int:
    return sum(
        1
        for g in gens
        if g["received_at"] <= at < (g.get("finished_at") or float("inf"))
        and (calm is None or g["calm"] == calm)
    )


def _peak(gens: list[dict[str, Any]]) -> tuple[int, float]:
    """The well-behaved streams' most open at once, and when (seconds from the first stream)."""
    t0 = min(g["received_at"] for g in gens)
    ev = sorted(
        [(g["received_at"], 1) for g in gens if g["calm"]]
        + [(g["finished_at"], -1) for g in gens if g["calm"] and g.get("finished_at")]
    )
    n, best = 0, (0, 0.0)
    for at, step in ev:
        n += step
        if n > best[0]:
            best = (n, at - t0)
    return best


def end_waits(ends: list[float], start: float, stop: float, step: float = GRID_S) -> list[float]:
    """From each instant of a grid over [start, stop) to the next end (``ends`` sorted)."""
    out, t = [], start
    while t < stop:
        i = bisect.bisect_right(ends, t)
        if i < len(ends):
            out.append(ends[i] - t)
        t += step
    return out


def waiters(gens: list[dict[str, Any]], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each request that waited in the gateway's queue: the end-free gap it fell in, the streams open
    just after the gap began (``SETTLE_S``: the slot that end freed taken) and the well-behaved
    requests that came to the gateway in the gap (at the replicas, or queued)."""
    ends = sorted(g["finished_at"] for g in gens if g.get("finished_at"))
    t0 = min(g["received_at"] for g in gens)
    found: list[tuple[dict[str, Any], int, float]] = []  # (row, its generation's index, queued at)
    for r in rows:
        if r.get("queue", 0.0) <= WAITED_S or "engine" not in r or "hop" not in r:
            continue
        rid = int(str(r.get("replica", "r0")).lstrip("r") or 0)
        match = [
            i
            for i, g in enumerate(gens)
            if g["calm"]
            and g["replica"] == rid
            and g.get("first_write_at") is not None
            and abs(g["first_write_at"] - g["received_at"] - r["engine"]) < 1e-6
        ]
        if len(match) == 1:
            found.append((r, match[0], gens[match[0]]["received_at"] - r["hop"] - r["queue"]))
    waited = {i for _, i, _ in found}
    out = []
    for r, _, queued in found:
        i = bisect.bisect_right(ends, queued)
        start = ends[i - 1] if i else t0
        stop = ends[i] if i < len(ends) else float("inf")
        came = sum(
            1
            for j, g in enumerate(gens)
            if g["calm"] and j not in waited and start < g["received_at"] <= stop
        ) + sum(1 for _, _, q in found if start < q <= stop)
        settled = start + SETTLE_S
        out.append({
            "tenant": r["tenant"], "queue": r["queue"], "queued_at": queued - t0, "gap": stop - start,
            "gap_start": start - t0, "came": came, "class_open": _open_at(gens, settled, True),
            "flood_open": _open_at(gens, settled, False),
        })  # fmt: skip
    return out


def analyze(dump: dict[str, Any], modes: list[str] | None = None) -> str:
    slots = 2 * (SLOTS + HEADROOM)  # the bench's two replicas, each an engine batch of 10
    rows, waits = [], []
    for key, gens in dump["generations"].items():
        run, mode = key.split(":", 1)
        if (modes and mode not in modes) or not gens:
            continue
        n, at = _peak(gens)
        ends = sorted(g["finished_at"] for g in gens if g.get("finished_at"))
        t0 = min(g["received_at"] for g in gens)
        span = ends[-1] - t0 if ends else 0.0
        grid = end_waits(ends, t0 + 0.5, ends[-1] - 1.0) if span > 2 else []
        rows.append([
            int(run) + 1, mode, f"{n} at {at:.2f} s", f"{len(ends) / span:.1f}" if span else "-",
            f"{span / len(ends):.3f}" if ends else "-",
            f"{sum(grid) / len(grid):.3f} / {percentile(grid, 99):.3f}" if grid else "-",
        ])  # fmt: skip
        for w in waiters(gens, dump["where"].get(key, [])):
            waits.append([
                int(run) + 1, mode, w["tenant"], f"{w['queue']:.3f}", f"{w['queued_at']:.2f}",
                f"{w['gap_start']:.2f} + {w['gap']:.3f}", f"{w['class_open']} / {w['flood_open']}",
                slots - w["class_open"] - w["flood_open"], w["came"],
            ])  # fmt: skip
    out = table(
        ["run", "mode", "well-behaved peak open", "ends /s", "1 / rate s", "to the next end: mean / p99 s"],
        rows,
    )
    if waits:
        out += "\n\nEach well-behaved request that waited in the gateway's queue (> 10 ms):\n\n" + table(
            ["run", "mode", "tenant", "queue s", "queued at s", "end-free gap: start + length s",
             "open 10 ms in: well-behaved / flood", "free then", "well-behaved requests in it"],
            waits,
        )  # fmt: skip
    return out


def pool_tails(
    dumps: list[dict[str, Any]], max_load: float = math.inf
) -> tuple[dict[str, dict[str, list[float]]], int]:
    """Each mode's tenants' requests (``per_tail``) over every run of every dump whose load after that mode
    was at most ``max_load``; and how many (run, mode) were left out for it."""
    out: dict[str, dict[str, list[float]]] = {}
    left = 0
    for d in dumps:
        for run, load in zip(d["runs"], d["loads"], strict=True):
            for mode, s in run.items():
                if float(load.get(mode, "nan")) > max_load:
                    left += 1
                    continue
                per = out.setdefault(mode, {t: [] for t in CALM})
                for t in CALM:
                    per[t] += [float(x) for x in s["per_tail"][t]]
    return out, left


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dump", type=Path, nargs="+")
    ap.add_argument("--modes", nargs="*", help="only these modes (default: every one in the dump)")
    ap.add_argument(
        "--tails", action="store_true",
        help="instead: each tenant's p95/p99 x its alone pooled over every run of every dump (bench.tails)",
    )  # fmt: skip
    ap.add_argument(
        "--max-load", type=float, default=math.inf, help="--tails: leave out a mode's run past this load"
    )
    args = ap.parse_args(argv)
    dumps = [json.loads(p.read_text()) for p in args.dump]
    if args.tails:
        tails, left = pool_tails(dumps, args.max_load)
        runs = sum(len(d["runs"]) for d in dumps)
        if "alone" not in tails:
            print(
                f"no alone run at load <= {args.max_load:g} ({left} (run, mode) left out): nothing to compare"
            )
            return
        print(
            tails_md(
                tails,
                "alone",
                f"{runs} run(s) of {len(dumps)} dump(s), {left} (run, mode) past load {args.max_load:g} left out",
            )
        )
        return
    for d in dumps:
        print(analyze(d, args.modes))


if __name__ == "__main__":
    main()
