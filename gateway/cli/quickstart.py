"""A policy from command-line flags, like sgl-router's ``--worker-urls``: no file needed."""

from __future__ import annotations

from typing import Any

import httpx

from config.policy import Policy


class DiscoveryError(Exception):
    pass


def discover_models(urls: list[str], timeout_s: float = 5.0) -> dict[str, list[str]]:
    """Ask each replica's ``/v1/models``; map each model name to the replicas serving it."""
    served: dict[str, list[str]] = {}
    with httpx.Client(timeout=timeout_s) as client:
        for url in urls:
            try:
                resp = client.get(url.rstrip("/") + "/v1/models")
                resp.raise_for_status()
                names = [m["id"] for m in resp.json()["data"]]
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                raise DiscoveryError(
                    f"cannot list models of {url} ({exc}); pass --model NAME to skip discovery"
                ) from None
            for name in names:
                served.setdefault(name, []).append(url)
    if not served:
        raise DiscoveryError("the replicas serve no model; pass --model NAME")
    return served


def policy_from_flags(
    replicas: list[str],
    *,
    model: str | None,
    routing_policy: str,
    host: str,
    port: int,
    backend: str = "vllm",
    discover: Any = discover_models,
) -> Policy:
    served = {model: replicas} if model else discover(replicas)
    raw = {
        "server": {"host": host, "port": port},
        "models": [
            {
                "name": name,
                "backend": backend,
                "replicas": [{"url": u} for u in urls],
                "routing": {"policy": routing_policy},
            }
            for name, urls in served.items()
        ],
    }
    return Policy.model_validate(raw)
