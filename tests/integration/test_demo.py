"""The README's run command: `prefix-gateway demo` serves, prints where, and stops cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
