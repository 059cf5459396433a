"""Tenant resolution and salts."""

from __future__ import annotations

import base64
import hashlib
import hmac
import re

import pytest
from multidict import CIMultiDict

from config.policy import TenancyConfig
from gateway.errors import GatewayError
from gateway.pipeline.tenant import TenantResolver, allows, derive_salt

SECRET = b"s3cret"
KEY_A = "sk-tenant-a"
KEY_B = "sk-tenant-b"


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def resolver(**overrides: object) -> TenantResolver:
    cfg = TenancyConfig.model_validate(
        {
            "allow_anonymous": False,
            "tenants": [
                {"id": "a", "api_key_sha256": [digest(KEY_A)]},
                {"id": "b", "api_key_sha256": [digest(KEY_B)], "group": "shared"},
                {"id": "c", "group": "shared"},
            ],
            **overrides,
        }
    )
    return TenantResolver(cfg, SECRET)


def headers(**kv: str) -> CIMultiDict[str]:
    return CIMultiDict({k.replace("_", "-"): v for k, v in kv.items()})


def test_salt_is_hmac_of_length_prefixed_id() -> None:
    assert derive_salt(SECRET, "a") != derive_salt(SECRET, "b")
    assert derive_salt(SECRET, "a") != derive_salt(b"other", "a")
    # The exact construction: HMAC-SHA256(secret, 4-byte big-endian length || id), base64url unpadded.
    mac = hmac.new(SECRET, (1).to_bytes(4, "big") + b"a", hashlib.sha256).digest()
    assert derive_salt(SECRET, "a") == base64.urlsafe_b64encode(mac).rstrip(b"=").decode()
    assert len(derive_salt(SECRET, "a")) == 43  # base64url of 32 bytes, no padding
    assert "=" not in derive_salt(SECRET, "a")


def test_valid_key_resolves_its_tenant() -> None:
    t = resolver().resolve(headers(Authorization=f"Bearer {KEY_A}"), "127.0.0.1")
    assert t.id == "a" and t.listed
    assert t.salt == derive_salt(SECRET, "a")


def test_group_members_share_a_salt() -> None:
    r = resolver()
    b = r.resolve(headers(Authorization=f"Bearer {KEY_B}"), None)
    assert b.salt == derive_salt(SECRET, "shared")
    a = r.resolve(headers(Authorization=f"Bearer {KEY_A}"), None)
    assert a.salt != b.salt


@pytest.mark.parametrize(
    ("hdrs", "code"),
    [
        ({}, "missing_api_key"),
        ({"Authorization": "Bearer wrong"}, "invalid_api_key"),
        ({"Authorization": "Basic abc"}, "invalid_api_key"),
    ],
)
def test_unknown_or_missing_key_is_401(hdrs: dict[str, str], code: str) -> None:
    with pytest.raises(GatewayError) as info:
        resolver().resolve(CIMultiDict(hdrs), None)
    assert info.value.status == 401 and info.value.code == code
    assert info.value.type == "authentication_error"


def test_anonymous_policy_gives_default_tenant() -> None:
    r = resolver(allow_anonymous=True)
    t = r.resolve(headers(), None)
    assert t.id == "anonymous"
    assert r.resolve(headers(Authorization="Bearer EMPTY"), None).id == "anonymous"
    assert r.resolve(headers(Authorization=f"Bearer {KEY_A}"), None).id == "a"


def test_trusted_header_only_from_trusted_proxies() -> None:
    r = resolver(trusted_header="x-tenant-id", trusted_proxies=["10.0.0.0/8"])
    t = r.resolve(headers(x_tenant_id="a"), "10.1.2.3")
    assert t.id == "a"
    dynamic = r.resolve(headers(x_tenant_id="newcomer"), "10.1.2.3")
    assert dynamic.id == "newcomer" and not dynamic.listed and dynamic.metric_label == "other"
    with pytest.raises(GatewayError):
        r.resolve(headers(x_tenant_id="a"), "192.168.1.1")  # untrusted peer: header ignored, no key → 401


def test_tenant_labels_name_hash_or_drop_the_tenant() -> None:
    """Issue 31, item 5: ``observability.tenant_labels`` for operators whose monitoring must not see
    tenant names: hashed under the server secret (a plain hash of a name is reversed by guessing), or
    one ``all`` label; unlisted tenants stay ``other`` (bounded cardinality)."""
    cfg = TenancyConfig.model_validate({"tenants": [{"id": "alice"}, {"id": "bob"}]})
    named, hashed, none = (TenantResolver(cfg, SECRET, mode) for mode in ("name", "hashed", "none"))
    assert [named.label_of(t) for t in ("alice", "stranger", "other")] == ["alice", "other", "other"]
    alice, bob = hashed.label_of("alice"), hashed.label_of("bob")
    assert re.fullmatch(r"t-[0-9a-f]{12}", alice) and alice != bob and "alice" not in alice
    assert alice == TenantResolver(cfg, SECRET, "hashed").tenant("alice").metric_label  # stable
    assert alice != TenantResolver(cfg, b"another", "hashed").label_of("alice")  # keyed by the secret
    assert alice != "t-" + hashlib.sha256(b"alice").hexdigest()[:12]
    assert hashed.label_of("stranger") == "other"
    assert {none.label_of(t) for t in ("alice", "bob", "stranger", "other")} == {"all"}


def test_a_tenants_models_are_names_or_patterns_and_none_allows_every_model() -> None:
    cfg = TenancyConfig.model_validate(
        {
            "default_tenant": "a",
            "tenants": [
                {"id": "a", "api_key_sha256": [digest(KEY_A)], "models": ["llama-8b", "sql-*"]},
                {"id": "b", "api_key_sha256": [digest(KEY_B)]},
            ],
        }
    )
    r = TenantResolver(cfg, SECRET)
    a = r.resolve(CIMultiDict({"Authorization": f"Bearer {KEY_A}"}), None)
    assert [allows(a, m) for m in ("llama-8b", "sql-lora", "llama-70b", "LLAMA-8B", "llama-8b-x")] == [
        True,
        True,
        False,
        False,  # case-sensitive, as model names are
        False,
    ]
    assert r.resolve(CIMultiDict(), None) is a  # the default tenant, when listed, has its list too
    b = r.resolve(CIMultiDict({"x-api-key": KEY_B}), None)
    assert allows(b, "anything") and allows(r.tenant("unlisted"), "anything")
    with pytest.raises(ValueError):
        TenancyConfig.model_validate({"tenants": [{"id": "c", "models": []}]})
