"""The peers' readiness test (bench/peers.py): a started peer is used only once its ``/workers``
lists every worker it was given as healthy, in the shapes smg 1.13.0 and sglang-router 0.3.2 answer."""

from __future__ import annotations

from bench.peers import workers_ready

URLS = ["http://127.0.0.1:9001", "http://127.0.0.1:9002"]


def _entry(url: str, healthy: bool | None = True) -> dict[str, object]:
    e: dict[str, object] = {"id": url[-4:], "url": url, "priority": 50}
    if healthy is not None:
        e["is_healthy"] = healthy
    return e


def test_every_worker_listed_healthy_is_ready() -> None:
    listing = {"workers": [_entry(u) for u in URLS], "total": 2}
    assert workers_ready(listing, URLS)


def test_a_missing_worker_is_not_ready() -> None:
    assert not workers_ready({"workers": [_entry(URLS[0])]}, URLS)
    assert not workers_ready({"workers": []}, URLS)


def test_an_unhealthy_worker_is_not_ready() -> None:
    listing = {"workers": [_entry(URLS[0]), _entry(URLS[1], healthy=False)]}
    assert not workers_ready(listing, URLS)


def test_no_health_field_counts_as_healthy_and_trailing_slashes_match() -> None:
    listing = {"workers": [_entry(URLS[0] + "/", healthy=None), _entry(URLS[1])]}
    assert workers_ready(listing, URLS)


def test_malformed_listings_are_not_ready() -> None:
    assert not workers_ready({}, URLS)
    assert not workers_ready({"workers": "two"}, URLS)
    assert not workers_ready({"workers": [None, 3]}, URLS)
