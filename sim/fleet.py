"""Several simulated replicas in one process, each on its own loopback port."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiohttp import web

from sim.config import SimConfig
from sim.server import REPLICA_KEY, create_app
from sim.state import Replica


@dataclass
class Fleet:
    """Running replicas: ``urls[i]`` serves ``replicas[i]``."""

    host: str
    ports: list[int]
    replicas: list[Replica]
    _runners: list[web.AppRunner | None] = field(default_factory=list, repr=False)

    @property
    def urls(self) -> list[str]:
        return [f"http://{self.host}:{port}" for port in self.ports]

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def stop(self) -> None:
        """Close the listeners and cancel handlers still running (hung or streaming requests)."""
        runners, self._runners = self._runners, []
        for runner in runners:
            if runner is not None:
                await runner.cleanup()

    async def stop_replica(self, index: int) -> None:
        """Stop one replica (its port refuses connections from now on); the others go on."""
        runner = self._runners[index]
        if runner is not None:
            self._runners[index] = None
            await runner.cleanup()


async def start_replica(
    cfg: SimConfig, host: str = "127.0.0.1", port: int = 0, index: int = 0
) -> tuple[web.AppRunner, int, Replica]:
    """Start one replica; returns ``(runner, port, replica)``. Port 0 picks a free port."""
    app = create_app(cfg, index)
    # handler_cancellation: a client that goes away cancels its handler, as it does in vLLM.
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port, backlog=1024)
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    bound = runner.addresses[0][1]
    return runner, bound, app[REPLICA_KEY]


async def start_replicas(configs: list[SimConfig], host: str = "127.0.0.1", base_port: int = 9100) -> Fleet:
    """Start one replica per config on ``base_port + i`` (``base_port == 0``: free ports)."""
    fleet = Fleet(host=host, ports=[], replicas=[])
    try:
        for i, cfg in enumerate(configs):
            runner, port, rep = await start_replica(cfg, host, base_port + i if base_port else 0, i)
            fleet._runners.append(runner)
            fleet.ports.append(port)
            fleet.replicas.append(rep)
    except BaseException:
        await fleet.stop()
        raise
    return fleet
