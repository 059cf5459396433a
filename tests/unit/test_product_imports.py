"""The product (gateway, router, cache, config) never imports the benchmarks or the tests, the
simulator imports none of them, and starting the CLI does not load the simulator (``sim/``): only the
commands that run it (``sim``, ``demo``) do."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.main import main
from scripts.import_graph import crossings, graphs

ROOT = Path(__file__).resolve().parents[2]


def test_no_module_crosses_a_component_boundary() -> None:
    """Read from the source, every import counted (in functions and under TYPE_CHECKING too)."""
    run, every = graphs(ROOT)
    assert "gateway.cli.main" in run and "sim.server" in run and "bench.procs" in run
    assert crossings(every) == []


def test_a_crossing_is_found(tmp_path: Path) -> None:
    """The scan sees an upward import wherever it hides: in a function, or under TYPE_CHECKING."""
    for pkg in ("gateway", "bench", "sim", "tests"):
        (tmp_path / pkg).mkdir()
        (tmp_path / pkg / "__init__.py").write_text("")
    (tmp_path / "bench" / "procs.py").write_text("")
    (tmp_path / "tests" / "support.py").write_text("")
    (tmp_path / "gateway" / "a.py").write_text("def f():\n    from bench import procs\n")
    (tmp_path / "sim" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import bench.procs\n"
    )
    (tmp_path / "bench" / "c.py").write_text("from tests.support import x\n")
    assert crossings(graphs(tmp_path)[1]) == [
        ("bench.c", "tests.support"),
        ("gateway.a", "bench.procs"),
        ("sim.b", "bench.procs"),
    ]


def test_starting_the_cli_loads_neither_the_simulator_nor_the_benchmarks() -> None:
    code = (
        "import sys, gateway.cli.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('sim', 'bench', 'tests')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"


def test_the_sim_command_hands_its_arguments_to_the_simulator(capsys) -> None:
    """``prefix-gateway sim ARGS`` is ``python -m sim ARGS``: the simulator's own parser reads them."""
    assert main(["sim", "--replicas", "0"]) == 2
    assert "--replicas must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--no-such-flag"])
    assert exc.value.code == 2
    assert "prefix-gateway sim: error: unrecognized arguments: --no-such-flag" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["sim", "--help"])
    assert "--kv-capacity-blocks" in capsys.readouterr().out


def test_other_commands_still_reject_unknown_arguments(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["check-config", "x.yaml", "--no-such-flag"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err
