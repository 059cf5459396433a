"""Fuzzing the request parsing of a real gateway process: random JSON, near-valid OpenAI bodies and
random bytes never get a 5xx made by the gateway itself (a replica's own answer relayed is marked by
``x-gateway-replica``), and the process stays up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.procs import Proc, running, start_gateway, start_sim

SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sim, urls = start_sim(1)
    path: Path = tmp_path_factory.mktemp("fuzz") / "policy.yaml"
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "access_log": False},
        "limits": {"max_body_bytes": 65536},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [
            {"name": "sim-llama", "replicas": [{"url": urls[0]}], "routing": {"policy": "prefix_affinity"}}
        ],
    }
    path.write_text(yaml.safe_dump(policy))
    gw: Proc = start_gateway(["--config", str(path)], env={"PREFIX_GATEWAY_SECRET": "fuzz"})
    with running(gw, sim):
        yield gw.url
        assert gw.popen.poll() is None, "the gateway died during fuzzing"


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as c:
        yield c


def _check(r: httpx.Response) -> None:
    if r.status_code >= 500:
        assert "x-gateway-replica" in r.headers, (r.status_code, r.text[:300])
    if r.status_code >= 400 and r.headers.get("content-type", "").startswith("application/json"):
        err = r.json()["error"]
        assert isinstance(err["message"], str) and "type" in err


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=10), c, max_size=4),
    max_leaves=20,
)
anything = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=30), json_values)
content = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.fixed_dictionaries(
            {"type": st.sampled_from(["text", "image_url", "input_audio", "bogus"])},
            optional={
                "text": anything,
                "image_url": anything,
                "cache_control": st.one_of(st.just({"type": "ephemeral"}), anything),
            },
        ),
        max_size=3,
    ),
    anything,
)
message = st.fixed_dictionaries(
    {"role": st.one_of(st.sampled_from(["system", "user", "assistant", "tool", "developer"]), anything)},
    optional={"content": content, "name": anything, "tool_calls": anything, "tool_call_id": anything},
)
chat_body = st.fixed_dictionaries(
    {
        "model": st.one_of(st.just("sim-llama"), anything),
        "messages": st.one_of(st.lists(message, max_size=4), anything),
    },
    optional={
        "stream": st.one_of(st.booleans(), anything),
        "max_tokens": st.one_of(st.integers(-5, 40), anything),
        "temperature": st.one_of(st.floats(0, 2), anything),
        "seed": anything,
        "n": anything,
        "stop": anything,
        "tools": anything,
        "stream_options": anything,
        "cache_salt": anything,
        "user": anything,
        "response_format": anything,
    },
)
completion_body = st.fixed_dictionaries(
    {
        "model": st.one_of(st.just("sim-llama"), anything),
        "prompt": st.one_of(st.text(max_size=100), anything),
    },
    optional={
        "stream": st.booleans(),
        "max_tokens": st.one_of(st.integers(-5, 40), anything),
        "echo": anything,
    },
)


@SETTINGS
@given(body=chat_body)
def test_near_valid_chat_bodies(gateway_url: str, client: httpx.Client, body: dict) -> None:
    _check(client.post(gateway_url + "/v1/chat/completions", json=body))


@SETTINGS
@given(
    body=completion_body, path=st.sampled_from(["/v1/completions", "/v1/embeddings", "/v1/chat/completions"])
)
def test_near_valid_bodies_on_every_endpoint(
    gateway_url: str, client: httpx.Client, body: dict, path: str
) -> None:
    _check(client.post(gateway_url + path, json=body))


@SETTINGS
@given(body=json_values)
def test_random_json(gateway_url: str, client: httpx.Client, body: object) -> None:
    _check(client.post(gateway_url + "/v1/chat/completions", json=body))


@SETTINGS
@given(
    raw=st.binary(max_size=300),
    ctype=st.sampled_from(["application/json", "text/plain", "", "application/x+json"]),
)
def test_random_bytes(gateway_url: str, client: httpx.Client, raw: bytes, ctype: str) -> None:
    headers = {"Content-Type": ctype} if ctype else {}
    _check(client.post(gateway_url + "/v1/chat/completions", content=raw, headers=headers))
