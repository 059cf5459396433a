"""The port allocator of the suite: a port another process holds is never handed out, and one process
never hands out one port twice."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from bench import procs


def test_a_port_reserved_by_another_process_is_skipped() -> None:
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent("""
                import sys
                from bench import procs
                print(*procs.free_ports(8), flush=True)
                sys.stdin.read()  # hold the reservations until the test is done
            """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdin is not None
        theirs = [int(p) for p in child.stdout.readline().split()]
        assert len(theirs) == 8
        assert not any(procs._reserve(p) for p in theirs)  # held by the child: refused here
    finally:
        child.communicate("", timeout=30)
    assert procs._reserve(theirs[0])  # the child is gone, and its locks with it


def test_one_process_never_hands_out_a_port_twice() -> None:
    ports = [p for _ in range(100) for p in procs.free_ports(3)]
    assert len(ports) == len(set(ports)) == 300
    assert all(p in procs._RANGE for p in ports)
