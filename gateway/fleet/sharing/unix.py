"""The shared index between the workers of one host, without Redis: Unix datagram sockets.

Each process binds ``<dir>/<pid>-<random>.sock`` in the directory that ``prefix-gateway serve --workers N``
creates for its workers (``PREFIX_GATEWAY_SHARED_DIR``), or ``shared_index.local_dir``; a flush sends
each batch to every other socket there, non-blocking: a sibling whose receive buffer is full misses
that batch (counted), and a socket nobody listens on any more (a worker that died) is removed. A worker
that (re)starts learns from the others' next batches: there is no history to join.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from config.policy import Policy
from gateway.fleet.sharing.core import TransportError

ENV_DIR = "PREFIX_GATEWAY_SHARED_DIR"
_BUFFER_BYTES = 4 * 1024 * 1024
_RECEIVE_WAIT_S = 1.0


def local_dir(policy: Policy) -> str | None:
    return policy.shared_index.local_dir or os.environ.get(ENV_DIR) or None


class UnixPeers:
    name = "local"

    def __init__(self, policy: Policy) -> None:
        directory = local_dir(policy)
        assert directory is not None
        self.dir = Path(directory)
        self.path = self.dir / f"{os.getpid()}-{secrets.token_hex(4)}.sock"
        self.max_inbox = policy.shared_index.max_pending
        self.max_bytes = policy.shared_index.max_batch_bytes
        self.sock: socket.socket | None = None
        self.inbox: deque[bytes] = deque()
        self.ready = asyncio.Event()
        self.dropped = 0  # batches a sibling could not take, or this one could not keep

    async def open(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.setblocking(False)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, _BUFFER_BYTES)
        sock.bind(str(self.path))
        self.sock = sock
        asyncio.get_running_loop().add_reader(sock.fileno(), self._readable)

    def _readable(self) -> None:
        assert self.sock is not None
        for _ in range(1024):
            try:
                data = self.sock.recv(self.max_bytes + 1024)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            if len(self.inbox) >= self.max_inbox:
                self.dropped += 1
            else:
                self.inbox.append(data)
        if self.inbox:
            self.ready.set()

    def peers(self) -> list[str]:
        try:
            return [
                e.path for e in os.scandir(self.dir) if e.name.endswith(".sock") and e.path != str(self.path)
            ]
        except OSError:
            return []

    async def send(self, batches: Sequence[bytes]) -> None:
        if self.sock is None:
            raise TransportError("not open")
        for peer in self.peers():
            for b in batches:
                try:
                    self.sock.sendto(b, peer)
                except (BlockingIOError, InterruptedError):
                    self.dropped += 1  # its buffer is full: it misses this batch
                except (ConnectionRefusedError, FileNotFoundError):
                    with contextlib.suppress(OSError):
                        os.unlink(peer)  # nobody listens there any more
                    break
                except OSError as exc:
                    raise TransportError(str(exc)) from exc

    async def join(self) -> list[bytes]:
        return []

    async def receive(self) -> list[bytes]:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.ready.wait(), _RECEIVE_WAIT_S)
        self.ready.clear()
        out = list(self.inbox)
        self.inbox.clear()
        return out

    async def close(self) -> None:
        sock, self.sock = self.sock, None
        if sock is not None:
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(sock.fileno())
            sock.close()
            with contextlib.suppress(OSError):
                self.path.unlink()
