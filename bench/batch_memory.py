"""RSS and the longest event-loop stall of a gateway process through big batches (issue 31, item 2).

    python -m bench.batch_memory                      # 9 runs of a one-line 10 MB batch, 2 of 50,000 lines
    python -m bench.batch_memory --big 3 --many 1     # what tests/load/test_batch_memory.py runs
    python -m bench.batch_memory --checkout /tmp/old  # another checkout's gateway (before/after)
    python -m bench.batch_memory --shape parts --big 12 --many 0  # the big line as 110,000 parts

A real ``prefix-gateway serve`` process (batches on, SQLite job store, the default limits) in front of
a simulator that answers at once. Each batch is uploaded, created and followed over HTTP; RSS is read
from ``/proc/PID/status`` (``VmRSS``) after each batch has ended. A prober thread sends ``GET /health``
every ``PROBE_INTERVAL_S`` on its own connection the whole time (the event loop answers it in well
under a millisecond), and records two lengths of each answer:

- **wall**: how long it took. On a quiet machine that is the longest the loop was held; on a loaded
  one it is mostly waiting for a CPU (two cores shared by a dozen busy processes made every answer
  25-70 ms, whatever the gateway did).
- **cpu**: how much CPU the gateway process (every thread) ran while the answer was awaited
  (``/proc/PID/stat``, 10 ms ticks). A loop held by the gateway's own work is held by CPU it runs, and
  that CPU is the same on a loaded machine: this is the bound the test asserts, ``STALL_CPU_BOUND_S``.

The batches:

- **big**: one line whose body is ``BIG_LINE_BYTES`` of one user message (within
  ``limits.max_body_bytes``; longer than ``limits.max_prompt_chars``, so the request path answers it 400
  and it lands in the error file, as such a line would in production). Its run ends ``completed``.
- **many**: ``MANY_LINES`` short chat lines from 50 templates (``bench.batch_workload.make_batch``). It is
  validated, planned, started; once one line has an answer it is cancelled, so every other line is
  settled ``batch_cancelled`` and written to the error file: validation, planning, the runner's start,
  the cancel's settling and the result file, without 50,000 answers to wait for.

The issue measured, on the gateway before this change: RSS 106 → 185 MB after the first big run, 340 MB
after about nine; one 318 ms stall in a 50,000-line batch. The bounds: ``RSS_BOUND_MIB`` (the 256 MiB
docs/operations.md gives for online bodies), ``GROWTH_BOUND_MIB`` from the second big run to the last,
``STALL_CPU_BOUND_S`` (``tests/load/test_batch_memory.py`` asserts them).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import httpx
import orjson
import yaml

from bench.batch_workload import URL, make_batch
from bench.procs import Proc, running, start_gateway, start_sim

MiB = 1024 * 1024
BIG_LINE_BYTES = 10 * 1000 * 1000
MANY_LINES = 50_000
PROBE_INTERVAL_S = 0.02
RSS_BOUND_MIB = 256
GROWTH_BOUND_MIB = 24
STALL_CPU_BOUND_S = 0.1
BATCH_TIMEOUT_S = 120.0


SHAPES = ("text", "parts")


def big_file(shape: str = "text") -> bytes:
    """One line of about ``BIG_LINE_BYTES``: one message of that much text (``text``), or one message of
    text parts of 100 bytes each (``parts``: 110,000 of them, 330,000 objects once parsed)."""
    if shape == "parts":
        part = {"type": "text", "text": "lorem ipsum dolor sit amet " * 3}
        content: Any = [part] * (BIG_LINE_BYTES // 108)
    else:
        content = ("lorem ipsum dolor sit amet " * (BIG_LINE_BYTES // 27 + 1))[: BIG_LINE_BYTES - 200]
    line = {
        "custom_id": "big",
        "method": "POST",
        "url": URL,
        "body": {"model": "sim-llama", "max_tokens": 4, "messages": [{"role": "user", "content": content}]},
    }
    return orjson.dumps(line) + b"\n"


def many_file(lines: int = MANY_LINES) -> bytes:
    return make_batch(
        seed=31,
        requests=lines,
        templates=50,
        system_tokens=(40, 160),
        preambles=2,
        preamble_tokens=(16, 48),
        user_tokens=(4, 16),
        max_tokens=(1, 2),
    ).jsonl()


def rss_mib(pid: int) -> float:
    for row in Path(f"/proc/{pid}/status").read_text().splitlines():
        if row.startswith("VmRSS:"):
            return int(row.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for {pid}")


_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """CPU seconds the process has run, all its threads (``utime + stime`` of ``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


class Prober:
    """``GET /health`` every ``interval`` on a thread: of every answer, when it was asked, how long it
    took, and how much CPU the gateway process ran meanwhile (its threads together)."""

    def __init__(self, url: str, pid: int, interval: float = PROBE_INTERVAL_S):
        self.url, self.pid, self.interval = url + "/health", pid, interval
        self.samples: list[tuple[float, float, float]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def probes(self) -> int:
        return len(self.samples)

    def worst(self, start: float, end: float, cpu: bool = False) -> float:
        """The longest answer to a probe that was out at some time between ``start`` and ``end``: in
        seconds, or (``cpu``) in the gateway's CPU seconds while it was out."""
        out = (c if cpu else s for t, s, c in self.samples if t <= end and t + s >= start)
        return max(out, default=0.0)

    def _run(self) -> None:
        with httpx.Client(timeout=30) as c:
            while not self._stop.is_set():
                c0, t0 = cpu_s(self.pid), time.perf_counter()
                try:
                    c.get(self.url).raise_for_status()
                except httpx.HTTPError:
                    self.failures += 1
                self.samples.append((t0, time.perf_counter() - t0, cpu_s(self.pid) - c0))
                self._stop.wait(self.interval)


@dataclass
class Run:
    kind: str
    status: str
    seconds: float
    rss_mib: float
    wall_ms: dict[str, float]  # per phase of the batch: the longest /health answer
    cpu_ms: dict[str, float]  # per phase: the most gateway CPU while one /health answer was awaited
    counts: dict[str, int]


@dataclass
class Result:
    rss_start_mib: float = 0.0
    runs: list[Run] = field(default_factory=list)
    probes: int = 0
    probe_failures: int = 0

    def peak_mib(self) -> float:
        return max(r.rss_mib for r in self.runs)

    def big_growth_mib(self) -> float:
        """RSS growth from the second big run to the last (the first pays the warm-up)."""
        big = [r.rss_mib for r in self.runs if r.kind == "big"]
        return big[-1] - big[1] if len(big) > 1 else 0.0

    def worst_ms(self, kind: str | None = None, cpu: bool = True) -> float:
        """The longest stall of the runs (of ``kind``): in gateway CPU (``cpu``), else wall time."""
        runs = [r for r in self.runs if kind is None or r.kind == kind]
        return max(max((r.cpu_ms if cpu else r.wall_ms).values()) for r in runs)

    def problems(self) -> list[str]:
        out = []
        if self.peak_mib() >= RSS_BOUND_MIB:
            out.append(f"peak RSS {self.peak_mib():.0f} MiB (bound {RSS_BOUND_MIB})")
        if self.big_growth_mib() >= GROWTH_BOUND_MIB:
            out.append(
                f"RSS grew {self.big_growth_mib():.0f} MiB over the big runs (bound {GROWTH_BOUND_MIB})"
            )
        if self.worst_ms() >= STALL_CPU_BOUND_S * 1000:
            out.append(
                f"a /health answer waited on {self.worst_ms():.0f} ms of gateway CPU "
                f"(bound {STALL_CPU_BOUND_S * 1000:.0f})"
            )
        if self.probe_failures:
            out.append(f"{self.probe_failures} /health probes failed")
        want = {"big": "completed", "many": "cancelled"}
        out += [f"{r.kind} batch ended {r.status}" for r in self.runs if r.status != want[r.kind]]
        return out


def _policy(workdir: Path, urls: list[str]) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": 8080, "access_log": False},
        "models": [
            {"name": "sim-llama", "replicas": [{"id": f"r{i}", "url": u} for i, u in enumerate(urls)]}
        ],
        "billing": {"ledger": {"path": str(workdir / "ledger.db")}},
        "batch": {
            "enabled": True,
            "dir": str(workdir / "files"),
            "sqlite_path": str(workdir / "jobs.db"),
            "poll_s": 0.05,
            "replica_slots": 8,
        },
    }


PHASES = ("upload", "validate", "run", "settle")
"""A batch's phases: the upload; create to ``in_progress`` (validation); to the first answer (the
re-validation, the plan, the runner's start), for a ``big`` batch to its end; the cancel to the end
(settling every unanswered line, the result files)."""


def _batch(c: httpx.Client, data: bytes, kind: str) -> tuple[str, dict[str, int], dict[str, float]]:
    """Run one batch; its status, counts, and when each phase began (``perf_counter``; ``end`` too)."""
    marks = {"upload": time.perf_counter()}
    up = c.post("/v1/files", files={"file": (f"{kind}.jsonl", data)}, data={"purpose": "batch"})
    up.raise_for_status()
    marks["validate"] = time.perf_counter()
    b = c.post(
        "/v1/batches", json={"input_file_id": up.json()["id"], "endpoint": URL, "completion_window": "24h"}
    )
    b.raise_for_status()
    batch_id = b.json()["id"]
    deadline = time.monotonic() + BATCH_TIMEOUT_S
    cancelled = False
    while True:
        obj = c.get(f"/v1/batches/{batch_id}").json()
        counts = obj["request_counts"]
        if obj["status"] != "validating":
            marks.setdefault("run", time.perf_counter())
        if obj["status"] in ("completed", "failed", "expired", "cancelled"):
            break
        if kind == "many" and not cancelled and counts["completed"] + counts["failed"] > 0:
            marks["settle"] = time.perf_counter()
            c.post(f"/v1/batches/{batch_id}/cancel").raise_for_status()
            cancelled = True
        if time.monotonic() > deadline:
            return f"stuck {obj['status']}", counts, {**marks, "end": time.perf_counter()}
        time.sleep(0.05)
    marks["end"] = time.perf_counter()
    for fid in (obj["output_file_id"], obj["error_file_id"]):
        if fid:
            c.delete(f"/v1/files/{fid}").raise_for_status()
    c.delete(f"/v1/files/{up.json()['id']}").raise_for_status()
    return obj["status"], counts, marks


def run(
    workdir: Path, big: int = 9, many: int = 2, checkout: str | None = None, shape: str = "text"
) -> Result:
    """``big`` one-line 10 MB batches, then ``many`` 50,000-line batches, one at a time."""
    sim, urls = start_sim(2, extra=["--speed", "0"])
    path = workdir / "policy.yaml"
    path.write_text(yaml.safe_dump(_policy(workdir, urls)))
    gw: Proc | None = None
    out = Result()
    try:
        gw = start_gateway(
            ["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "batch-memory"}, checkout=checkout
        )
        files = {"big": big_file(shape), "many": many_file() if many else b""}
        with (
            running(gw, sim),
            httpx.Client(base_url=gw.url, timeout=120) as c,
            Prober(gw.url, gw.pid) as probe,
        ):
            out.rss_start_mib = rss_mib(gw.pid)
            for kind in ["big"] * big + ["many"] * many:
                status, counts, marks = _batch(c, files[kind], kind)
                times = sorted(marks.items(), key=lambda kv: kv[1])
                phases = list(pairwise(times))
                wall = {a: probe.worst(ta, tb) * 1000 for (a, ta), (_, tb) in phases}
                cpu = {a: probe.worst(ta, tb, cpu=True) * 1000 for (a, ta), (_, tb) in phases}
                seconds = marks["end"] - marks["upload"]
                out.runs.append(Run(kind, status, seconds, rss_mib(gw.pid), wall, cpu, counts))
            out.probes, out.probe_failures = probe.probes, probe.failures
    finally:
        sim.stop()
        if gw is not None:
            gw.stop()
    return out


def table(result: Result) -> str:
    """One row per batch: its end, seconds, RSS after it, and per phase the longest /health answer as
    ``wall/cpu`` ms (wall time / gateway CPU while it was awaited)."""
    rows = [
        f"start: RSS {result.rss_start_mib:.0f} MiB",
        "run  kind  status         s  RSS MiB   longest /health, wall/cpu ms: "
        + "  ".join(f"{p:>9s}" for p in PHASES),
    ]
    for i, r in enumerate(result.runs, 1):
        cells = [f"{r.wall_ms[p]:.0f}/{r.cpu_ms[p]:.0f}" if p in r.wall_ms else "-" for p in PHASES]
        rows.append(
            f"{i:3d}  {r.kind:4s}  {r.status:9s} {r.seconds:6.1f}  {r.rss_mib:7.0f}  {' ' * 31}"
            + "  ".join(f"{c:>9s}" for c in cells)
        )
    rows.append(
        f"peak RSS {result.peak_mib():.0f} MiB, growth over the big runs {result.big_growth_mib():+.0f} MiB; "
        f"longest /health {result.worst_ms(cpu=False):.0f} ms wall, {result.worst_ms():.0f} ms of gateway "
        f"CPU ({result.probes} probes every {PROBE_INTERVAL_S * 1000:.0f} ms)"
    )
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.batch_memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--big", type=int, default=9, help="batches of one 10 MB line")
    p.add_argument(
        "--many", type=int, default=2, help=f"batches of {MANY_LINES:,} lines (cancelled once started)"
    )
    p.add_argument("--checkout", help="run this checkout's gateway (a worktree of another commit)")
    p.add_argument("--shape", choices=SHAPES, default="text", help="of the big line (see big_file)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pgw-bmem-") as d:
        result = run(Path(d), args.big, args.many, args.checkout, args.shape)
    print(table(result))
    problems = result.problems()
    print("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
