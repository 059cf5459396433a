"""The replica's headers a client gets (``relay.relayed_headers``): every hop-by-hop name dropped
whatever its spelling, every other kept as sent, the same on the first answer and on later ones (the
names are remembered once decided, issue 30 round 9), and the memory bounded."""

from __future__ import annotations

from types import SimpleNamespace

from multidict import CIMultiDict, CIMultiDictProxy

from gateway.pipeline import relay
from gateway.upstream.client import HOP_BY_HOP


def _ctx() -> SimpleNamespace:
    decision = SimpleNamespace(replica=SimpleNamespace(id="r0"), prompt_tokens=8, matched_tokens=4)
    return SimpleNamespace(
        attempts=[SimpleNamespace(decision=decision)], answer_headers=lambda: {"x-request-id": "q"}
    )


def test_hop_by_hop_names_are_dropped_in_any_spelling_and_others_kept_on_every_answer() -> None:
    sent = [
        ("Content-Type", "application/json"),
        ("content-length", "2"),
        ("CONNECTION", "keep-alive"),
        ("Server", "uvicorn"),
        ("x-replica-note", "a"),
        ("Transfer-Encoding", "chunked"),
        ("X-Replica-Note", "b"),
    ]
    resp = SimpleNamespace(headers=CIMultiDictProxy(CIMultiDict(sent)))
    first = relay.relayed_headers(resp, _ctx())  # type: ignore[arg-type]
    again = relay.relayed_headers(resp, _ctx())  # type: ignore[arg-type]
    assert first == again
    kept = {k for k, _ in sent if k.lower() not in HOP_BY_HOP}
    assert kept <= set(first) and not any(k.lower() in HOP_BY_HOP for k in first)
    assert first["x-gateway-replica"] == "r0" and first["x-gateway-prefix-match"] == "4/8"
    assert "content-length" in relay._DROPPED and "Content-Type" in relay._RELAYED


def test_the_remembered_names_are_bounded() -> None:
    many = [(f"x-h{i}", "v") for i in range(relay._NAMES_KEPT + 50)]
    resp = SimpleNamespace(headers=CIMultiDictProxy(CIMultiDict(many)))
    out = relay.relayed_headers(resp, _ctx())  # type: ignore[arg-type]
    assert all(f"x-h{i}" in out for i in range(len(many)))  # decided even when not remembered
    assert len(relay._RELAYED) <= relay._NAMES_KEPT and len(relay._DROPPED) <= relay._NAMES_KEPT
