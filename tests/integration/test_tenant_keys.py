"""Keys issued by ``prefix-gateway keys`` into the keys file a policy names, through a real gateway and the
real ``openai`` client: a new key is accepted after the reload, a rotation keeps every request of the old
key working until it is revoked and none after, the file watch and SIGHUP both pick the file up, and no
key reaches a log."""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import openai
import pytest
import yaml

from bench.procs import running, start_gateway, start_sim
from config.loader import load_policy
from gateway.cli.main import main
from tests.support.stack import gateway, sim_fleet

ENV = {"PREFIX_GATEWAY_SECRET": "keys-secret"}


def write_policy(path: Path, urls: list[str], **sections: object) -> None:
    raw: dict[str, object] = {
        "server": {"host": "127.0.0.1", "port": 0, "metrics_port": 0, "access_log": False},
        "cache": {"enabled": False},
        "billing": {"ledger": {"path": ":memory:"}},
        "models": [{"name": "sim-llama", "replicas": [{"url": u} for u in urls]}],
        "tenancy": {
            "allow_anonymous": False,
            "keys_file": "keys.yaml",
            "tenants": [{"id": "acme"}, {"id": "globex"}],
        },
        **sections,
    }
    path.write_text(yaml.safe_dump(raw))


def keys(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """Run ``prefix-gateway keys``; the key ``create`` printed (else '')."""
    assert main(["keys", *args]) == 0
    printed = [w for w in capsys.readouterr().out.split() if w.startswith("pgw-")]
    return printed[0] if printed else ""


async def accepted(url: str, key: str) -> bool:
    """Whether a chat with ``key`` answers (True) or is refused with 401 (False)."""
    async with openai.AsyncOpenAI(base_url=url + "/v1", api_key=key, max_retries=0) as c:
        try:
            r = await c.chat.completions.create(
                model="sim-llama", messages=[{"role": "user", "content": "hi"}], max_tokens=2
            )
        except openai.AuthenticationError as err:
            assert err.code == "invalid_api_key"
            return False
        assert r.choices[0].message.content
        return True


async def until(cond: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not await cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_rotation_through_the_watched_keys_file(tmp_path: Path, capsys, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "policy.yaml"
    async with sim_fleet(1) as fleet:
        write_policy(path, fleet.urls, reload={"watch_interval_s": 0.05})
        cfg = ["--config", str(path)]
        old = keys(capsys, "create", "--tenant", "acme", "--name", "acme-old", *cfg)
        async with gateway(load_policy(path), policy_path=str(path)) as gw:
            assert await accepted(gw.url, old)
            new = keys(capsys, "create", "--tenant", "acme", "--name", "acme-new", *cfg)
            # The old key keeps working while the new one is picked up, and after.
            old_results: list[bool] = []

            async def new_works() -> bool:
                old_results.append(await accepted(gw.url, old))
                return await accepted(gw.url, new)

            await until(new_works)
            assert old_results and all(old_results)
            assert gw.state.tenants.resolve({"Authorization": f"Bearer {new}"}, None).id == "acme"
            assert await accepted(gw.url, old)

            keys(capsys, "revoke", "--name", "acme-old", *cfg)

            async def old_refused() -> bool:
                return not await accepted(gw.url, old)

            await until(old_refused)
            for _ in range(5):  # none after
                assert not await accepted(gw.url, old)
                assert await accepted(gw.url, new)
    assert old not in caplog.text and new not in caplog.text


def test_sighup_applies_a_revocation_in_a_real_process(tmp_path: Path, capsys) -> None:
    sim, urls = start_sim(1)
    with running(sim):
        path = tmp_path / "policy.yaml"
        write_policy(path, urls)
        cfg = ["--config", str(path)]
        old = keys(capsys, "create", "--tenant", "globex", "--name", "g-old", *cfg)
        log_path = str(tmp_path / "gateway.log")
        gw = start_gateway(cfg, env=ENV, log_path=log_path)
        with running(gw):
            assert asyncio.run(accepted(gw.url, old))
            new = keys(capsys, "create", "--tenant", "globex", "--name", "g-new", *cfg)
            keys(capsys, "revoke", "--name", "g-old", *cfg)
            assert asyncio.run(accepted(gw.url, old))  # not applied before the signal: no watch here
            gw.popen.send_signal(signal.SIGHUP)

            async def rotated() -> bool:
                return not await accepted(gw.url, old)

            asyncio.run(until(rotated))
            assert asyncio.run(accepted(gw.url, new))
            assert gw.stop() == 0
        text = Path(log_path).read_text()
        assert "policy reloaded" in text or "reloaded" in text
        assert old not in text and new not in text
