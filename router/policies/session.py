"""Session affinity: requests carrying the same session header go to the same replica, within bounds.

The session id (salted per tenant) is placed by CHWBL, so one busy session cannot drown a replica.
Without the header the route key is placed the same way.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from xxhash import xxh3_64_intdigest

from router.policies.base import PickContext
from router.policies.least_load import least_loaded
from router.policies.ring import HashRing, chwbl_pick
from router.replica import ReplicaState


def session_id(headers: Mapping[str, str], name: str) -> str | None:
    """The header's value, looked up case-insensitively whatever mapping the gateway passes."""
    value = headers.get(name)
    if value is None:
        value = headers.get(name.lower())
    if value is None and isinstance(headers, dict):
        value = next((v for k, v in headers.items() if k.lower() == name), None)
    return value or None


def session_key(salt: str, sid: str) -> int:
    s = salt.encode("utf-8", "surrogatepass")
    return xxh3_64_intdigest(len(s).to_bytes(4, "little") + s + sid.encode("utf-8", "surrogatepass"))


class Session:
    name = "session"
    needs_prefix = True

    def __init__(
        self,
        header: str = "x-session-id",
        *,
        virtual_nodes: int = 160,
        load_factor: float = 1.25,
        seed: int | None = None,
    ) -> None:
        self.header = header.lower()
        self.ring = HashRing(virtual_nodes)
        self.load_factor = load_factor
        self._rng = random.Random(seed)

    def pick(self, ctx: PickContext) -> tuple[ReplicaState, str]:
        sid = session_id(ctx.request.headers, self.header)
        if sid is not None:
            key, reason = session_key(ctx.request.tenant_salt, sid), "session"
        else:
            key, reason = ctx.route_key, "no_session_chwbl"
        replica = chwbl_pick(self.ring, key, ctx.candidates, self.load_factor)
        if replica is None:
            return least_loaded(ctx.candidates, self._rng), "session_least_load"
        return replica, reason
