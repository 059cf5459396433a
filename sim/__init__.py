"""A simulated vLLM replica (OpenAI-compatible, with a prefix-cache and latency model).

Lets the gateway be tested and benchmarked without GPUs. It deliberately shares no code with
``router/``: it models the replica independently of the gateway's own view of it.
"""

from sim.config import Faults, SimConfig
from sim.fleet import Fleet, start_replica, start_replicas
from sim.server import REPLICA_KEY, create_app
from sim.state import Replica

__all__ = [
    "REPLICA_KEY",
    "Faults",
    "Fleet",
    "Replica",
    "SimConfig",
    "create_app",
    "start_replica",
    "start_replicas",
]
