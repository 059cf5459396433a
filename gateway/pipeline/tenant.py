"""Who is calling: API key → tenant, the tenant's cache salt, and the trusted-proxy header.

The salt is ``base64url(HMAC-SHA256(server secret, len(group) || group))``: length-prefixing the id means
no tenant id can be chosen to collide with another's input, and only the server knows the secret.
Tenants of one sharing group share a salt, hence cache entries and prefix blocks.

The tenant label of metrics (``observability.tenant_labels``): the listed tenant's id, ``other`` for
the unlisted (bounded cardinality); ``hashed``, ``t-`` and 12 hex digits of an HMAC of the id under the
server secret (a plain hash of a short name is reversed by guessing names); ``none``, ``all`` for every
tenant, for operators whose monitoring must not tell tenants apart.

A listed tenant's ``models`` (names or ``fnmatch`` glob patterns, matched case-sensitively against the
name the client sends, a LoRA adapter's included) bound what it may call: ``allows``. A model outside
them answers as OpenAI answers a model the key cannot use (404 ``model_not_found``, the same answer as a
model that does not exist, so a key learns nothing of the models it may not use); ``None`` allows every
model, as for unlisted tenants and the anonymous default when it is not listed.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from dataclasses import dataclass

from config.policy import TenancyConfig
from gateway.errors import GatewayError

log = logging.getLogger("prefix_gateway")


@dataclass(frozen=True, slots=True)
class Tenant:
    id: str
    group: str
    salt: str
    listed: bool  # named in the policy (bounded metric-label cardinality)
    metric_label: str  # its tenant label in metrics (``metric_label``)
    models: tuple[str, ...] | None = None  # names or glob patterns it may call; None: every model


def allows(tenant: Tenant, model: str) -> bool:
    """Whether ``tenant`` may call ``model`` (a pool's name or a LoRA adapter's)."""
    if tenant.models is None:
        return True
    return any(fnmatch.fnmatchcase(model, pattern) for pattern in tenant.models)


def not_accessible(model: str) -> GatewayError:
    """OpenAI's answer to a model that does not exist or that the key may not use (the same answer)."""
    return GatewayError(
        404,
        f"The model `{model}` does not exist or you do not have access to it.",
        param="model",
        code="model_not_found",
    )


OTHER_TENANT = "other"
ALL_TENANTS = "all"


def metric_label(secret: bytes, mode: str, tenant_id: str, listed: bool) -> str:
    """The tenant label of ``tenant_id`` in metrics under ``observability.tenant_labels`` ``mode``."""
    if mode == "none":
        return ALL_TENANTS
    if not listed:
        return OTHER_TENANT
    if mode == "hashed":
        ident = tenant_id.encode("utf-8")
        mac = hmac.new(secret, b"metric-label\0" + ident, hashlib.sha256).hexdigest()
        return f"t-{mac[:12]}"
    return tenant_id


