"""The RSS curve of a gateway process under the largest bodies it accepts (issue 19, item 1).

    python -m bench.memory                       # 200 of the issue's body, 40 near-limit bodies
    python -m bench.memory --issue 30 --near 20  # what tests/load/test_memory.py runs

The issue's body (3.9 MB of 100,000 short messages, anonymous) left the gateway +31-33 MB of RSS per
request, never returned: 1.1 GB after 33 requests, past the chart's 1 GiB limit. That was the landed
gateway of 13c56d3: the request's outcome held a closure that held the parsed body, a reference cycle
that only a full collection freed, by which time the heap was fragmented (the lifecycle hooks of
849a1a7 removed it). What remained: an ``hf`` tokenizer rendered and tokenized a 3.9 MB prompt whole,
twice (billing's marked prefix, then routing): 400 MB of transient memory (the library's Encoding
keeps offsets and token strings for every token) and 4 s of event loop per request. Now the body is
refused past ``limits.max_messages`` before any work, and a body within the limits is rendered as a
stream into a bounded prefix (routing), a digest and a bounded exact count (billing), an incremental
HMAC (the cache key).

The bound: through the issue's body and near-limit requests through the whole path (2,000 messages,
3.9 MB, a cache_control marker at the end, temperature 0, billing and the response cache on, an ``hf``
tokenizer), RSS never exceeds ``PEAK_BOUND_MIB`` and grows less than ``GROWTH_BOUND_MIB`` after the
first ``WARMUP`` requests of each kind. The regression it guards against grew 31 MB a request, so the
test's 20 and 10 requests after the warm-ups prove the bound as well as the curve's 190 do.
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson
import psutil
import yaml

from bench.procs import running, start_gateway, start_sim

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kv_events"
MiB = 1024 * 1024
PEAK_BOUND_MIB = 256
GROWTH_BOUND_MIB = 32
WARMUP = 10


def issue_body() -> bytes:
    return orjson.dumps({"model": "sim-llama", "messages": [{"role": "user", "content": "hello"}] * 100_000})


def near_limit_body(i: int) -> bytes:
    filler = "lorem ipsum dolor sit amet, consectetur adipiscing elit " * 34
    messages: list[dict] = [{"role": "user", "content": f"message {k} of {i}: {filler}"} for k in range(1999)]
    messages.append(
        {"role": "user", "content": [{"type": "text", "text": "end", "cache_control": {"type": "ephemeral"}}]}
    )
    return orjson.dumps({"model": "sim-llama", "temperature": 0, "messages": messages})


@dataclass
class MemoryRun:
    peak_mib: float = 0.0
    growth_mib: dict[str, float] = field(default_factory=dict)  # kind -> RSS growth after its warm-up
    statuses: dict[tuple[str, int], int] = field(default_factory=dict)
    curve: list[tuple[str, float]] = field(default_factory=list)  # (kind, RSS MiB) after each request
    wall_s: float = 0.0

    def problems(self, issue: int, near: int) -> list[str]:
        out = []
        if self.peak_mib >= PEAK_BOUND_MIB:
            out.append(f"peak RSS {self.peak_mib:.0f} MiB (bound {PEAK_BOUND_MIB})")
        for kind, growth in self.growth_mib.items():
            if growth >= GROWTH_BOUND_MIB:
                out.append(f"{kind}: RSS grew {growth:.1f} MiB after warm-up (bound {GROWTH_BOUND_MIB})")
        # Both kinds are refused: the issue's body by the gateway (max_messages), the near-limit body
        # by the replica (longer than its context).
        if self.statuses != {("issue", 400): issue, ("near", 400): near}:
            out.append(f"statuses {self.statuses}")
        return out


def run(workdir: Path, issue: int = 200, near: int = 40) -> MemoryRun:
    """``issue`` of the issue's body, then ``near`` near-limit bodies, one at a time, through a gateway
    process; RSS read after each request."""
    assert issue > WARMUP and near > WARMUP
    tokenizer = workdir / "tokenizer.json"
    tokenizer.write_bytes(gzip.decompress((FIXTURES / "tokenizer.json.gz").read_bytes()))
    sim, urls = start_sim(1, extra=["--speed", "0"])
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "cache": {"enabled": True},
        "billing": {"ledger": {"path": str(workdir / "ledger.db")}},
        "models": [
            {
                "name": "sim-llama",
                "replicas": [{"url": urls[0]}],
                "routing": {"tokenizer": {"kind": "hf", "path": str(tokenizer)}},
            }
        ],
    }
    path = workdir / "policy.yaml"
    path.write_text(yaml.safe_dump(policy))
    gw = start_gateway(["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "memory"})
    proc = psutil.Process(gw.pid)
    headers = {"Content-Type": "application/json"}
    out = MemoryRun()
    with running(gw, sim), httpx.Client(timeout=60) as c:
        body = issue_body()
        assert len(body) > 3_000_000
        plan = [("issue", k) for k in range(issue)] + [("near", k) for k in range(near)]
        warm: dict[str, int] = {}
        t0 = time.monotonic()
        for kind, k in plan:
            data = body if kind == "issue" else near_limit_body(k)
            r = c.post(gw.url + "/v1/chat/completions", content=data, headers=headers)
            out.statuses[(kind, r.status_code)] = out.statuses.get((kind, r.status_code), 0) + 1
            rss = proc.memory_info().rss
            out.peak_mib = max(out.peak_mib, rss / MiB)
            out.curve.append((kind, rss / MiB))
            if k == WARMUP - 1:
                warm[kind] = rss
            out.growth_mib[kind] = (rss - warm[kind]) / MiB if kind in warm else 0.0
        out.wall_s = time.monotonic() - t0
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.split("\n\n")[0])
    p.add_argument("--issue", type=int, default=200, help="requests with the issue's 3.9 MB body")
    p.add_argument("--near", type=int, default=40, help="near-limit requests (2,000 messages, 3.9 MB)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pgw-memory-") as d:
        result = run(Path(d), args.issue, args.near)
    for n in range(0, len(result.curve), 10):
        kind, mib = result.curve[n]
        print(f"request {n + 1:4d} ({kind}): RSS {mib:.1f} MiB")
    print(f"peak {result.peak_mib:.1f} MiB; growth after warm-up {result.growth_mib}; {result.wall_s:.1f} s")
    problems = result.problems(args.issue, args.near)
    print("PASS" if not problems else "FAIL: " + "; ".join(problems))
    return 0 if not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
