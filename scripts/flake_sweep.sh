#!/usr/bin/env bash
# Flake sweep: run tests many times while every core is kept busy, and count each test's failures.
#
#   scripts/flake_sweep.sh                      # 20 runs of the process-level suites (below), CPU hog on
#   scripts/flake_sweep.sh -n 5 tests           # 5 runs of the whole suite (the issue-32 acceptance run)
#   scripts/flake_sweep.sh -n 20 -k stalled tests/integration/test_multigw_e2e.py
#   scripts/flake_sweep.sh --no-hog -n 3 tests/fault
#   scripts/flake_sweep.sh --starve 12 -n 3 tests/fault   # 12 workers on one core at nice 19, no hog
#
# Default selection: tests/integration tests/fault tests/durability tests/load, the tests that start
# real processes, sockets and Redis servers and so can depend on scheduling. The hog is one busy
# Python loop per core (nproc), started before the first run and killed when the sweep ends.
# Each run is the README's test command on the selection (pyproject's addopts: four xdist workers), so
# the sweep sees the same parallelism CI does. --starve W instead runs W workers pinned to one core at
# nice 19 and no hog: each test worker gets a few percent of a core, as at load 15-20, while the
# machine's other users keep their share (a shared machine: no busy loop added). Logs go to $FLAKE_DIR
# (default .flake/<timestamp>/):
# run-N.log per run, failures.txt (test id, times failed), summary.txt. Exit status: 0 when no test
# failed in any run, 1 otherwise. See docs/testing.md.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=20
hog=1
starve=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="$2"; shift 2 ;;
        --no-hog) hog=0; shift ;;
        --starve) starve="$2"; hog=0; shift 2 ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) args+=("$1"); shift ;;
    esac
done
if [ ${#args[@]} -eq 0 ] || [ "${args[-1]:0:1}" = "-" ]; then
    args+=(tests/integration tests/fault tests/durability tests/load)
fi

py=.venv/bin/python
[ -x "$py" ] || { echo "no .venv: run the README's test set-up first" >&2; exit 2; }
run=("$py" -m pytest)
if [ -n "$starve" ]; then
    run=(nice -n 19 taskset -c 0 "$py" -m pytest -n "$starve")
fi
dir="${FLAKE_DIR:-.flake/$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$dir"

hogs=()
run_pid=""
stop_hogs() { for p in "${hogs[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done; }
# Interrupted (Ctrl-C, kill): stop the run in progress and the hogs, and end the sweep (a trap that only
# stopped the hogs let the loop start the next run). The run is a process group of its own (setsid), and
# the whole group is stopped: a TERM to pytest alone left its xdist workers running, orphaned.
stop_all() { [ -n "$run_pid" ] && kill -TERM -- "-$run_pid" 2>/dev/null; stop_hogs; exit 130; }
trap stop_hogs EXIT
trap stop_all INT TERM
if [ "$hog" = 1 ]; then
    for _ in $(seq "$(nproc)"); do
        "$py" -c "while True: pass" &
        hogs+=($!)
    done
fi

load="hog: $([ "$hog" = 1 ] && echo "$(nproc) busy loops" || echo off)"
[ -n "$starve" ] && load="starved: $starve workers on one core at nice 19"
echo "flake sweep: $runs runs of ${args[*]} ($load); logs in $dir"
: > "$dir/failed-ids.txt"
for i in $(seq "$runs"); do
    start=$(date +%s)
    set +e
    setsid "${run[@]}" -q -p no:cacheprovider -rfE "${args[@]}" > "$dir/run-$i.log" 2>&1 &
    run_pid=$!
    wait "$run_pid"
    rc=$?
    run_pid=""
    set -e
    wall=$(( $(date +%s) - start ))
    grep -E '^(FAILED|ERROR) ' "$dir/run-$i.log" | sed -E 's/^(FAILED|ERROR) ([^ ]+).*/\2/' >> "$dir/failed-ids.txt" || true
    echo "run $i/$runs: exit $rc in ${wall}s: $(tail -n 1 "$dir/run-$i.log")" | tee -a "$dir/summary.txt"
done
sort "$dir/failed-ids.txt" | uniq -c | sort -rn > "$dir/failures.txt"
if [ -s "$dir/failures.txt" ]; then
    echo "failures (times failed, test):"
    cat "$dir/failures.txt"
    exit 1
fi
echo "no failure in $runs runs"
