"""Which transport the shared index uses: by default the workers of ``--workers N`` share (locally);
pods share through Redis only when the policy says so."""

from __future__ import annotations

import pytest

from config.policy import Policy
from gateway.fleet.sharing import transport_name
from gateway.fleet.sharing.unix import ENV_DIR


def policy(**sections: object) -> Policy:
    return Policy.model_validate(
        {"models": [{"name": "m", "replicas": [{"url": "http://127.0.0.1:1"}]}], **sections}
    )


REDIS = {"url": "redis://127.0.0.1:1/0"}


@pytest.mark.parametrize(
    ("sections", "workers", "expected"),
    [
        ({}, False, None),  # one process, nothing to share with
        ({}, True, "local"),  # the workers of --workers N share by default
        ({"redis": REDIS}, True, "local"),  # ... and not through Redis unless asked
        ({"redis": REDIS}, False, None),
        ({"redis": REDIS, "shared_index": {"enabled": True}}, False, "redis"),  # pods, asked for
        ({"shared_index": {"enabled": True}}, True, "local"),
        ({"shared_index": {"enabled": False}}, True, None),  # turned off
    ],
)
def test_transport(
    monkeypatch: pytest.MonkeyPatch, sections: dict, workers: bool, expected: str | None
) -> None:
    if workers:
        monkeypatch.setenv(ENV_DIR, "/tmp/pgw-shared-test")
    else:
        monkeypatch.delenv(ENV_DIR, raising=False)
    assert transport_name(policy(**sections)) == expected
