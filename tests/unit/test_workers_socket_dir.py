"""``--workers``: the directory of the workers' shared-index sockets fits a Unix socket's path."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from gateway.process.workers import SOCKET_NAME_MAX, SUN_PATH_MAX, shared_socket_dir


def _long_dir(base: Path) -> str:
    deep = base / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    return str(deep)


def test_a_long_temporary_directory_falls_back_to_a_short_one(tmp_path: Path) -> None:
    """With TMPDIR too long for a socket, the sockets go under the next candidate, and a worker's
    longest socket name binds there."""
    short = tmp_path if len(str(tmp_path)) < 40 else Path("/tmp")
    chosen = shared_socket_dir((_long_dir(tmp_path), str(short)))
    try:
        assert Path(chosen).parent == short
        path = os.path.join(chosen, f"{2**22}-{'f' * 8}.sock")
        assert len(path) <= len(chosen) + SOCKET_NAME_MAX and len(path) <= SUN_PATH_MAX
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.bind(path)  # would raise "AF_UNIX path too long" under the long directory
    finally:
        for entry in Path(chosen).iterdir():
            entry.unlink()
        os.rmdir(chosen)


def test_no_short_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        shared_socket_dir((_long_dir(tmp_path),))
    assert "Unix socket" in str(exit_.value.code) and "TMPDIR" in str(exit_.value.code)
