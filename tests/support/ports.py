"""Free loopback ports for servers started by tests: one allocator for the whole suite (bench.procs),
a slice of ports per pytest-xdist worker below the kernel's ephemeral range."""

from __future__ import annotations

from bench.procs import free_port, free_ports

__all__ = ["free_port", "free_ports"]
