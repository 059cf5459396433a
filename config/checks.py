"""What a valid policy may still get wrong: warnings an operator should read before serving it.

Pure: the policy only (the files it names are checked by ``gateway.process.preflight``).
"""

from __future__ import annotations

import ipaddress

from config.policy import Policy


def is_loopback(host: str) -> bool:
    """True for an address only this machine reaches (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name that may resolve anywhere, or "" / "0.0.0.0"-like wildcards


def policy_warnings(policy: Policy) -> list[tuple[str, str]]:
    """(path in the policy, warning) pairs; empty for a policy without surprises."""
    out: list[tuple[str, str]] = []
    tenancy, server = policy.tenancy, policy.server
    if tenancy.allow_anonymous and not is_loopback(server.host):
        out.append(
            (
                "tenancy.allow_anonymous",
                f"anyone who reaches {server.host}:{server.port} is served as tenant "
                f"{tenancy.default_tenant!r} without an API key (set allow_anonymous: false and list "
                "tenants, or listen on a loopback address)",
            )
        )
    return out
