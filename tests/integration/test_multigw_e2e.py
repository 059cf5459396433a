"""Several gateway processes, one picture of the fleet's caches: real gateway processes, real Redis,
the simulator's replicas, real sockets."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from bench.procs import Proc, free_port, running, start_gateway, start_sim, wait_http
from gateway.pipeline.tenant import WORKERS_SECRET_ENV
from tests.support.redis_server import RedisServer

ENV = {"PREFIX_GATEWAY_SECRET": "one-secret-for-every-pod"}
TOPIC = "A Zanzibar itinerary for a family of four in the rainy season, day by day. " * 30


def chat(*turns: str) -> dict:
    """A conversation whose system prompt starts with its first turn (so conversations share nothing)."""
    messages = [{"role": "system", "content": f"{turns[0]} {TOPIC}"}]
    for k, t in enumerate(turns):
        messages.append({"role": "user", "content": t})
        if k < len(turns) - 1:
            messages.append({"role": "assistant", "content": f"Answer {k}."})
    return {"model": "sim-llama", "max_tokens": 4, "messages": messages}


def write_policy(tmp_path: Path, urls: list[str], name: str, **sections: object) -> Path:
    raw = {
        "models": [
            {
                "name": "sim-llama",
                "backend": "vllm",
                "replicas": [{"url": u, "id": f"r{i}"} for i, u in enumerate(urls)],
                "routing": {"policy": "prefix_affinity"},
            }
        ],
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "tenancy": {"allow_anonymous": True},
        **sections,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def sent(client: httpx.Client, url: str, body: dict) -> tuple[str, int]:
    """(replica, matched tokens) of one request."""
    r = client.post(url + "/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r.headers["x-gateway-replica"], int(r.headers["x-gateway-prefix-match"].split("/")[0])


def counted(client: httpx.Client, gw: Proc | str, outcome: str) -> float:
    """A gateway's (or one worker's metrics listener's) shared-index placements with ``outcome``."""
    url = gw if isinstance(gw, str) else gw.metrics_url or gw.url
    prefix = f'prefix_gateway_shared_index_placements_total{{outcome="{outcome}"}}'
    for line in client.get(url + "/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0


def applied(client: httpx.Client, gw: Proc) -> float:
    """Placements of other processes this gateway applied."""
    return counted(client, gw, "applied")


def flushed(client: httpx.Client, gw: Proc, offers: int, limit_s: float = 20.0) -> None:
    """Until every one of the ``offers`` placements this gateway made was sent or dropped: nothing of it
    is left to reach the others later (bounded)."""
    deadline = time.monotonic() + limit_s
    while (done := counted(client, gw, "sent") + counted(client, gw, "dropped")) < offers:
        assert time.monotonic() < deadline, f"{gw.url} accounted for {done} of {offers} placements"
        time.sleep(0.02)


def learn(client: httpx.Client, gw: Proc, count: float, limit_s: float = 10.0) -> None:
    """Until the gateway ``gw`` applied ``count`` placements of the others (bounded)."""
    deadline = time.monotonic() + limit_s
    while applied(client, gw) < count:
        assert time.monotonic() < deadline, f"{gw.url} applied {applied(client, gw)} of {count} placements"
        time.sleep(0.02)


def learnt_by_workers(client: httpx.Client, metrics_urls: list[str], count: int, limit_s: float = 20) -> None:
    """Until the workers applied ``count`` placements of each other in all (bounded)."""
    deadline = time.monotonic() + limit_s
    while (done := sum(counted(client, u, "applied") for u in metrics_urls)) < count:
        assert time.monotonic() < deadline, f"the workers applied {done} of {count} placements"
        time.sleep(0.02)


WARM = 6  # conversations warm_unevenly sends: each a placement the other processes apply


def warm_unevenly(client: httpx.Client, url: str) -> None:
    """Other conversations through one gateway: its placement of a cold prompt (most room first) now
    differs from what an empty index (the ring) would choose."""
    for k in range(WARM):
        client.post(url + "/v1/chat/completions", json={**chat(f"warm {k}"), "messages": [
            {"role": "system", "content": f"Unrelated conversation {k}. " * (40 + 30 * k)},
            {"role": "user", "content": "hi"},
        ]})  # fmt: skip


def test_two_gateway_processes_sharing_redis_route_a_follow_up_where_the_other_sent_the_first(
    tmp_path: Path, redis_url: str
) -> None:
    sim, urls = start_sim(4, extra=["--speed", "0"])
    shared = {"redis": {"url": redis_url}, "shared_index": {"enabled": True, "flush_interval_s": 0.02}}
    cfg = write_policy(tmp_path, urls, "shared", **shared)
    gw_a = start_gateway(["--config", str(cfg)], env=ENV)
    gw_b = start_gateway(["--config", str(cfg)], env=ENV)
    with running(gw_a, gw_b, sim), httpx.Client(timeout=10) as client:
        warm_unevenly(client, gw_a.url)
        for k in range(3):  # three conversations: each first turn through A, its next turn through B
            first, matched = sent(client, gw_a.url, chat(f"Conversation {k}: the first day?"))
            assert matched == 0
            learn(client, gw_b, 6 + k + 1)  # within a flush and a read: about 20 ms
            follow = chat(f"Conversation {k}: the first day?", "And the second?")
            replica, matched = sent(client, gw_b.url, follow)
            assert (replica, matched > 400) == (first, True)
        # What the gateways wrote to Redis: one stream of hashes under the key prefix, no text.
        r = redis.Redis.from_url(redis_url)
        keys = r.keys("*")
        assert keys == [b"pgw:routing:placements"]
        dump = b"".join(v for _, fields in r.xrange(keys[0]) for v in fields.values())
        assert dump and b"Zanzibar" not in dump and b"Conversation" not in dump and b"rainy" not in dump
        r.close()


def test_a_stalled_redis_never_delays_a_decision_and_routing_recovers(tmp_path: Path) -> None:
    server = RedisServer()
    server.start()
    assert server.proc is not None
    sim, urls = start_sim(4, extra=["--speed", "0"])
    shared = {
        "redis": {"url": server.url, "socket_timeout_s": 10.0},
        "shared_index": {"enabled": True, "flush_interval_s": 0.02, "retry_s": 0.2, "read_block_ms": 200},
    }
    cfg = write_policy(tmp_path, urls, "stall", **shared)
    gw_a = start_gateway(["--config", str(cfg)], env=ENV)
    gw_b = start_gateway(["--config", str(cfg)], env=ENV)
    try:
        with running(gw_a, gw_b, sim), httpx.Client(timeout=30) as client:
            os.kill(server.proc.pid, signal.SIGSTOP)  # Redis accepts nothing and answers nothing
            try:
                slowest = 0.0
                for k in range(20):
                    t0 = time.perf_counter()
                    sent(client, (gw_a.url, gw_b.url)[k % 2], chat(f"stalled {k}"))
                    slowest = max(slowest, time.perf_counter() - t0)
                # A decision that waited on Redis would wait its 10 s socket timeout; the bound is half
                # of it, for a loaded machine (these are the first requests these processes answer, two
                # processes each, and 2.5 s of 5 s left a busy two-core machine little room).
                assert slowest < 5.0, slowest
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)
            # Every placement of the stall sent or dropped: none is left to arrive after the restart,
            # where it would count as one learnt from the outage's end.
            flushed(client, gw_a, 10)
            flushed(client, gw_b, 10)
            server.stop()  # killed outright, then back empty on the same port
            for k in range(4):
                sent(client, gw_b.url, chat(f"down {k}"))
            flushed(client, gw_b, 14)
            server.start()
            before = applied(client, gw_b)
            first, _ = sent(client, gw_a.url, chat("After the outage: the first day?"))
            # The writer's next flush and the reader's next try (every 0.2 s) find Redis back.
            learn(client, gw_b, before + 1)
            replica, matched = sent(client, gw_b.url, chat("After the outage: the first day?", "And then?"))
            assert (replica, matched > 400) == (first, True)
    finally:
        server.stop()


