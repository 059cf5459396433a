"""bench.vllm_workloads: the real-vLLM benchmark's request sequences, and their engine-model twins."""

from __future__ import annotations

from bench import real_vllm
from bench import vllm_workloads as V
from bench.routing_offline import replay
from config.routing import RoutingConfig
from sim.engine import EngineConfig
from sim.kvcache import count_tokens
from sim.prompt import render_chat


def test_the_real_benchmark_reads_its_workloads_from_here() -> None:
    assert real_vllm.plan is V.plan and real_vllm.documents is V.documents
    assert real_vllm.WORKLOADS is V.WORKLOADS


def test_the_virtual_twin_asks_the_real_plan_closed_loop() -> None:
    wl = V.virtual("zipf16x3k", seed=3, requests=40, concurrency=4)
    asked = V.plan(40, 16, 3, zipf_s=0.9)
    assert len(wl.requests) == 40
    for k, (req, (d, question)) in enumerate(zip(wl.requests, asked, strict=True)):
        system, user = req.body["messages"]
        assert system["content"].startswith(f"Document {d}. ")
        assert user["content"] == question
        # the first four clients start at once; each later request waits for the one four before it
        assert (req.at, req.after) == ((0.0, None) if k < 4 else (None, k - 4))


def test_a_virtual_document_has_the_real_ones_token_count() -> None:
    # 400 words made 1,161 tokens of the tiny Llama's tokenizer (docs/benchmarks.md): 4 bytes a token here
    docs = V.sim_documents(14, 1, 400)
    assert {count_tokens(len(d.encode()), 4) for d in docs} == {round(V.TOKENS_PER_WORD * 400)}
    assert len(set(docs)) == 14
    body = V.virtual("docs14x1k", 1, requests=1).requests[0].body
    assert 1160 < count_tokens(len(render_chat(body)), 4) < 1200


class _Seen:
    """A policy that records what each decision's candidates had been told by a scrape."""

    name = "seen"
    needs_prefix = False

    def __init__(self, log: list[float | None]) -> None:
        self.log = log

    def pick(self, ctx):  # type: ignore[no-untyped-def]
        self.log.extend(r.reported_at for r in ctx.candidates)
        return ctx.candidates[0], "first"


def test_a_replay_without_scrapes_tells_the_router_no_load() -> None:
    """``replay(scrape=False)`` is the real benchmark's ``unpublished`` gateway (``scrape.enabled:
    false``): no decision sees a report; with scrapes every decision after the first scrape does."""
    wl = V.virtual("docs14x1k", 1, requests=12)
    ecfg = EngineConfig(num_gpu_blocks=256, block_size=32)
    runs = {}
    for scrape in (False, True):
        log: list[float | None] = []
        res = replay(wl, RoutingConfig(block_size=32), ecfg, 2, scrape_interval_s=0.01,
                     make_policy=lambda log=log: _Seen(log), scrape=scrape)  # fmt: skip
        assert res.requests == 12 and len(log) == 24
        runs[scrape] = log
    assert runs[False] == [None] * 24
    # the four first requests arrive at 0 before the first scrape; each later one after a scrape
    assert runs[True][:8] == [None] * 8 and all(at is not None for at in runs[True][8:])
