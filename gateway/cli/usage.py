"""``prefix-gateway usage``: the same report as ``GET /admin/usage``, read from the policy's ledger.

Each row and the total say how many requests were billed on the gateway's estimate because the
replica's usage never came (``estimated``: the client left, the stream broke off; docs/billing.md).

The ledger is the policy's (``--config``), or a SQLite file named by ``--ledger`` (which wins over the
policy's path): ``prefix-gateway demo`` writes ``./var/ledger.db`` under the directory it ran in, not
beside the example policy, and prints the ``--ledger`` command that reads it (issue 31, item 6).

``--reconcile`` compares the ledger's tokens per replica with the replicas' own counters. Those
counters exist only in the running gateway (its scrape keeps them at window edges), so this mode asks
the gateway (``GET /admin/usage/reconcile``, at ``--url`` or the policy's ``server`` address, with the
admin token from the variable the policy names) instead of opening the ledger; it exits 3 when a
replica's drift passed ``billing.reconcile.drift_threshold_pct``, so a cron job can alert on it.

``--budgets`` shows each tenant budget of the policy (``tenancy.tenants[].budgets``) against its limit,
read where the gateway reads it: the Redis counters when the policy names Redis, else the ledger over
the budget's period (what a process without Redis starts from).
"""

from __future__ import annotations

import asyncio
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import orjson

from cache.billing.budgets import BudgetCounters, budgets_of, report_rows
from cache.billing.ledger import LedgerRangeUnavailable
from cache.billing.ledgers import open_ledger
from cache.billing.pricing import format_micros
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
    p.add_argument(
        "--reconcile",
        action="store_true",
        help="compare the ledger per replica with the replicas' own token counters (asks the gateway)",
    )
    p.add_argument("--url", help="--reconcile: the gateway's base URL (default: the policy's server address)")
    p.add_argument(
        "--budgets",
        action="store_true",
        help="each tenant budget of the policy: spent against its limit, when it resets (--tenant: one)",
    )
    p.set_defaults(func=cmd_usage)


EXIT_DRIFT = 3  # --reconcile: a replica's drift passed the policy's threshold
TABLE_IDS = 10  # estimated rows named per replica in the table


def _fmt(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.2f}"
    return str(v)


def render_reconcile(rep: dict[str, Any]) -> str:
    """One line per replica and kind: counted by the replica, billed, of which estimated, drift."""
    head = [
        "model",
        "replica",
        "kind",
        "replica",
        "ledger",
        "estimated",
        "drift",
        "drift %",
        "rows",
        "est. rows",
    ]
    lines = [head]
    for r in rep["replicas"] + ([rep["unattributed"]] if rep.get("unattributed") else []):
        for kind in ("prompt_tokens", "generation_tokens"):
            counted = r["replica_counters"][kind] if r["replica_counters"] else None
            drift = r["drift"][kind] if r["drift"] else ("reset" if r["counter_reset"] else None)
            share = r["drift_pct"][kind] if r["drift_pct"] else None
            lines.append(
                [
                    r["model"],
                    r["replica"] or "(none)",
                    kind.removesuffix("_tokens"),
                    _fmt(counted),
                    _fmt(r["ledger"][kind]),
                    _fmt(r["estimated"][kind]),
                    _fmt(drift),
                    _fmt(share),
                    _fmt(r["ledger"]["rows"]),
                    _fmt(r["estimated"]["rows"]),
                ]
            )
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    out = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)) for row in lines]
    t = rep["totals"]
    out.append(
        f"window {rep['since_ms']}..{rep['until_ms']} ms; drift prompt {t['drift']['prompt_tokens']}, "
        f"generation {t['drift']['generation_tokens']} tokens; {t['estimated']['rows']} rows with estimated usage"
        f"; threshold {rep['drift_threshold_pct']} %{' EXCEEDED' if rep['exceeded'] else ''}"
    )
    for r in rep["replicas"]:
        if r["estimated"]["request_ids"]:
            shown = r["estimated"]["request_ids"][:TABLE_IDS]  # --format json: the first 100
            more = r["estimated"]["rows"] - len(shown)
            out.append(
                f"estimated on {r['replica']}: {', '.join(shown)}"
                + (f" (and {more} more)" if more > 0 else "")
            )
    return "\n".join(out)


