"""``python -m sim`` as a real process, and the argparse wiring the gateway CLI reuses."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from bench.procs import START_TIMEOUT_S
from sim.cli import add_arguments, config_from_args
from sim.engine import EngineCosts

ROOT = Path(__file__).resolve().parents[2]


def test_arguments_map_to_simconfig() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(
        ["--mode", "simple", "--replicas", "3", "--base-port", "9200", "--speed", "0", "--kv-capacity-blocks", "77",
         "--max-num-seqs", "5", "--prefill-s-per-token", "0.5", "--decode-s-per-token", "0.25",
         "--overhead-s", "0.125", "--block-size", "32", "--bytes-per-token", "3", "--model", "a", "b"]
    )  # fmt: skip
    assert (args.replicas, args.base_port, args.host) == (3, 9200, "127.0.0.1")
    cfg = config_from_args(args)
    assert cfg.models == ("a", "b") and cfg.mode == "simple"
    assert (cfg.kv_capacity_blocks, cfg.max_num_seqs, cfg.block_size, cfg.bytes_per_token) == (77, 5, 32, 3)
    assert (cfg.speed, cfg.prefill_s_per_token, cfg.decode_s_per_token, cfg.overhead_s) == (
        0.0,
        0.5,
        0.25,
        0.125,
    )


def test_engine_arguments_and_token_scale() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(
        parser.parse_args(
            [
                "--max-num-batched-tokens",
                "2048",
                "--stream-interval",
                "4",
                "--token-scale",
                "8",
                "--step-overhead-s",
                "0.01",
                "--prefill-s-per-token",
                "0.0001",
                "--long-prefill-token-threshold",
                "512",
                "--scheduling-policy",
                "priority",
            ]
        )
    )
    assert cfg.mode == "engine"  # the default
    assert cfg.scheduling_policy == "priority" and cfg.engine_config().scheduling_policy == "priority"
    assert config_from_args(parser.parse_args([])).scheduling_policy == "fcfs"
    assert (cfg.max_num_batched_tokens, cfg.stream_interval, cfg.long_prefill_token_threshold) == (
        2048,
        4,
        512,
    )
    base = EngineCosts()
    assert cfg.costs.step_overhead_s == pytest.approx(0.08)
    assert cfg.costs.prefill_s_per_token == pytest.approx(0.0008)
    assert cfg.costs.decode_attn_s_per_ctx_token == pytest.approx(base.decode_attn_s_per_ctx_token * 64)
    with pytest.raises(ValueError, match="--overhead-s is not used in mode 'engine'"):
        config_from_args(parser.parse_args(["--overhead-s", "0.1"]))
    with pytest.raises(ValueError, match="--token-scale is not used in mode 'simple'"):
        config_from_args(parser.parse_args(["--mode", "simple", "--token-scale", "2"]))
    with pytest.raises(ValueError, match="--scheduling-policy is not used in mode 'simple'"):
        config_from_args(parser.parse_args(["--mode", "simple", "--scheduling-policy", "priority"]))


def test_python_m_sim_serves_until_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "sim", "--replicas", "2", "--base-port", "0", "--speed", "0"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(2)]  # printed once both replicas listen
        urls = [line.split()[3] for line in lines]
        assert all(u.startswith("http://127.0.0.1:") for u in urls) and urls[0] != urls[1], lines
        with httpx.Client(timeout=5) as client:
            for url in urls:
                assert client.get(url + "/health").status_code == 200
                r = client.post(
                    url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]}
                )
                assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 16
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)


def test_bad_settings_exit_with_an_error() -> None:
    r = subprocess.run(
        [sys.executable, "-m", "sim", "--block-size", "0", "--base-port", "0"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,  # a start's imports, which a loaded machine stretches past 20 s
    )
    assert r.returncode == 2 and "block_size" in r.stderr
