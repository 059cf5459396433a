"""Capacity without the evidence of cached_tokens (issue 24): a real ``serve`` in front of a simulator whose
answers carry no ``usage.prompt_tokens_details.cached_tokens`` (vLLM without
``--enable-prompt-tokens-details``) and which publishes no capacity. Before round 7 the index's bound
started at the policy's default (64 blocks) and grew toward the engine's 512 from the replica's scraped
``vllm:prefix_cache_hits_total``; now an unpublished estimate starts at its ceiling (8 x the default, here
the engine's 512) and, no answer ever reporting a miss, stays there: the index holds every prompt from its
first round. (The hit counter's growth is pinned by ``tests/unit/test_capacity.py``, from the default.)
With ``learn_capacity: false`` the bound stays at 64 and the test fails."""

from __future__ import annotations

import re
import time
from pathlib import Path

import httpx
import openai
import yaml

from bench.procs import running, start_gateway, start_sim
from tests.support.stack import policy_for

DEFAULT_BLOCKS = 64  # what the router assumes of a replica that publishes nothing
ENGINE_BLOCKS = 512  # what the replica really holds (16-token blocks)
# About 24 blocks each: 2.7 fit the default bound, all fit the engine; within the index's ghost list
# (as long as its bound), so a prompt the bound forgot is still known as a ghost when it comes back
PROMPTS = 5
ROUNDS = 20  # at most; the index holds all of them within a few once the bound has grown
DEADLINE_S = 120.0
HELD = 100  # index blocks that show a grown bound (the five prompts: about 120)


def index_blocks(client: httpx.Client, metrics_url: str) -> int:
    text = client.get(metrics_url + "/metrics").text
    m = re.search(r'^prefix_gateway_prefix_index_blocks\{replica="r0"\} ([0-9.e+]+)$', text, re.M)
    return int(float(m.group(1))) if m else 0


def test_an_unpublished_bound_holds_every_prompt_without_cached_tokens(tmp_path: Path) -> None:
    sim, urls = start_sim(
        1,
        extra=["--speed", "0", "--kv-capacity-blocks", str(ENGINE_BLOCKS),
               "--no-cache-config-info", "--no-cached-tokens"],
    )  # fmt: skip
    routing = {
        "policy": "prefix_affinity",
        "default_kv_capacity_blocks": DEFAULT_BLOCKS,
        "learn_capacity": True,
    }
    policy = policy_for(urls, routing=routing, scrape={"interval_s": 0.1})
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump(policy.model_dump(mode="json", exclude_none=True)))
    gw = start_gateway(["--config", str(path)])
    with running(gw, sim), httpx.Client(timeout=10) as http:
        client = openai.OpenAI(base_url=gw.url + "/v1", api_key="unused", max_retries=0)
        systems = [
            f"Tenant {k} runbook, section {k}: restart the service and page the owner. " * 20
            for k in range(PROMPTS)
        ]
        seen: list[int] = []
        deadline = time.monotonic() + DEADLINE_S
        for rnd in range(ROUNDS):
            for k, system in enumerate(systems):
                resp = client.chat.completions.create(
                    model="sim-llama",
                    max_tokens=2,
                    messages=[{"role": "system", "content": system}, {"role": "user", "content": f"q{rnd}"}],
                )
                assert resp.usage is not None and resp.usage.prompt_tokens > 300
                # the switch: no cached_tokens for the gateway to learn from
                assert resp.usage.prompt_tokens_details is None, resp.usage
                if rnd == 0 and k == 0:
                    assert "prompt_tokens_details" not in resp.model_dump(exclude_unset=True)["usage"]
            seen.append(index_blocks(http, gw.metrics_url or ""))
            if (seen[-1] > HELD and rnd >= 1) or time.monotonic() > deadline:  # the second round hits
                break
        # the sim did count the hits the router could only read from its counter
        sim_metrics = http.get(urls[0] + "/metrics").text
        hits = re.search(r"^vllm:prefix_cache_hits_total\{[^}]*\} ([0-9.e+]+)$", sim_metrics, re.M)
        assert hits is not None and float(hits.group(1)) > 0
    # the index holds every prompt, more than the default bound allows, and not past the engine's
    assert HELD < seen[-1] <= ENGINE_BLOCKS, seen
