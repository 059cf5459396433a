"""Placements shared between processes: ``first_byte`` offers the decision's blocks to the shared index.

The replica holds the prompt's blocks once its prefill is done, so the other processes (``--workers``,
other pods through Redis) learn the placement then; without a shared index the hook does nothing.
"""

from __future__ import annotations

from gateway.pipeline.context import RequestContext


def share(ctx: RequestContext) -> None:
    shared = ctx.process.shared
    if shared is None:
        return
    d = ctx.decision
    if d is not None and d.block_hashes and ctx.pool is not None:
        shared.offer(ctx.pool.name, d.replica.id, d.block_hashes)