def fetch_reconcile(base_url: str, token: str | None, since: str | None, until: str | None) -> dict[str, Any]:
    query = urllib.parse.urlencode({k: v for k, v in (("since", since), ("until", until)) if v})
    url = base_url.rstrip("/") + "/admin/usage/reconcile" + (f"?{query}" if query else "")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = orjson.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        raise ValueError(f"{url}: {exc.code} {message}") from None
    except urllib.error.URLError as exc:
        raise ValueError(f"{url}: {exc.reason}") from None


def cmd_reconcile(args: Any) -> int:
    if not args.config:  # the gateway's address and the variable holding its admin token
        print("error: --reconcile needs --config FILE (the running gateway's policy)", file=sys.stderr)
        return 1
    try:
        policy = load_policy(args.config)
        parse_time(args.since, "--since"), parse_time(args.until, "--until")
        host = policy.server.host if policy.server.host not in ("0.0.0.0", "::") else "127.0.0.1"
        url = args.url or f"http://{host}:{policy.server.port}"
        rep = fetch_reconcile(url, os.environ.get(policy.admin.token_env), args.since, args.until)
    except (PolicyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(orjson.dumps(rep, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_reconcile(rep))
    return EXIT_DRIFT if rep["exceeded"] else 0


def render_budgets(rows: list[dict[str, Any]]) -> str:
    head = ["tenant", "budget", "period", "models", "spent", "limit", "used", "resets at", ""]
    lines = [head]
    for r in rows:

        def amount(n: int, r: dict[str, Any] = r) -> str:
            return f"{format_micros(n)} {r['currency']}" if r["unit"] == "micros" else f"{n} tokens"

        lines.append(
            [
                str(r["tenant"]),
                str(r["budget"]),
                str(r["period"]),
                ",".join(r["models"]) if r["models"] else "*",
                amount(r["spent"]),
                amount(r["limit"]),
                f"{r['used_pct']:.1f}%",
                str(r["resets_at"] or "-"),
                "EXHAUSTED" if r["exhausted"] else "",
            ]
        )
    widths = [max(len(row[i]) for row in lines) for i in range(len(head))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines
    )


def cmd_budgets(args: Any) -> int:
    if not args.config:
        print("error: --budgets needs --config FILE (the policy names the budgets)", file=sys.stderr)
        return 1
    try:
        policy = load_policy(args.config)
    except PolicyError as exc:
        print(str(exc), file=sys.stderr)
        return 1
    budgets = [b for t, bs in budgets_of(policy.tenancy).items() if args.tenant in (None, t) for b in bs]
    billing, redis_cfg = policy.billing, policy.redis
    if args.ledger:
        billing = billing.model_copy(
            update={"ledger": billing.ledger.model_copy(update={"kind": "sqlite", "path": args.ledger})}
        )

    async def run() -> list[dict[str, Any]]:
        redis = None
        if redis_cfg.url is not None:
            redis = connect(redis_cfg.url, redis_cfg.socket_timeout_s, guard=RedisGuard(op_timeout_ms=30_000))
        ledger = None
        try:
            if redis is None:
                ledger = await open_ledger(billing.ledger, key_prefix=redis_cfg.key_prefix, create=False)
            counters = BudgetCounters(redis=redis, ledger=ledger, key_prefix=redis_cfg.key_prefix)
            # A report must not pass off a local guess as the shared count: no outage allowance here.
            spent = await counters.spent(budgets, outage_pct=0)
            if any(s.degraded for s in spent):
                raise ValueError("Redis did not answer: the budgets' shared counters cannot be read")
            return report_rows(spent, billing.currency)
        finally:
            if ledger is not None:
                await ledger.close()
            if redis is not None:
                await redis.aclose()

    try:
        rows = asyncio.run(run())
    except (ValueError, LedgerRangeUnavailable, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.format == "json":
        print(orjson.dumps({"budgets": rows}, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_budgets(rows) if rows else "no budgets in this policy")
    return 0


def cmd_usage(args: Any) -> int:
    if args.reconcile:
        return cmd_reconcile(args)
    if args.budgets:
        return cmd_budgets(args)
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
