"""``--workers auto``: one worker per usable core (affinity mask, capped by a cgroup CPU quota)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from gateway.cli.main import build_parser
from gateway.process.workers import parse_workers, usable_cpus


def test_auto_is_the_usable_cores() -> None:
    assert parse_workers("auto") == usable_cpus()
    assert 1 <= usable_cpus() <= len(os.sched_getaffinity(0))


def test_auto_follows_the_affinity_mask() -> None:
    code = "from gateway.process.workers import usable_cpus; print(usable_cpus())"
    out = subprocess.run(
        ["taskset", "-c", "0", sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1"


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_a_bad_count_is_a_usage_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    """The parser ``prefix-gateway serve`` runs refuses it (exit 2, argparse's usage error) before
    anything starts; parsed here, not in a started CLI, so a regression fails instead of serving."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["serve", "--workers", value])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--workers" in err and "auto" in err
