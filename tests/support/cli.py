"""``prefix-gateway ARGS`` run in this process: the command's own parsing, exit code and output.

A CLI start is about 1.5 s of imports (2.3 s with the batch client), and the suite ran some sixty of
them for commands whose process boundary it tests elsewhere: ``test_config_loader.py::
test_check_config_cli`` and the first command of each ``test_batch_cli.py`` test run as real
processes, as a user runs them; the others run here. Output is what the command prints to
``sys.stdout`` and ``sys.stderr``; an ``argparse`` usage error (``SystemExit``) is its exit code.

The environment is changed only for the names given (``env`` set, ``unset`` removed) and restored
after, never replaced whole: a test may run a command in a thread while its in-process gateway reads
the environment on the event loop's thread.
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.cli.main import main


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


@contextlib.contextmanager
def _environment(env: Mapping[str, str], unset: Iterable[str]) -> Iterator[None]:
    names = set(env) | set(unset)
    saved = {name: os.environ.get(name) for name in names}
    try:
        for name in unset:
            os.environ.pop(name, None)
        os.environ.update(env)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def run_cli(
    *args: str, env: Mapping[str, str] | None = None, unset: Iterable[str] = (), cwd: Path | None = None
) -> Ran:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_environment(env or {}, unset))
        if cwd is not None:
            stack.enter_context(contextlib.chdir(cwd))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        try:
            code = main(list(args))
        except SystemExit as exit_:  # argparse's usage errors, and commands that exit with a message
            if isinstance(exit_.code, str):
                print(exit_.code, file=err)
            code = exit_.code if isinstance(exit_.code, int) else (1 if exit_.code else 0)
    return Ran(code, out.getvalue(), err.getvalue())
