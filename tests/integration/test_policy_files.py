"""Issue 19, item 7: every file a policy names is resolved and loaded at check-config, at start and at
a reload; a failure names the policy file, the path inside it and the file. Relative paths resolve
against the policy file's directory, whatever the working directory of the command."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import httpx
import yaml

from bench.procs import START_TIMEOUT_S, free_port, running, start_gateway, start_sim
from tests.fault.support import ADMIN, ADMIN_TOKEN, gateway_with
from tests.support.cli import run_cli
from tests.support.stack import policy_for, sim_fleet

FIXTURES = Path(__file__).parent.parent / "fixtures" / "kv_events"


def gateway_cmd(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A real process, from another directory (``serve``); the other commands run in this process
    (``run_cli``, with the same ``cwd``). It has a process start's deadline: the imports alone took 38 s
    on a loaded machine (docs/testing.md)."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S,
    )


def write_policy(path: Path, routing: dict, **sections: object) -> Path:
    raw = {
        "server": {"host": "127.0.0.1", "port": 0},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9"}], "routing": routing}],
        **sections,
    }
    path.write_text(yaml.safe_dump(raw))
    return path


def tokenizer_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "tokenizer.json").write_bytes(gzip.decompress((FIXTURES / "tokenizer.json.gz").read_bytes()))
    (path / "tokenizer_config.json").write_text((FIXTURES / "tokenizer_config.json").read_text())
    return path


def test_a_missing_tokenizer_fails_check_config_and_serve_naming_policy_and_file(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", {"tokenizer": {"kind": "hf", "path": "no/such/tokenizer.json"}}
    )
    missing = str(tmp_path / "no" / "such" / "tokenizer.json")
    check = run_cli("check-config", str(policy), cwd=tmp_path.parent)
    assert check.returncode == 1
    for needle in (str(policy), "models[0].routing.tokenizer.path", missing):
        assert needle in check.stderr, check.stderr
    serve = gateway_cmd("serve", "--config", str(policy), "--port", str(free_port()), cwd=tmp_path)
    assert serve.returncode == 1  # it never listened, so /ready was never 200
    assert "models[0].routing.tokenizer.path" in serve.stderr and missing in serve.stderr


def test_precise_pool_without_its_chat_template_fails_check_config(tmp_path: Path) -> None:
    model = tokenizer_dir(tmp_path / "model")
    (model / "tokenizer_config.json").unlink()
    routing = {
        "index": "precise",
        "block_size": 16,
        "engine_block_size": 16,
        "tokenizer": {"kind": "hf", "path": "model/tokenizer.json"},
    }
    check = run_cli("check-config", str(write_policy(tmp_path / "p.yaml", routing)), cwd=Path("/"))
    assert check.returncode == 1
    assert "models[0].routing.chat_template" in check.stderr
    assert str(model / "tokenizer_config.json") in check.stderr


def test_relative_paths_resolve_against_the_policy_directory(tmp_path: Path) -> None:
    tokenizer_dir(tmp_path / "conf" / "model")
    routing = {
        "index": "precise",
        "block_size": 16,
        "engine_block_size": 16,
        "tokenizer": {"kind": "hf", "path": "model/tokenizer.json"},
    }
    policy = write_policy(tmp_path / "conf" / "p.yaml", routing)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    check = run_cli("check-config", str(policy), cwd=elsewhere)
    assert check.returncode == 0, check.stderr


def test_usage_from_another_directory_reads_the_ledger_the_gateway_wrote(tmp_path: Path) -> None:
    conf, report_dir = tmp_path / "conf", tmp_path / "report"
    conf.mkdir()
    report_dir.mkdir()
    sim, urls = start_sim(1, extra=["--speed", "0"])
    policy = conf / "policy.yaml"
    raw = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "models": [{"name": "sim-llama", "replicas": [{"url": urls[0]}]}],
        "billing": {"ledger": {"path": "var/ledger.db"}},  # relative: beside the policy file
    }
    policy.write_text(yaml.safe_dump(raw))
    with running(sim):
        gw = start_gateway(["--config", str(policy)], env={"PREFIX_GATEWAY_SECRET": "s"})  # cwd elsewhere
        with running(gw), httpx.Client(timeout=10) as c:
            for i in range(3):
                body = {
                    "model": "sim-llama",
                    "max_tokens": 2,
                    "messages": [{"role": "user", "content": f"q{i}"}],
                }
                assert c.post(gw.url + "/v1/chat/completions", json=body).status_code == 200
    assert (conf / "var" / "ledger.db").is_file()
    report = run_cli("usage", "--config", str(policy), "--format", "json", cwd=report_dir)
    assert report.returncode == 0, report.stderr
    assert json.loads(report.stdout)["totals"]["requests"] == 3
    assert not (report_dir / "var").exists()


def test_usage_of_a_ledger_that_does_not_exist_is_an_error_not_an_empty_report(tmp_path: Path) -> None:
    policy = write_policy(
        tmp_path / "p.yaml", {"policy": "round_robin"}, billing={"ledger": {"path": "nothing-here.db"}}
    )
    report = run_cli("usage", "--config", str(policy), cwd=tmp_path)
    assert report.returncode == 1
    assert str(tmp_path / "nothing-here.db") in report.stderr
    assert not (tmp_path / "nothing-here.db").exists()


async def test_a_reload_to_a_policy_with_a_missing_tokenizer_keeps_the_old_one(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", ADMIN_TOKEN)
    async with sim_fleet(1) as fleet:
        path = tmp_path / "policy.yaml"
        good = policy_for(fleet.urls)
        path.write_text(yaml.safe_dump(good.model_dump(mode="json")))
        async with gateway_with(good, policy_path=str(path)) as gw, aiohttp.ClientSession() as s:
            before = gw.state
            broken = good.model_dump(mode="json")
            broken["models"][0]["routing"]["tokenizer"] = {"kind": "hf", "path": "gone/tokenizer.json"}
            path.write_text(yaml.safe_dump(broken))
            async with s.post(gw.url + "/admin/reload", headers=ADMIN) as r:
                assert r.status == 422
                body = await r.json()
            assert body["result"] == "invalid"
            assert body["problems"][0]["path"] == "models[0].routing.tokenizer.path"
            assert str(tmp_path / "gone" / "tokenizer.json") in body["problems"][0]["message"]
            assert gw.state is before
            async with s.get(gw.url + "/ready") as r:
                assert r.status == 200