def derive_salt(secret: bytes, group_id: str) -> str:
    ident = group_id.encode("utf-8")
    mac = hmac.new(secret, len(ident).to_bytes(4, "big") + ident, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


WORKERS_SECRET_ENV = "PREFIX_GATEWAY_WORKERS_SECRET"  # drawn by the --workers supervisor when the operator
# set no secret: one for all its workers (their block hashes and cache salts must agree, or the placements
# they share never match); never a pod's secret for state shared through Redis (each pod draws its own)


def server_secret(cfg: TenancyConfig, *, required: bool) -> bytes:
    """The salt secret from the environment. Unset: the one the ``--workers`` supervisor drew for its
    workers, else a random one for this process, unless ``required`` (pods sharing Redis)."""
    value = os.environ.get(cfg.secret_env)
    if value:
        return value.encode("utf-8")
    if required:
        raise RuntimeError(
            f"{cfg.secret_env} is not set: gateway pods sharing state (Redis) must share one server secret"
        )
    drawn = os.environ.get(WORKERS_SECRET_ENV)
    if drawn:
        log.info(
            "server secret not set; using the one the supervisor drew for its workers",
            extra={"event": "secret_shared_by_workers", "env": cfg.secret_env},
        )
        return drawn.encode("utf-8")
    log.warning(
        "server secret not set; using a random one for this process",
        extra={"event": "secret_missing", "env": cfg.secret_env},
    )
    return secrets.token_bytes(32)


class TenantResolver:
    def __init__(self, cfg: TenancyConfig, secret: bytes, labels: str = "name"):
        self.cfg = cfg
        self._secret = secret
        self._labels = labels
        self._by_digest: dict[str, Tenant] = {}
        self._by_id: dict[str, Tenant] = {}
        for t in cfg.tenants:
            group = t.group or t.id
            tenant = self._make(t.id, group, listed=True, models=t.models)
            self._by_id[t.id] = tenant
            for digest in t.api_key_sha256:
                self._by_digest[digest] = tenant
        default = cfg.default_tenant
        self.default = self._by_id.get(default) or self._make(default, default, listed=True)
        self._proxies = [ipaddress.ip_network(p, strict=False) for p in cfg.trusted_proxies]

    def tenant(self, tenant_id: str) -> Tenant:
        """The tenant with this id, as ``resolve`` would have found it (a batch runs as its creator)."""
        listed = self._by_id.get(tenant_id)
        if listed is not None:
            return listed
        if tenant_id == self.default.id:
            return self.default
        return self._make(tenant_id, tenant_id, listed=False)

    def _make(self, tenant_id: str, group: str, *, listed: bool, models: list[str] | None = None) -> Tenant:
        label = metric_label(self._secret, self._labels, tenant_id, listed)
        allowed = None if models is None else tuple(models)
        return Tenant(tenant_id, group, derive_salt(self._secret, group), listed, label, allowed)

    def label_of(self, label: str) -> str:
        """The metric label for a tenant id, or for ``other`` (the advisor's gauges are keyed by id)."""
        if label == OTHER_TENANT and label not in self._by_id:
            return metric_label(self._secret, self._labels, label, listed=False)
        return self.tenant(label).metric_label

    def salt_for(self, tenant_id: str) -> str:
        """The salt a tenant's requests carry (its group's), listed or not."""
        return self.tenant(tenant_id).salt

    def _from_trusted_header(self, headers: object, peer: str | None) -> Tenant | None:
        name = self.cfg.trusted_header
        if not name or not peer or not self._proxies:
            return None
        value = headers.get(name)  # type: ignore[attr-defined]
        if not value:
            return None
        try:
            addr = ipaddress.ip_address(peer)
        except ValueError:
            return None
        if not any(addr in net for net in self._proxies):
            return None
        tenant = self._by_id.get(value)
        if tenant is not None:
            return tenant
        if len(value) > 128 or not all(c.isalnum() or c in "._:-" for c in value):
            raise GatewayError(400, f"invalid {name} header", code="invalid_tenant")
        return self._make(value, value, listed=False)

    def resolve(self, headers: object, peer: str | None) -> Tenant:
        """Tenant of a request from its headers (a case-insensitive mapping) and peer address."""
        tenant = self._from_trusted_header(headers, peer)
        if tenant is not None:
            return tenant
        # OpenAI clients send ``Authorization: Bearer``; Anthropic clients ``x-api-key``.
        auth = headers.get("Authorization")  # type: ignore[attr-defined]
        key = None
        if auth:
            scheme, _, bearer = auth.partition(" ")
            key = bearer.strip() if scheme.lower() == "bearer" else None
        else:
            key = headers.get("x-api-key")  # type: ignore[attr-defined]
            auth = key
        if key:
            found = self._by_digest.get(hashlib.sha256(key.encode("utf-8")).hexdigest())
            if found is not None:
                return found
        if self.cfg.allow_anonymous:
            return self.default
        if not auth:
            raise GatewayError(
                401,
                "You didn't provide an API key. Use 'Authorization: Bearer YOUR_KEY' (or 'x-api-key').",
                code="missing_api_key",
            )
        raise GatewayError(401, "Incorrect API key provided.", code="invalid_api_key")
