"""The keys file a policy names (``tenancy.keys_file``): API key digests kept out of the main policy.

A YAML list of ``{tenant, name, sha256}``: ``sha256`` is the hex SHA-256 of the key, the digest the
resolver (``gateway.pipeline.tenant``) looks a bearer key up by, the same as ``api_key_sha256`` in the
policy; the key itself is never stored, logged or shown again after ``prefix-gateway keys create``
printed it. A tenant may hold several keys, so a key is rotated without downtime: create the new one,
move the clients, revoke the old (``keys revoke --name``). ``name`` identifies a key for revocation
and must be unique in the file. Every tenant a key names must be a tenant of the policy (its models and
group live there); the loader (``config.loader``) merges the digests into those tenants and reports a
problem at ``tenancy.keys_file`` otherwise, so ``check-config`` and every reload check the file too.
"""

from __future__ import annotations

import hashlib
import secrets
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from config.policy import TenancyConfig

KEY_PREFIX = "pgw-"  # recognisable in a leaked-secret scan; 32 random bytes follow


class KeysFileError(Exception):
    """A keys file that cannot be used; ``message`` says why (never with a key: the file has none)."""


class KeyEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._:-]+$")
    name: str = Field(min_length=1, max_length=128)
    sha256: str

    @field_validator("sha256")
    @classmethod
    def _hex(cls, d: str) -> str:
        d = d.strip().lower()
        if len(d) != 64 or any(c not in "0123456789abcdef" for c in d):
            raise ValueError("sha256 must be 64 hex characters (sha256 of the key)")
        return d


def key_digest(key: str) -> str:
    """The digest the resolver verifies: hex SHA-256 of the key's UTF-8 bytes."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def read_keys(path: str | Path) -> list[KeyEntry]:
    """The entries of a keys file; ``KeysFileError`` when it cannot be read or is malformed."""
    p = Path(path)
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise KeysFileError(f"cannot read the keys file {p}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, yaml.YAMLError):
        raise KeysFileError(f"the keys file {p} is not valid YAML text") from None
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise KeysFileError(f"the keys file {p} must be a YAML list of {{tenant, name, sha256}}")
    entries = []
    for i, item in enumerate(raw):
        try:
            entries.append(KeyEntry.model_validate(item))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "entry"
            raise KeysFileError(f"the keys file {p}, entry [{i}] {where}: {first['msg']}") from None
    names = [e.name for e in entries]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise KeysFileError(f"the keys file {p} repeats the key names {dup} (a name is what revoke removes)")
    return entries


def render_keys(entries: list[KeyEntry]) -> str:
    header = "# prefix-gateway keys file: sha256 of each key, never the key (prefix-gateway keys create)\n"
    body = [e.model_dump() for e in entries]
    return header + (yaml.safe_dump(body, sort_keys=False) if body else "[]\n")


def write_keys(path: str | Path, entries: list[KeyEntry]) -> None:
    """Replace the file in one rename, so a gateway reloading it never reads half a file."""
    p = Path(path)
    tmp = p.with_name(f".{p.name}.tmp")
    tmp.write_text(render_keys(entries), encoding="utf-8")
    tmp.replace(p)


def merge_keys(tenancy: TenancyConfig, entries: list[KeyEntry]) -> TenancyConfig:
    """``tenancy`` with each entry's digest added to its tenant's ``api_key_sha256``."""
    by_id = {t.id: list(t.api_key_sha256) for t in tenancy.tenants}
    seen = {d for ds in by_id.values() for d in ds}
    for e in entries:
        if e.tenant not in by_id:
            raise KeysFileError(
                f"key {e.name!r} names the tenant {e.tenant!r}, which is not in tenancy.tenants"
            )
        if e.sha256 in seen:
            raise KeysFileError(f"key {e.name!r}: its digest is already listed (one key, one tenant)")
        seen.add(e.sha256)
        by_id[e.tenant].append(e.sha256)
    tenants = [t.model_copy(update={"api_key_sha256": by_id[t.id]}) for t in tenancy.tenants]
    return tenancy.model_copy(update={"tenants": tenants})