def short_dir(request: pytest.FixtureRequest) -> Path:
    """A directory for Unix sockets, removed after the test: a socket's path has at most 107 bytes,
    which a pytest-xdist ``tmp_path`` can exceed."""
    path = Path(tempfile.mkdtemp(prefix="pgw-t-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(path, ignore_errors=True))
    return path


def test_workers_on_one_port_share_placements_without_redis(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sim, urls = start_sim(4, extra=["--speed", "0"])
    sockets = short_dir(request) / "sockets"
    shared = {"enabled": True, "flush_interval_s": 0.02, "local_dir": str(sockets)}
    cfg = write_policy(tmp_path, urls, "workers", shared_index=shared)
    log = tmp_path / "gateway.log"
    gw = start_gateway(["--config", str(cfg), "--workers", "2"], env=ENV, port=free_port(), log_path=str(log))
    with running(gw, sim):
        # /health answers once one worker listens; a worker that starts later learns only what the
        # others send after it (the local transport keeps no history), so wait for both.
        metrics_urls = workers_up(gw, sockets, "*.sock", log)
        with httpx.Client(timeout=10) as warm:
            warm_unevenly(warm, gw.url)
        with httpx.Client(timeout=10) as client:
            first, _ = sent(client, gw.url, chat("Workers: the first day?"))
            learnt_by_workers(client, metrics_urls, WARM + 1)  # about 20 ms: a flush and a datagram
        follow = chat("Workers: the first day?", "And the second?")
        seen = set()
        for _ in range(12):  # a new connection each time: the kernel spreads them over both workers
            with httpx.Client(timeout=10) as client:
                seen.add(sent(client, gw.url, {**follow, "max_tokens": 1}))
        assert {(replica, matched > 400) for replica, matched in seen} == {(first, True)}


def workers_up(gw: Proc, where: Path, pattern: str, log: Path, workers: int = 2) -> list[str]:
    """Until every worker of a ``--workers`` gateway opened its shared-index socket (``pattern`` under
    ``where``) and its metrics listener (worker i on metrics_port + i); returns those listeners' urls.
    /health answers once one worker listens, and a worker that starts later learns only what the others
    send after it (the local transport keeps no history), so a test waits for all of them."""
    deadline = time.monotonic() + 60
    while len(list(where.glob(pattern))) < workers:
        assert time.monotonic() < deadline, "a worker never opened its socket:\n" + log.read_text()[-4000:]
        time.sleep(0.05)
    assert gw.metrics_url is not None
    base, port = gw.metrics_url.rsplit(":", 1)
    urls = [f"{base}:{int(port) + i}" for i in range(workers)]
    for url in urls:
        wait_http(url + "/metrics", proc=gw.popen)
    return urls


def served(client: httpx.Client, metrics_urls: list[str]) -> list[float]:
    """Requests each worker answered so far (its own metrics listener: worker i on metrics_port + i)."""
    out = []
    for url in metrics_urls:
        text = client.get(url + "/metrics").text
        out.append(
            sum(
                float(x.split()[-1])
                for x in text.splitlines()
                if x.startswith("prefix_gateway_requests_total{")
            )
        )
    return out


def sent_by_worker(
    client: httpx.Client, url: str, metrics_urls: list[str], body: dict
) -> tuple[int, str, int]:
    """(worker, replica, matched tokens) of one request on a new connection: the worker whose request
    count rose (requests are sent one at a time; bounded wait for the count, written after the answer)."""
    before = served(client, metrics_urls)
    with httpx.Client(timeout=10) as fresh:  # a new connection: the kernel picks the worker
        replica, matched = sent(fresh, url, body)
    deadline = time.monotonic() + 10
    while True:
        after = served(client, metrics_urls)
        rose = [i for i, (a, b) in enumerate(zip(after, before, strict=True)) if a > b]
        if len(rose) == 1 and sum(after) == sum(before) + 1:
            return rose[0], replica, matched
        assert time.monotonic() < deadline, (before, after)
        time.sleep(0.02)


def test_workers_without_a_secret_share_one_so_a_placement_of_one_is_used_by_the_other(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """The README's quick start (``--replica`` flags, no PREFIX_GATEWAY_SECRET) with ``--workers 2``:
    the supervisor draws one secret for its workers, so their block hashes agree and a conversation's
    first turn through one worker is a prefix hit through the other."""
    monkeypatch.delenv("PREFIX_GATEWAY_SECRET", raising=False)  # the gateway inherits this environment
    sim, urls = start_sim(4, extra=["--speed", "0"])
    replicas = [a for u in urls for a in ("--replica", u)]
    log = tmp_path / "gateway.log"
    # TMPDIR: the supervisor's socket directory (pgw-workers-*) lands where the test can see both sockets;
    tmp = short_dir(request)
    gw = start_gateway(
        [*replicas, "--no-cache", "--workers", "2"], env={"TMPDIR": str(tmp)}, log_path=str(log)
    )
    with running(gw, sim):
        metrics_urls = workers_up(gw, tmp, "pgw-workers-*/*.sock", log)
        with httpx.Client(timeout=10) as client:
            warm_unevenly(client, gw.url)
            first_worker, first, matched = sent_by_worker(
                client, gw.url, metrics_urls, chat("Workers, no secret: the first day?")
            )
            assert matched == 0
            learnt_by_workers(client, metrics_urls, WARM + 1)  # about 20 ms: a flush and a datagram
            follow = {**chat("Workers, no secret: the first day?", "And the second?"), "max_tokens": 1}
            other: list[tuple[str, int]] = []
            for _ in range(60):  # until the other worker answered three follow-ups (2^-60: never all one)
                worker, replica, matched = sent_by_worker(client, gw.url, metrics_urls, follow)
                if worker != first_worker:
                    other.append((replica, matched))
                if len(other) == 3:
                    break
            assert len(other) == 3, "the kernel never chose the other worker"
            # The other worker applied the placement: every one of its follow-ups lands on the first
            # turn's replica with the prefix matched (with hashes of another secret, none would).
            assert {(replica, matched > 400) for replica, matched in other} == {(first, True)}, other
            drawn = {worker_env(pid).get(WORKERS_SECRET_ENV) for pid in worker_pids(log)}
        assert len(drawn) == 1 and None not in drawn, "the workers were not given one secret"
    text = log.read_text()
    assert "secret_missing" not in text  # no worker fell back to a random secret of its own
    assert "secret_drawn" in text and drawn.pop() not in text  # the supervisor says so, never the value


def worker_pids(log: Path) -> list[int]:
    """The workers' pids from the supervisor's ``workers`` log line."""
    lines = [json.loads(x) for x in log.read_text().splitlines() if x.startswith("{")]
    return next(x["pids"] for x in lines if x.get("event") == "workers")


def worker_env(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode("utf-8", "replace")
    return dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
