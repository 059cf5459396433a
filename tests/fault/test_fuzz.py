"""Fuzzing the request parsing of a real gateway process: random JSON, near-valid OpenAI bodies and
random bytes never get a 5xx made by the gateway itself (a replica's own answer relayed is marked by
``x-gateway-replica``), and the process stays up. ``CORPUS``: the hostile inputs of issue 19 (huge
message counts, n=1000000, thousands of headers, reused request ids, uploads naming secrets), each
answered in OpenAI's shape with the process up and its memory bounded."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import orjson
import psutil
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.procs import Proc, running, start_gateway, start_sim

ADMIN_TOKEN = "fuzz-admin-token"
GATEWAYS: dict[str, Proc] = {}

SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def gateway_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    sim, urls = start_sim(1)
    path: Path = tmp_path_factory.mktemp("fuzz") / "policy.yaml"
    policy = {
        "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
        "limits": {"max_body_bytes": 65536},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [
            {"name": "sim-llama", "replicas": [{"url": urls[0]}], "routing": {"policy": "prefix_affinity"}}
        ],
        # What is fuzzed is the gateway's parsing: the one replica is never ejected (a run of the
        # replica's own 5xx answers to odd bodies would open its breaker and make the gateway's 503).
        "health": {"enabled": False},
        "breaker": {"transport_failures": 100_000, "status_failures": 100_000},
    }
    path.write_text(yaml.safe_dump(policy))
    env = {"PREFIX_GATEWAY_SECRET": "fuzz-secret-value", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN}
    with running(sim):
        gw: Proc = start_gateway(["--config", str(path)], env=env)
        with running(gw):
            GATEWAYS[gw.url] = gw
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


def _chat(**extra: object) -> bytes:
    return orjson.dumps({"model": "sim-llama", "messages": [{"role": "user", "content": "hi"}], **extra})


# (name, body, headers): the inputs of issue 19, as a CI corpus (each answered, the process up).
CORPUS: list[tuple[str, bytes, dict[str, str]]] = [
    (
        "100,000 short messages",
        orjson.dumps({"model": "sim-llama", "messages": [{"role": "user", "content": "hello"}] * 100_000}),
        {},
    ),
    (
        "2,049 messages",
        orjson.dumps({"model": "sim-llama", "messages": [{"role": "user", "content": "x"}] * 2049}),
        {},
    ),
    ("n = 1,000,000", _chat(n=1_000_000), {}),
    ("best_of = 10**9", _chat(best_of=10**9), {}),
    ("n = 10**30", _chat(max_tokens=2)[:-1] + b', "n": 1000000000000000000000000000000}', {}),
    ("negative n", _chat(n=-1), {}),
    (
        "a marker on every message",
        orjson.dumps(
            {
                "model": "sim-llama",
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "text", "text": "t", "cache_control": {"type": "ephemeral"}}],
                    }
                ]
                * 50,
            }
        ),
        {},
    ),
    ("one x-request-id for many", _chat(max_tokens=2), {"x-request-id": "same-id"}),
    ("a 10 kB x-request-id", _chat(max_tokens=2), {"x-request-id": "r" * 10_000}),
    ("finish_reason abort asked for", _chat(max_tokens=2, finish_reason="abort"), {}),
    ("deep nesting", b'{"model": "sim-llama", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}", {}),
]


@pytest.mark.parametrize("name,body,headers", CORPUS, ids=[c[0] for c in CORPUS])
def test_the_issue_19_corpus(
    gateway_url: str, client: httpx.Client, name: str, body: bytes, headers: dict
) -> None:
    rss = psutil.Process(GATEWAYS[gateway_url].pid).memory_info().rss
    for _ in range(3):
        r = client.post(
            gateway_url + "/v1/chat/completions",
            content=body,
            headers={"Content-Type": "application/json", **headers},
        )
        _check(r)
        assert r.status_code < 500, (name, r.status_code, r.text[:200])
    assert psutil.Process(GATEWAYS[gateway_url].pid).memory_info().rss - rss < 64 * 1024 * 1024, name


def test_thousands_of_headers_and_an_upload_naming_a_secret(gateway_url: str, client: httpx.Client) -> None:
    host, port = gateway_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        head = "".join(f"X-H{i}: v\r\n" for i in range(10_000))
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode())
        assert sock.recv(64).split()[1] == b"431"
    leak = "models:\n  - name: leak-${PREFIX_GATEWAY_SECRET}\n    replicas: [{url: 'http://127.0.0.1:9'}]\n"
    r = client.post(
        gateway_url + "/admin/reload", content=leak, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
    )
    assert r.status_code == 422 and "fuzz-secret-value" not in r.text
    for path in ("/v1/models", "/ready"):
        assert "fuzz-secret-value" not in client.get(gateway_url + path).text
