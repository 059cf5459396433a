"""``prefix-gateway batch`` as a user runs it: a real process, the real openai client, a real gateway."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import orjson

from bench.batch_workload import make_batch
from tests.support.batch import SLOW, batch_policy
from tests.support.cli import run_cli
from tests.support.stack import gateway, sim_fleet


async def cli(*args: str, url: str, real: bool = False) -> tuple[int, str, str]:
    """``prefix-gateway batch --url URL ARGS``: as a real process when ``real`` (each test's first
    command, as a user runs it), else in this process on a thread (tests/support/cli.py: the same
    parsing, client, output and exit code, without 2.3 s of imports a command)."""
    if real:
        return await run("batch", "--url", url, *args)
    ran = await asyncio.to_thread(run_cli, "batch", "--url", url, *args, env={"OPENAI_API_KEY": "none"})
    return ran.returncode, ran.stdout, ran.stderr


async def test_submit_wait_status_results_cancel(tmp_path: Path) -> None:
    wl = make_batch(
        seed=2, requests=30, templates=3, system_tokens=(200, 300), user_tokens=(5, 10), max_tokens=(2, 4)
    )
    bad = {**wl.lines[0], "custom_id": "bad", "body": {**wl.lines[0]["body"], "max_tokens": 0}}
    src = tmp_path / "in.jsonl"
    src.write_bytes(wl.jsonl() + orjson.dumps(bad) + b"\n")
    async with sim_fleet(2, **SLOW) as fleet, gateway(batch_policy(fleet.urls, tmp_path)) as gw:
        code, out, err = await cli(
            "submit", str(src), "--wait", "--poll", "0.1", "--metadata", "job=cli", url=gw.url, real=True
        )
        assert code == 0, err
        batch_id, _, rest = out.partition("\n")
        done = orjson.loads(rest)
        assert done["id"] == batch_id and done["status"] == "completed" and done["metadata"] == {"job": "cli"}
        assert done["request_counts"] == {"total": 31, "completed": 30, "failed": 1}
        assert "31/31" in err and "completed" in err  # the progress bar, on stderr

        code, out, _ = await cli("status", batch_id, url=gw.url)
        assert code == 0 and orjson.loads(out)["request_counts"]["completed"] == 30

        results, errors = tmp_path / "out.jsonl", tmp_path / "err.jsonl"
        code, _, err = await cli("results", batch_id, "-o", str(results), "--errors", str(errors), url=gw.url)
        assert code == 0, err
        assert [orjson.loads(x)["custom_id"] for x in results.read_bytes().splitlines()] == [
            line["custom_id"] for line in wl.lines
        ]
        assert [orjson.loads(x)["custom_id"] for x in errors.read_bytes().splitlines()] == ["bad"]

        code, _, err = await cli("cancel", batch_id, url=gw.url)  # a completed batch cannot be cancelled
        assert code == 1 and "409" in err and "cannot be cancelled" in err
        code, _, err = await cli("status", "batch_nope", url=gw.url)
        assert code == 1 and "404" in err

        # A batch that fails validation: the CLI names the lines and exits 1.
        broken = tmp_path / "broken.jsonl"
        broken.write_bytes(b"{oops\n" + wl.jsonl())
        code, _, err = await cli("submit", str(broken), "--wait", "--poll", "0.1", url=gw.url)
        assert code == 1 and "line 1: invalid_json_line" in err and "ended failed" in err

        # Submitted without --wait (a batch of some seconds on the slow replicas), then cancelled by id.
        big = tmp_path / "big.jsonl"
        big.write_bytes(make_batch(seed=3, requests=300, templates=3, system_tokens=(200, 300)).jsonl())
        code, out, _ = await cli("submit", str(big), url=gw.url)
        assert code == 0
        code, out, err = await cli("cancel", out.strip(), url=gw.url)
        assert code == 0 and out.split(": ")[1].strip() in ("cancelling", "cancelled"), err


async def run(*args: str, real: bool = True) -> tuple[int, str, str]:
    """``prefix-gateway ARGS`` exactly as given (no ``--url`` put in front): a real process when
    ``real``, else in this process on a thread."""
    if not real:
        ran = await asyncio.to_thread(
            run_cli, *args, env={"OPENAI_API_KEY": "none"}, unset=("PREFIX_GATEWAY_URL",)
        )
        return ran.returncode, ran.stdout, ran.stderr
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gateway",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={k: v for k, v in os.environ.items() if k != "PREFIX_GATEWAY_URL"} | {"OPENAI_API_KEY": "none"},
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_url_after_the_verb_json_for_jq_and_list(tmp_path: Path) -> None:
    """Issue 31, item 6: ``batch submit f.jsonl --url ...`` failed (``--url`` had to precede the
    verb); ``submit --wait`` printed an id line then JSON, which ``jq`` cannot read; no ``batch list``."""
    wl = make_batch(
        seed=3, requests=4, templates=1, system_tokens=(50, 60), user_tokens=(5, 6), max_tokens=(2, 3)
    )
    src = tmp_path / "in.jsonl"
    src.write_bytes(wl.jsonl())
    async with sim_fleet(1) as fleet, gateway(batch_policy(fleet.urls, tmp_path)) as gw:
        code, out, err = await run(
            "batch",
            "submit",
            str(src),
            "--url",
            gw.url,
            "--wait",
            "--poll",
            "0.1",
            "--json",
            "--api-key",
            "x",
        )
        assert code == 0, err
        done = orjson.loads(out)  # the whole of stdout is one JSON document
        assert done["status"] == "completed" and done["request_counts"]["completed"] == 4
        assert "4/4" in err  # the progress, on stderr
        code, out, err = await run("batch", "submit", str(src), "--json", "--url", gw.url, real=False)
        assert code == 0, err
        second = orjson.loads(out)
        assert second["id"].startswith("batch_") and second["id"] != done["id"]
        code, out, err = await run("batch", "list", "--url", gw.url, "--json", real=False)
        assert code == 0, err
        listed = orjson.loads(out)
        assert {b["id"] for b in listed["data"]} == {done["id"], second["id"]}
        code, out, err = await run(
            "batch", "--url", gw.url, "list", real=False
        )  # before the verb still works
        assert code == 0, err
        lines = out.splitlines()
        assert len(lines) == 2 and any(line.startswith(done["id"]) and "completed" in line for line in lines)
        code, out, err = await run("batch", "list", "--url", gw.url, "--limit", "0", real=False)
        assert code == 1 and "--limit" in err
