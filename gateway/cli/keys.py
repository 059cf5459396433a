"""``prefix-gateway keys``: issue, list and revoke tenants' API keys.

``create`` draws a key (``pgw-`` and 32 random bytes, ``secrets.token_urlsafe``), prints it once on
stdout, and either appends its digest to the keys file (``--keys-file``, or the ``tenancy.keys_file`` of
``--config``) or, when there is none, prints the policy line that holds the digest. The key itself is
written nowhere else: not to the file, not to a log. ``revoke --name`` removes one key from the keys
file. A running gateway applies either on its next reload (SIGHUP, ``reload.watch_interval_s``, or
``POST /admin/reload``), so a rotation is: create, move the clients, revoke, reload.

With ``--config``, the edited file is checked against the policy (the key's tenant must be one of its
tenants) before it is written, and written in one rename: a gateway never reloads a file it would reject.
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any

from config.keys import KeyEntry, KeysFileError, key_digest, merge_keys, new_key, read_keys, write_keys
from config.loader import PolicyError, load_policy
from config.policy import Policy


def add_keys_command(sub: Any) -> None:
    p = sub.add_parser("keys", help="issue, list and revoke tenants' API keys (the keys file)")
    ks = p.add_subparsers(dest="keys_command", required=True)

    def target(q: argparse.ArgumentParser) -> None:
        q.add_argument("--config", help="the gateway's policy file (its tenancy.keys_file, its tenants)")
        q.add_argument("--keys-file", metavar="PATH", help="the keys file itself (instead of the policy's)")

    create = ks.add_parser("create", help="a new key for a tenant, printed once")
    create.add_argument("--tenant", required=True)
    create.add_argument("--name", help="the key's name, what revoke removes (default: <tenant>-<6 hex>)")
    target(create)
    create.set_defaults(func=cmd_keys_create)

    revoke = ks.add_parser("revoke", help="remove a key from the keys file")
    revoke.add_argument("--name", required=True)
    target(revoke)
    revoke.set_defaults(func=cmd_keys_revoke)

    listing = ks.add_parser("list", help="the keys file's keys: tenant, name, digest prefix")
    target(listing)
    listing.set_defaults(func=cmd_keys_list)


def _fail(message: str) -> int:
    print(f"prefix-gateway keys: {message}", file=sys.stderr)
    return 2


def _target(args: argparse.Namespace) -> tuple[Policy | None, Path | None]:
    """The policy (``--config``, read without its keys file) and the keys file, either may be None."""
    policy = load_policy(args.config, keys=False) if args.config else None
    if args.keys_file:
        return policy, Path(args.keys_file)
    path = policy.tenancy.keys_file if policy is not None else None
    return policy, Path(path) if path else None


def _entries(path: Path) -> list[KeyEntry]:
    return read_keys(path) if path.exists() else []


def _save(policy: Policy | None, path: Path, entries: list[KeyEntry]) -> None:
    if policy is not None:
        merge_keys(policy.tenancy, entries)  # raises what the gateway's reload would reject
    write_keys(path, entries)


def cmd_keys_create(args: argparse.Namespace) -> int:
    try:
        policy, path = _target(args)
        name = args.name or f"{args.tenant}-{secrets.token_hex(3)}"
        key = new_key()
        entry = KeyEntry(tenant=args.tenant, name=name, sha256=key_digest(key))
        if path is not None:
            entries = _entries(path)
            if any(e.name == name for e in entries):
                return _fail(f"a key named {name!r} is already in {path}")
            _save(policy, path, [*entries, entry])
        elif policy is not None and all(t.id != args.tenant for t in policy.tenancy.tenants):
            return _fail(f"the policy has no tenant {args.tenant!r} (tenancy.tenants)")
    except (PolicyError, KeysFileError, ValueError) as exc:
        return _fail(exc.render() if isinstance(exc, PolicyError) else str(exc))
    print(f"API key for tenant {args.tenant} (name {name}); shown once, store it now:")
    print(key)
    if path is not None:
        print(f"appended to the keys file {path}:")
        print(f"  - {{tenant: {entry.tenant}, name: {name}, sha256: {entry.sha256}}}")
        print("a running gateway uses it after its next reload (SIGHUP, reload.watch_interval_s)")
    else:
        print(f"add this line to tenancy.tenants[id={args.tenant}].api_key_sha256 in the policy:")
        print(f'      - "{entry.sha256}"  # {name}')
    return 0


def cmd_keys_revoke(args: argparse.Namespace) -> int:
    try:
        policy, path = _target(args)
        if path is None:
            return _fail("revoke edits a keys file: pass --keys-file, or --config naming tenancy.keys_file")
        entries = _entries(path)
        kept = [e for e in entries if e.name != args.name]
        if len(kept) == len(entries):
            return _fail(f"no key named {args.name!r} in {path}")
        _save(policy, path, kept)
    except (PolicyError, KeysFileError, ValueError) as exc:
        return _fail(exc.render() if isinstance(exc, PolicyError) else str(exc))
    print(f"revoked {args.name} in {path}; a running gateway refuses it after its next reload")
    return 0


def cmd_keys_list(args: argparse.Namespace) -> int:
    try:
        _, path = _target(args)
        if path is None:
            return _fail("pass --keys-file, or --config naming tenancy.keys_file")
        entries = _entries(path)
    except (PolicyError, KeysFileError) as exc:
        return _fail(exc.render() if isinstance(exc, PolicyError) else str(exc))
    for e in entries:
        print(f"{e.tenant}\t{e.name}\t{e.sha256[:12]}")
    return 0
