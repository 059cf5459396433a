"""Non-streamed prefill release and /admin/routing/explain end to end: a gateway in front of
simulated replicas over real sockets (the simulator sends a non-streamed answer's headers with its
body, as vLLM does)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from tests.support.stack import gateway, policy_for, sim_faults, sim_fleet, sim_generations

TOKEN = "explain-admin-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECRET_WORD = "zorblaxquiff"  # a word that appears in the prompts only
DOC = f"The handbook of the {SECRET_WORD} fleet, chapter and verse. " * 40  # ~600 tokens


def chat(question: str, max_tokens: int = 4, **extra: object) -> dict:
    return {
        "model": "sim-llama",
        "max_tokens": max_tokens,
        "messages": [{"role": "system", "content": DOC}, {"role": "user", "content": question}],
        **extra,
    }


async def until(cond, what: str, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not cond():
        assert asyncio.get_running_loop().time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


# -- 3. a non-streamed request's prefill leaves the queue when it ends, not when the answer does -------
async def test_a_non_streamed_request_releases_its_prefill_before_its_answer_ends() -> None:
    # Prefill ~0.06 s, then 200 tokens at 0.02 s: the answer takes 4 s, the margin a loaded machine
    # needs between the predicted release and the answer's end.
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.02) as fleet,
        # An assumed rate of 1,000 tokens/s predicts the prefill's end about 1 s after the decision: the
        # test's polls (due earlier on the same loop) see it queued first, however loaded the machine.
        gateway(
            policy_for(fleet.urls, routing={"policy": "prefix_affinity", "prefill_tokens_per_s": 1000})
        ) as gw,
        aiohttp.ClientSession() as s,
    ):
        rep = gw.state.pools["sim-llama"].router.replicas[0]

        async def ask() -> dict:
            async with s.post(gw.url + "/v1/chat/completions", json=chat("Summarise.", 200)) as r:
                assert r.status == 200
                return await r.json()

        task = asyncio.ensure_future(ask())
        await until(lambda: rep.in_flight == 1, "the request to be routed")
        assert rep.queued_prefill_tokens > 500
        await until(lambda: rep.queued_prefill_tokens == 0 or task.done(), "the prefill to be released")
        # Released while the replica still generates (its generation is running, the answer not sent).
        assert [g["outcome"] for g in await sim_generations(fleet.urls[0])] == ["running"]
        assert not task.done() and rep.in_flight == 1
        body = await task
        assert body["usage"]["completion_tokens"] == 200
        assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)  # once: never below zero


async def test_error_and_cancel_release_the_prefill_once() -> None:
    async with (
        sim_fleet(1, speed=1.0, decode_s_per_token=0.05) as fleet,
        gateway(
            policy_for(fleet.urls, routing={"policy": "prefix_affinity", "prefill_tokens_per_s": 1.0})
        ) as gw,  # a rate that predicts minutes: only the end of the request releases the prefill
        aiohttp.ClientSession() as s,
    ):
        rep = gw.state.pools["sim-llama"].router.replicas[0]
        # cancel: the client goes away mid-generation
        with pytest.raises(asyncio.TimeoutError):
            async with s.post(
                gw.url + "/v1/chat/completions",
                json=chat("Go on.", 100),
                timeout=aiohttp.ClientTimeout(total=0.5),
            ) as r:
                await r.read()
        await until(lambda: rep.in_flight == 0, "the cancelled request to be released")
        assert rep.queued_prefill_tokens == 0
        # error: the replica answers 500 (not retried: relayed)
        await sim_faults(fleet.urls[0], {"fail_status": 500})
        async with s.post(gw.url + "/v1/chat/completions", json=chat("Again.")) as r:
            assert r.status == 500
        assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)
        await sim_faults(fleet.urls[0], {})
        async with s.post(gw.url + "/v1/chat/completions", json=chat("Once more.")) as r:
            assert r.status == 200
        assert (rep.in_flight, rep.queued_prefill_tokens) == (0, 0)


# -- 4. decisions anyone can explain ----------------------------------------------------------------------
async def test_explain_a_decision_by_either_id_and_count_available_against_achieved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PREFIX_GATEWAY_ADMIN_TOKEN", TOKEN)
    async with sim_fleet(3) as fleet:
        policy = policy_for(
            fleet.urls, routing={"policy": "prefix_affinity", "seed": 3}, limits={"explain_decisions": 2}
        )
        async with gateway(policy) as gw, aiohttp.ClientSession() as s:
            ids = []
            for k in range(3):
                async with s.post(
                    gw.url + "/v1/chat/completions",
                    json=chat(f"Question {k} about the {SECRET_WORD}."),
                    headers={"x-request-id": f"client-{k}"},
                ) as r:
                    assert r.status == 200
                    ids.append((r.headers["x-gateway-request-id"], r.headers["x-gateway-replica"]))
                    await r.read()
            url = gw.url + "/admin/routing/explain"
            async with s.get(url, params={"request_id": ids[2][0]}) as r:
                assert r.status == 401  # admin-authenticated like every /admin route
            async with s.get(url, params={"request_id": ids[2][0]}, headers=AUTH) as r:
                assert r.status == 200
                text = await r.text()
                found = await r.json()
            (rec,) = found["decisions"]
            assert rec["request_id"] == ids[2][0] and rec["client_request_id"] == "client-2"
            (attempt,) = rec["attempts"]
            assert attempt["chosen"] == ids[2][1] == rec["replica"]
            assert attempt["policy"] == "prefix_affinity" and attempt["reason"] == "affinity"
            # The 2nd and 3rd requests' matches end at the same block: a shared prefix, w = 0.
            assert attempt["weights"] == {"reuse_factor": 1.0, "decode_cost_tokens": 64.0}
            cands = {c["replica"]: c for c in attempt["candidates"]}
            assert set(cands) == {"r0", "r1", "r2"}
            won = cands[ids[2][1]]
            assert won["chosen"] and won["matched_tokens"] >= 512
            assert all(won["score"] <= c["score"] for c in cands.values())  # the lowest score won
            for c in cands.values():  # queued + decode x load - (1 + w) x matched
                assert c["score"] == c["queued_prefill_tokens"] + 64.0 * c["load"] - c["matched_tokens"]
            assert rec["available_tokens"] == won["matched_tokens"]
            assert rec["reported_cached_tokens"] >= 512
            assert ids[2][1] in attempt["why"] and "longest match" in attempt["why"]
            async with s.get(url, params={"request_id": "client-1"}, headers=AUTH) as r:
                assert r.status == 200
                assert [d["request_id"] for d in (await r.json())["decisions"]] == [ids[1][0]]
            for evicted in (ids[0][0], "client-0"):  # the buffer keeps 2: the first left it
                async with s.get(url, params={"request_id": evicted}, headers=AUTH) as r:
                    assert r.status == 404
                    err = (await r.json())["error"]
                    assert err["code"] == "decision_evicted" and "evicted" in err["message"]
            async with s.get(url, params={"request_id": "never-seen"}, headers=AUTH) as r:
                assert r.status == 404
                assert (await r.json())["error"]["code"] == "decision_not_found"
            async with s.get(url, headers=AUTH) as r:
                assert r.status == 400
                assert (await r.json())["error"]["param"] == "request_id"
            async with s.get(gw.metrics_url + "/metrics") as r:
                metrics = await r.text()
    assert SECRET_WORD not in text and SECRET_WORD not in metrics
    available = achieved = 0.0
    for line in metrics.splitlines():
        if line.startswith("prefix_gateway_routing_available_tokens_total{"):
            assert 'pool="sim-llama"' in line and "replica=" in line and "tenant" not in line
            available += float(line.rsplit(" ", 1)[1])
        if line.startswith("prefix_gateway_routing_achieved_cached_tokens_total{"):
            achieved += float(line.rsplit(" ", 1)[1])
    assert available >= 2 * 512 and achieved >= 2 * 512  # the 2nd and 3rd requests found the document
