"""Free loopback ports for servers started by tests: the one allocator of the suite and the benchmarks
(``bench.procs.free_ports``), which reserves each port machine-wide until the child has bound it."""

from __future__ import annotations

from bench.procs import free_port, free_ports

__all__ = ["free_port", "free_ports"]
