"""``prefix-gateway usage``: the same report as ``GET /admin/usage``, read from the policy's ledger.

Each row and the total say how many requests were billed on the gateway's estimate because the
replica's usage never came (``estimated``: the client left, the stream broke off; docs/billing.md).

The ledger is the policy's (``--config``), or a SQLite file named by ``--ledger`` (which wins over the
policy's path): ``prefix-gateway demo`` writes ``./var/ledger.db`` under the directory it ran in, not
beside the example policy, and prints the ``--ledger`` command that reads it (issue 31, item 6).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import orjson

from cache.billing.ledger import LedgerRangeUnavailable
from cache.billing.ledgers import open_ledger
from cache.billing.report import parse_group_by, parse_time, render_csv, render_table, report
from cache.redis_guard import RedisGuard
from cache.store_redis import connect
from config import PolicyError, load_policy
from config.billing import BillingConfig
from config.policy import RedisConfig


def add_usage_command(sub: Any) -> None:
    """``prefix-gateway usage``: the same report as ``GET /admin/usage``, read from the policy's ledger."""
    p = sub.add_parser("usage", help="usage report from the billing ledger (tokens, cost, savings)")
    p.add_argument("--config", help="the gateway's policy file (names the ledger and the currency)")
    p.add_argument("--ledger", metavar="PATH", help="a SQLite ledger file (instead of the policy's)")
    p.add_argument("--since", help="ISO date/time or epoch seconds (inclusive)")
    p.add_argument("--until", help="ISO date/time or epoch seconds (exclusive)")
    p.add_argument("--tenant")
    p.add_argument("--model")
    p.add_argument("--group-by", default="tenant,model", help="any of tenant,model,day,source")
    p.add_argument("--format", choices=["table", "csv", "json"], default="table")
    p.set_defaults(func=cmd_usage)


def cmd_usage(args: Any) -> int:
    if not args.config and not args.ledger:
        print("error: give --config FILE (the policy names the ledger) or --ledger PATH", file=sys.stderr)
        return 1
    try:
        policy = load_policy(args.config) if args.config else None
        billing = policy.billing if policy is not None else BillingConfig()
        redis_cfg = policy.redis if policy is not None else RedisConfig()
        if args.ledger:
            ledger_cfg = billing.ledger.model_copy(update={"kind": "sqlite", "path": args.ledger})
            billing = billing.model_copy(update={"ledger": ledger_cfg})
        since, until = parse_time(args.since, "--since"), parse_time(args.until, "--until")
        group_by = parse_group_by(args.group_by)
    except (PolicyError, ValueError) as exc:
        print(str(exc), file=sys.stderr)
        return 1

    async def run() -> dict[str, Any]:
        redis = None
        if billing.ledger.kind == "redis":
            if redis_cfg.url is None:
                raise ValueError("billing.ledger.kind is 'redis' but redis.url is not set")
            # A report may wait for Redis: the request path's millisecond deadline is not for it.
            redis = connect(redis_cfg.url, redis_cfg.socket_timeout_s, guard=RedisGuard(op_timeout_ms=30_000))
        ledger = await open_ledger(
            billing.ledger, redis_client=redis, key_prefix=redis_cfg.key_prefix, create=False
        )
        try:
            return await report(
                ledger,
                billing.currency,
                tenant=args.tenant,
                model=args.model,
                since=since,
                until=until,
                group_by=group_by,
            )
        finally:
            await ledger.close()
            if redis is not None:
                await redis.aclose()

    try:
        rep = asyncio.run(run())
    except (ValueError, LedgerRangeUnavailable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(orjson.dumps(rep, option=orjson.OPT_INDENT_2).decode())
    elif args.format == "csv":
        print(render_csv(rep), end="")
    else:
        print(render_table(rep))
    return 0
