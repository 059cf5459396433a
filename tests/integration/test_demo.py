"""The README's run command: `prefix-gateway demo` serves, prints where, and stops cleanly."""

from __future__ import annotations

import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import openai

from bench.procs import free_port, free_ports, wait_http

ROOT = Path(__file__).resolve().parents[2]


def test_demo_serves_and_stops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port, base = free_port(), free_ports(3)[0]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "demo", "--port", str(port), "--base-port", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},  # run from another folder: find the package
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/ready", proc=proc)  # type: ignore[arg-type]
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0)
        reply = client.chat.completions.create(
            model="sim-llama", messages=[{"role": "user", "content": "Hello"}], temperature=0
        )
        assert reply.choices[0].message.content
        again = client.chat.completions.with_raw_response.create(
            model="sim-llama", messages=[{"role": "user", "content": "Hello"}], temperature=0
        )
        assert again.headers["x-cache"] == "hit"  # the response cache is on in the embedded default
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert f"listening on http://127.0.0.1:{port}" in out and "curl" in out
    assert (tmp_path / "var" / "ledger.db").exists()  # the embedded SQLite ledger


def _lines_until(proc: subprocess.Popen[str], marker: str, timeout_s: float = 60.0) -> list[str]:
    """The demo's stdout lines up to the one starting with ``marker`` (read on a thread: a deadline)."""
    found: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            found.put(line.rstrip("\n"))
        found.put(None)

    threading.Thread(target=pump, daemon=True).start()
    lines: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            line = found.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        if line is None:
            break
        lines.append(line)
        if line.startswith(marker):
            return lines
    raise AssertionError(f"the demo never printed {marker!r}: {lines}")


def test_the_demo_prints_a_command_for_each_feature_and_each_works(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Issue 31, item 6: after the demo, ``usage --config config/examples/local.yaml`` failed (the demo's
    ledger is ./var/ledger.db); the Batch API and the advisor were off. Each printed command is run as
    a shell runs it, and answers."""
    port, base = free_port(), free_ports(3)[0]
    env = {
        k: v for k, v in os.environ.items() if k not in ("PREFIX_GATEWAY_ADMIN_TOKEN", "PREFIX_GATEWAY_URL")
    }
    env |= {"PYTHONPATH": str(ROOT), "OPENAI_API_KEY": "EMPTY"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "demo", "--port", str(port), "--base-port", str(base)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        out = _lines_until(proc, "metrics:")
        commands = [
            line.strip()
            for line in out
            if line.startswith("  ") and line.strip().startswith(("prefix-gateway", "PREFIX_GATEWAY"))
        ]
        assert len(commands) == 4, out
        usage, submit, listing, advise = commands
        assert (
            usage.startswith("prefix-gateway usage --ledger ")
            and str(tmp_path / "var" / "ledger.db") in usage
        )
        assert "batch submit" in submit and "--json" in submit and "batch list" in listing
        assert "prefix-gateway advise" in advise
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0)
        for text in ("Hello", "Hello again"):
            client.chat.completions.create(model="sim-llama", messages=[{"role": "user", "content": text}])
        here = f"{shlex.quote(sys.executable)} -m gateway"

        def shell(command: str) -> subprocess.CompletedProcess[str]:
            line = re.sub(r"(?<![\w/-])prefix-gateway ", here + " ", command)  # the command, not paths
            return subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, timeout=120)

        deadline = time.monotonic() + 30
        while True:  # the ledger's group commit lands shortly after the answers
            reported = shell(usage)
            if (reported.returncode == 0 and "anonymous" in reported.stdout) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert reported.returncode == 0 and "anonymous" in reported.stdout, reported.stderr
        submitted = shell(submit)
        assert submitted.returncode == 0, submitted.stderr
        batch = json.loads(submitted.stdout)  # what jq reads
        assert batch["status"] == "completed" and batch["request_counts"]["completed"] == 3
        listed = shell(listing)
        assert listed.returncode == 0 and batch["id"] in listed.stdout, listed.stderr
        advised = shell(advise)
        assert advised.returncode == 0, advised.stderr
        workdir = Path(shlex.split(submit)[3]).parent
        assert workdir.is_dir() and (workdir / "admin-token").stat().st_mode & 0o077 == 0
        token = (workdir / "admin-token").read_text()
        assert token not in "\n".join(out)  # the token is read from its file, never printed
        client.close()
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    assert proc.returncode == 0
    assert not workdir.exists()  # the demo's batch files and token go with it
