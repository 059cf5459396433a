"""``prefix-gateway advise``: the layout advice of a running gateway, as a table or JSON.

The advisor's sketches live in the gateway process's memory, so the command asks the gateway
(``GET /admin/advice``, with the admin token from the environment variable the policy names) rather
than reading a file; the savings per cache layer in the answer come from the gateway's ledger.
"""

from __future__ import annotations

import ipaddress
import os
import sys
from typing import Any

import httpx
import orjson

from cache.advisor.render import render_table
from config import PolicyError, load_policy
from config.policy import Policy


def gateway_url(policy: Policy) -> str:
    """The policy's listening address as a client reaches it (a wildcard address means this host)."""
    host = policy.server.host
    try:
        if ipaddress.ip_address(host).is_unspecified:
            host = "127.0.0.1"
    except ValueError:
        pass
    return f"http://{host}:{policy.server.port}"


def add_advise_command(sub: Any) -> None:
    p = sub.add_parser("advise", help="what each tenant's prompt layout costs it (from a running gateway)")
    p.add_argument("--config", required=True, help="the gateway's policy file (address, admin token env)")
    p.add_argument("--url", help="the gateway's base URL (default: the policy's server address)")
    p.add_argument("--tenant")
    p.add_argument("--since", help="savings period start: ISO date/time or epoch seconds (default: 24 h ago)")
    p.add_argument("--until", help="savings period end (exclusive; default: now)")
    p.add_argument("--format", choices=["table", "json"], default="table")
    p.set_defaults(func=cmd_advise)


def cmd_advise(args: Any) -> int:
    try:
        policy = load_policy(args.config)
    except PolicyError as err:
        print(err.render(), file=sys.stderr)
        return 1
    token = os.environ.get(policy.admin.token_env)
    if not token:
        print(f"error: set {policy.admin.token_env} to the gateway's admin token", file=sys.stderr)
        return 1
    params = {k: v for k, v in (("tenant", args.tenant), ("since", args.since), ("until", args.until)) if v}
    url = (args.url or gateway_url(policy)).rstrip("/") + "/admin/advice"
    try:
        resp = httpx.get(url, params=params, headers={"Authorization": f"Bearer {token}"}, timeout=30.0)
    except httpx.HTTPError as exc:
        print(f"error: cannot reach the gateway at {url}: {exc}", file=sys.stderr)
        return 1
    if resp.status_code != 200:
        try:
            message = resp.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = resp.text[:200]
        print(f"error: {url} answered {resp.status_code}: {message}", file=sys.stderr)
        return 1
    doc = resp.json()
    if args.format == "json":
        print(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode())
    else:
        print(render_table(doc["advice"], doc["savings"]))
    return 0
