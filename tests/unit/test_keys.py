"""``prefix-gateway keys``: a key printed once with the line holding its digest, the keys file the policy
names (appended, revoked, merged into the tenants by the loader), and what is refused."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from config.loader import PolicyError, load_policy
from gateway.cli.main import main
from gateway.pipeline.tenant import TenantResolver

POLICY = {
    "models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:9"}]}],
    "tenancy": {"allow_anonymous": False, "tenants": [{"id": "acme"}, {"id": "globex"}]},
}


def write_policy(tmp: Path, keys_file: str | None = "keys.yaml") -> Path:
    raw = yaml.safe_load(yaml.safe_dump(POLICY))
    if keys_file is not None:
        raw["tenancy"]["keys_file"] = keys_file
    path = tmp / "policy.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def create(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[str, str]:
    """(the printed key, the whole output) of ``keys create``."""
    assert main(["keys", "create", *args]) == 0
    out = capsys.readouterr().out
    keys = [w for w in out.split() if w.startswith("pgw-")]
    assert len(keys) == 1, out  # the key is shown exactly once
    return keys[0], out


def test_create_without_a_keys_file_prints_the_key_once_and_the_policy_line(tmp_path, capsys) -> None:
    path = write_policy(tmp_path, keys_file=None)
    key, out = create(capsys, "--tenant", "acme", "--name", "acme-1", "--config", str(path))
    digest = hashlib.sha256(key.encode()).hexdigest()
    assert f'- "{digest}"  # acme-1' in out and "tenancy.tenants[id=acme].api_key_sha256" in out
    assert len(key) > 40
    assert path.read_text().count(digest) == 0  # the policy is not edited
    # A second key is another key.
    other, _ = create(capsys, "--tenant", "acme")
    assert other != key


def test_the_keys_file_is_appended_merged_by_the_loader_and_revoked(tmp_path, capsys) -> None:
    path = write_policy(tmp_path)
    first, out = create(capsys, "--tenant", "acme", "--name", "acme-1", "--config", str(path))
    keys_file = tmp_path / "keys.yaml"
    text = keys_file.read_text()
    assert first not in text  # only the digest is written
    d1 = hashlib.sha256(first.encode()).hexdigest()
    assert d1 in text and str(keys_file) in out
    second, _ = create(capsys, "--tenant", "acme", "--name", "acme-2", "--config", str(path))
    d2 = hashlib.sha256(second.encode()).hexdigest()

    policy = load_policy(path)
    acme = next(t for t in policy.tenancy.tenants if t.id == "acme")
    assert acme.api_key_sha256 == [d1, d2]
    resolver = TenantResolver(policy.tenancy, b"s")
    for key in (first, second):
        assert resolver.resolve({"Authorization": f"Bearer {key}"}, None).id == "acme"

    assert main(["keys", "list", "--config", str(path)]) == 0
    listed = capsys.readouterr().out
    assert "acme-1" in listed and "acme-2" in listed and first not in listed

    assert main(["keys", "revoke", "--name", "acme-1", "--config", str(path)]) == 0
    capsys.readouterr()
    acme = next(t for t in load_policy(path).tenancy.tenants if t.id == "acme")
    assert acme.api_key_sha256 == [d2]
    assert main(["keys", "revoke", "--name", "acme-1", "--config", str(path)]) == 2  # already gone


def test_refused_edits_leave_the_file_as_it_was(tmp_path, capsys) -> None:
    path = write_policy(tmp_path)
    create(capsys, "--tenant", "acme", "--name", "k", "--config", str(path))
    keys_file = tmp_path / "keys.yaml"
    before = keys_file.read_text()
    assert main(["keys", "create", "--tenant", "nobody", "--config", str(path)]) == 2
    assert "nobody" in capsys.readouterr().err
    assert main(["keys", "create", "--tenant", "acme", "--name", "k", "--config", str(path)]) == 2
    assert "already" in capsys.readouterr().err
    assert keys_file.read_text() == before
    assert main(["keys", "revoke", "--name", "k"]) == 2  # no file to edit


def test_the_loader_names_a_bad_keys_file(tmp_path) -> None:
    path = write_policy(tmp_path)
    with pytest.raises(PolicyError) as missing:
        load_policy(path)
    assert missing.value.problems[0][0] == "tenancy.keys_file"
    keys_file = tmp_path / "keys.yaml"
    keys_file.write_text(yaml.safe_dump([{"tenant": "stranger", "name": "x", "sha256": "a" * 64}]))
    with pytest.raises(PolicyError) as unknown:
        load_policy(path)
    assert "stranger" in unknown.value.problems[0][1]
    keys_file.write_text(yaml.safe_dump([{"tenant": "acme", "name": "x", "sha256": "not-hex"}]))
    with pytest.raises(PolicyError) as bad:
        load_policy(path)
    assert "64 hex" in bad.value.problems[0][1]
    entry = {"tenant": "acme", "name": "x", "sha256": "b" * 64}
    keys_file.write_text(yaml.safe_dump([entry, {**entry, "tenant": "globex"}]))
    with pytest.raises(PolicyError) as dup:
        load_policy(path)
    assert "repeats" in dup.value.problems[0][1]
    keys_file.write_text("[]\n")
    assert all(t.api_key_sha256 == [] for t in load_policy(path).tenancy.tenants)
