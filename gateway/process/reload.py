"""Hot reload of the policy: SIGHUP, a poll of the file's mtime, ``POST /admin/reload``.

The new policy is validated first; an invalid one is logged and counted
(``prefix_gateway_config_reloads_total{result="invalid"}``) and the old one keeps serving. A valid one
becomes a new ``State`` (``gateway.process.state.build_state``, which carries over what unchanged
sections built), made current with one assignment (``Process.swap``): requests in flight finish on
the state they started with. Everything the process owns (breakers and drains, the ledger, Redis,
admission, metrics) is untouched by construction.

Settings bound to the listening socket, the HTTP server or a process-owned resource need a restart;
a reload that changes them logs which (``RESTART_ONLY``).

A policy uploaded as the body of ``POST /admin/reload`` is not the operator's file: it expands only
the environment variables the file policy lists in ``admin.upload_env`` (never the salt secret or a
token by accident), its relative paths resolve against the policy file's directory, and it never
becomes ``Process.file_policy`` (what public endpoints and the next upload's allow-list come from).
Every reload loads the files the new policy names first (``process.preflight``), the keys file
(``tenancy.keys_file``) included: SIGHUP after ``keys revoke`` applies it, and the watch stamps the keys
file as well as the policy file.

A reload drives the process it reloads, so it takes it, typed by what it uses (``Reloadable``, which
``Process`` is): this module is imported by the process (for the watch), and naming the process's type
back closed an import cycle through every module the process imports. The watch loop receives only the
paths it stamps and the reload to call.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from config.loader import PolicyError, load_policy, parse_policy
from config.policy import Policy
from gateway.fleet.discovery import Discovery, start_discovery
from gateway.process.preflight import model_file_problems

if TYPE_CHECKING:
    from gateway.observability.metrics import GatewayMetrics
    from gateway.process.state import State

log = logging.getLogger("prefix_gateway")

RESTART_ONLY = (
    ("server", "host"),
    ("server", "port"),
    ("server", "keepalive_timeout_s"),
    ("server", "metrics_port"),
    ("server", "metrics_host"),
    ("server", "metrics_token_env"),
    ("observability", None),
    ("limits", "max_body_bytes"),
    ("limits", "max_header_bytes"),
    ("limits", "max_headers"),
    ("limits", "header_timeout_s"),
    ("billing", "enabled"),
    ("billing", "ledger"),
    ("redis", None),
    ("shared_index", None),
    ("batch", None),
)


class Reloadable(Protocol):
    """What a reload uses of the process."""

    state: State
    file_policy: Policy
    policy_path: str | None
    metrics: GatewayMetrics
    reload_lock: asyncio.Lock

    def build(self, policy: Policy, previous: State | None) -> tuple[State, list[Callable[[], None]]]: ...

    def swap(self, new: State, pending: list[Callable[[], None]]) -> None: ...

    def start_loops(self, policy: Policy) -> None: ...

    def discovery(self) -> Discovery: ...


@dataclass
class ReloadResult:
    ok: bool
    result: str  # ok | invalid | error | no_source
    message: str
    problems: list[tuple[str, str]] = field(default_factory=list)
    needs_restart: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, object]:
        return {
            "ok": self.ok,
            "result": self.result,
            "message": self.message,
            "problems": [{"path": p, "message": m} for p, m in self.problems],
            "needs_restart": self.needs_restart,
        }


def restart_only_changes(old: Policy, new: Policy) -> list[str]:
    changed = []
    for section, name in RESTART_ONLY:
        a, b = getattr(old, section), getattr(new, section)
        if name is not None:
            a, b = getattr(a, name), getattr(b, name)
        if a != b:
            changed.append(section if name is None else f"{section}.{name}")
    return changed


def swap_policy(process: Reloadable, policy: Policy) -> list[str]:
    """Build the state of ``policy`` and make it current; returns the restart-only settings changed."""
    old = process.state
    new, pending = process.build(policy, previous=old)
    process.swap(new, pending)
    start_discovery(process.discovery(), restart=True)
    if (
        old.policy.health != policy.health
        or old.policy.scrape != policy.scrape
        or old.policy.reload != policy.reload
    ):
        process.start_loops(policy)
    return restart_only_changes(old.policy, policy)


def parse_upload(process: Reloadable, text: str, source: str) -> Policy:
    """An uploaded policy: only the file policy's ``admin.upload_env`` names are expanded."""
    allowed = process.file_policy.admin.upload_env
    env = {name: os.environ[name] for name in allowed if name in os.environ}
    base_dir = os.path.dirname(os.path.abspath(process.policy_path)) if process.policy_path else None
    return parse_policy(
        text,
        f"<{source}>",
        env,
        base_dir=base_dir,
        unset="is not expanded in an uploaded policy (list it in the policy file's admin.upload_env)",
    )


def _read_file(path: str) -> Policy:
    policy = load_policy(path)
    problems = model_file_problems(policy)
    if problems:
        raise PolicyError(path, problems)
    return policy


async def reload(process: Reloadable, *, text: str | None = None, source: str = "signal") -> ReloadResult:
    """Validate and apply a policy (``text``, else the file the process was started with)."""
    reloads = process.metrics.reloads
    async with process.reload_lock:
        try:
            if text is not None:
                policy = parse_upload(process, text, source)
                problems = await asyncio.to_thread(model_file_problems, policy)
                if problems:
                    raise PolicyError(f"<{source}>", problems)
            elif process.policy_path is not None:
                policy = await asyncio.to_thread(_read_file, process.policy_path)
            else:
                reloads.labels("no_source").inc()
                return ReloadResult(
                    False, "no_source", "no policy file to reload from; send the YAML as the body"
                )
        except PolicyError as err:
            reloads.labels("invalid").inc()
            log.warning(
                "policy reload rejected; the old policy keeps serving",
                extra={"event": "reload_invalid", "source": source, "problems": err.problems[:20]},
            )
            return ReloadResult(
                False, "invalid", "invalid policy; the old policy keeps serving", err.problems
            )
        try:
            needs_restart = swap_policy(process, policy)
            if text is None:
                process.file_policy = policy
        except Exception as exc:  # e.g. a tokenizer that cannot be loaded
            reloads.labels("error").inc()
            log.exception(
                "policy reload failed; the old policy keeps serving", extra={"event": "reload_error"}
            )
            return ReloadResult(False, "error", f"reload failed: {type(exc).__name__}: {exc}")
    reloads.labels("ok").inc()
    log.info("policy reloaded", extra={"event": "reloaded", "source": source, "needs_restart": needs_restart})
    message = "reloaded"
    if needs_restart:
        message += f"; these settings take effect only after a restart: {', '.join(needs_restart)}"
    return ReloadResult(True, "ok", message, needs_restart=needs_restart)


def _stat(path: str | None) -> tuple[float, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_mtime, st.st_size)


async def watch_file(
    path: str | None,
    keys_file: Callable[[], str | None],
    reload: Callable[[], Awaitable[Any]],
    interval_s: float,
) -> None:
    """Call ``reload()`` when the policy file's mtime (or size) changes, or the keys file's
    (``keys_file()``: ``tenancy.keys_file`` of the file policy serving now); a ConfigMap update swaps a
    symlink, which ``os.stat`` follows."""
    if path is None:
        return

    def stamp() -> tuple[tuple[float, int] | None, tuple[float, int] | None]:
        return (_stat(path), _stat(keys_file()))

    last = stamp()
    while True:
        await asyncio.sleep(interval_s)
        now = stamp()
        if now[0] is not None and now != last:
            last = now
            await reload()
