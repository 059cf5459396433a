"""The layout advisor on traffic it was not designed around: application generators, each with its fix.

    python -m bench.advisor_apps [--requests 150] [--seeds 1 2 3] [--json FILE] [--apps a,b]

Each ``App`` sends chat requests the way a real application of its kind does, and says what applying
the advice means for it: ``fixed`` (the layout rewritten as the finding kind says: move the variable
part after the stable one, sort the blocks whose order varies) and ``marked`` (the same prompts with a
``cache_control`` marker on the system message: what ``explicit_would_pay`` asks for). ``expect`` is
the finding kind a correct advisor gives (None: the layout is already right, no finding above 1 % of
the input cost).

Measurement, per seed: the traffic of all apps, interleaved, goes through a real gateway
(``prefix-gateway serve``, billing on, SQLite ledger, ``prefix_affinity``, advisor at sample rate 1) in
front of three simulated replicas. The gateway's own advice (``GET /admin/advice``) names the kinds and
the estimated saving per request of each app. Then each app is replayed through fresh processes with
the advice applied (``marked`` when the advice is ``explicit_would_pay``, ``fixed`` for the other
kinds, unchanged when there is no finding) and the measured saving is the difference of the gateway's
own ``x-gateway-billing-cost`` headers (checked against the ledger's total). Reported: estimate /
measured per app and seed.

``HELD_OUT`` apps were written with the others, before the advisor was changed, and not looked at
while it was changed; they are reported separately.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

from bench.advisor import ADMIN_TOKEN, api_key, policy_dict
from bench.procs import Proc, start_gateway, start_sim
from bench.workloads import MODEL, TEMPERATURE, TextGen
from cache.billing.ledger_sqlite import SqliteLedger

MAX_TOKENS = 8
REPLICAS = 3
ESTIMATE_TOLERANCE = 0.15
GOOD_LAYOUT_MAX_PCT = 1.0  # a right layout: no finding above 1 % of its input cost

Body = dict[str, Any]


@dataclass(frozen=True)
class App:
    name: str
    make: Callable[[int, str], Body]  # (request index, variant: "as_is", "fixed", "marked", "fixed+marked")
    expect: str | None
    held_out: bool = False


def _body(messages: list[dict[str, Any]], tools: list[Any] | None = None) -> Body:
    b: Body = {"model": MODEL, "messages": messages, "max_tokens": MAX_TOKENS, "temperature": TEMPERATURE}
    if tools is not None:
        b["tools"] = tools
    return b


def _sys(text: str, variant: str, rest: str = "") -> dict[str, Any]:
    """The system message ``text + rest``; marked (``explicit_would_pay`` applied): a marker at the end
    of ``text``, the stable part (``rest`` is the part that varies, in a second content part)."""
    if "marked" in variant:
        parts: list[dict[str, Any]] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
        if rest:
            parts.append({"type": "text", "text": rest})
        return {"role": "system", "content": parts}
    return {"role": "system", "content": text + rest}


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def apps(seed: int) -> list[App]:
    rng = random.Random(seed * 7919 + 17)
    gen = TextGen(rng)
    out: list[App] = []

    # 1. RAG: per-request retrieved passages, then long fixed instructions, in the system message.
    rag_instr = gen.text(1200)
    passages = [gen.text(rng.randint(150, 350)) for _ in range(600)]
    rag_q = [gen.tokens(20, 80) for _ in range(1000)]

    def rag(i: int, v: str) -> Body:
        r = random.Random(seed * 100_003 + i)
        ps = "\n\n".join(f"[{k + 1}] {passages[r.randrange(len(passages))]}" for k in range(3))
        if "fixed" not in v:
            return _body([_sys(f"Context:\n{ps}\n\n{rag_instr}", v), _user(rag_q[i % 1000])])
        return _body([_sys(rag_instr, v, f"\n\nContext:\n{ps}"), _user(rag_q[i % 1000])])

    out.append(App("rag_passages_first", rag, "variable_prefix"))

    # 2. Agent: 16 tools shuffled per request (a set kept in a hash map), a fixed system prompt.
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "function": {
                "name": f"tool_{k:02d}_{gen.text(1)[:6].strip() or 'x'}",
                "description": gen.text(rng.randint(60, 120)),
                "parameters": {
                    "type": "object",
                    "properties": {
                        f"arg{j}": {"type": "string", "description": gen.text(8)} for j in range(3)
                    },
                },
            },
        }
        for k in range(16)
    ]
    agent_sys = gen.text(600)
    tasks = [gen.tokens(30, 120) for _ in range(1000)]

    def agent(i: int, v: str) -> Body:
        ts = list(tools)
        if "fixed" in v:
            ts.sort(key=lambda t: t["function"]["name"])
        else:
            random.Random(seed * 1_000_003 + i).shuffle(ts)
        return _body([_sys(agent_sys, v), _user(tasks[i % 1000])], tools=ts)

    out.append(App("agent_tools_shuffled", agent, "reorder"))

    # 3. Per-user persona: the user's name and the local time in the first line of a long system prompt,
    # a short user turn.
    persona = gen.text(1500)
    names = [gen.text(2)[:12].strip() for _ in range(40)]
    short_q = [gen.tokens(5, 25) for _ in range(1000)]

    def who(i: int) -> str:
        return f"You are talking to {names[i % 40]}. Local time: 2026-12-01 {i % 24:02d}:{i * 7 % 60:02d}:{i * 13 % 60:02d}."

    def persona_app(i: int, v: str) -> Body:
        if "fixed" in v:
            return _body([_sys(persona, v, f"\n{who(i)}"), _user(short_q[i % 1000])])
        return _body([_sys(f"{who(i)}\n{persona}", v), _user(short_q[i % 1000])])

    out.append(App("persona_name_time", persona_app, "variable_prefix"))

    # 4. Multi-turn chat: 25 conversations interleaved, each re-sending its history; a 1,500-token
    # system prompt. Already right: the history is a growing prefix, cached implicitly; marking the
    # system prompt would bill the history in full (explicit and implicit are exclusive).
    chat_sys = gen.text(1500)
    turns = [[(gen.tokens(20, 80), gen.tokens(60, 160)) for _ in range(12)] for _ in range(25)]

    def multi(i: int, v: str) -> Body:
        conv, turn = i % 25, (i // 25) % 12
        msgs = [_sys(chat_sys, v)]
        for q, a in turns[conv][:turn]:
            msgs += [_user(q), {"role": "assistant", "content": a}]
        msgs.append(_user(turns[conv][turn][0]))
        return _body(msgs)

    out.append(App("multi_turn_chat", multi, None))

    # 5. A well-laid-out app: fixed system prompt first, the variable question last.
    good_sys = gen.text(1000)
    good_q = [gen.tokens(40, 200) for _ in range(1000)]

    out.append(App("good_layout_app", lambda i, v: _body([_sys(good_sys, v), _user(good_q[i % 1000])]), None))

    # 6. One long conversation: 150 turns of one user, a 1,200-token system prompt. Right as it is;
    # marking the system prompt would bill the growing history in full.
    long_sys = gen.text(1200)
    long_turns = [(gen.tokens(15, 40), gen.tokens(20, 60)) for _ in range(160)]

    def long_conv(i: int, v: str) -> Body:
        msgs = [_sys(long_sys, v)]
        for q, a in long_turns[:i]:
            msgs += [_user(q), {"role": "assistant", "content": a}]
        msgs.append(_user(long_turns[i % 160][0]))
        return _body(msgs)

    out.append(App("long_conversation", long_conv, None))

    # -- held out ------------------------------------------------------------------------------------

    # 7. Few-shot classifier: instructions, then 24 labelled examples shuffled per request (against
    # position bias), then the text to classify.
    fs_instr = gen.text(250)
    examples = [
        f"Text: {gen.text(rng.randint(25, 50))}\nLabel: {rng.choice(['a', 'b', 'c'])}" for _ in range(24)
    ]
    inputs = [gen.tokens(20, 90) for _ in range(1000)]

    def fewshot(i: int, v: str) -> Body:
        ex = list(examples)
        if "fixed" not in v:
            random.Random(seed * 7_000_003 + i).shuffle(ex)
        return _body([_sys(fs_instr + "\n\n" + "\n\n".join(ex), v), _user(inputs[i % 1000])])

    out.append(App("fewshot_shuffled", fewshot, "reorder", held_out=True))

    # 8. Code assistant: the user's question, then the open file (one of 3, ~1,000 tokens each) in the
    # same user message; fix: the file context before the question.
    code_sys = gen.text(500)
    files = [gen.text(1000) for _ in range(3)]
    code_q = [gen.tokens(15, 60) for _ in range(1000)]

    def code(i: int, v: str) -> Body:
        f = files[(i // 10) % 3]  # sessions of 10 requests on one file
        if "fixed" in v:
            return _body([_sys(code_sys, v), _user(f"File:\n{f}\n\nQuestion: {code_q[i % 1000]}")])
        return _body([_sys(code_sys, v), _user(f"Question: {code_q[i % 1000]}\n\nFile:\n{f}")])

    out.append(App("code_assistant_file", code, "fixed_tail", held_out=True))

    # 9. Support bot: the ticket's text, then 900 tokens of fixed answering rules after it, in the user
    # message (the system message is short).
    sup_sys = gen.text(80)
    sup_rules = gen.text(900)
    tickets = [gen.tokens(40, 250) for _ in range(1000)]

    def support(i: int, v: str) -> Body:
        if "fixed" in v:
            return _body([_sys(sup_sys + "\n" + sup_rules, v), _user(tickets[i % 1000])])
        return _body([_sys(sup_sys, v), _user(tickets[i % 1000] + "\n\n" + sup_rules)])

    out.append(App("support_rules_after_ticket", support, "fixed_tail", held_out=True))

    # 10. RAG laid out right: instructions first, passages, question; nothing to advise.
    rag2_instr = gen.text(900)

    def rag_good(i: int, v: str) -> Body:
        r = random.Random(seed * 300_007 + i)
        ps = "\n\n".join(passages[r.randrange(len(passages))] for _ in range(2))
        return _body([_sys(rag2_instr, v), _user(f"Context:\n{ps}\n\nQuestion: {rag_q[i % 1000]}")])

    out.append(App("rag_well_laid_out", rag_good, None, held_out=True))

    # -- tuning, added after the held-out apps (its own generator: the apps above are unchanged) -------

    # 11. Glossary bot: instructions, then 40 short glossary entries (10-30 tokens each) shuffled per
    # request (drawn from a set), then the user's question. Written after fewshot_shuffled's estimate
    # fell short (issue 26), to find why on an app the advisor may be tuned on: shuffled blocks of
    # another shape (shorter, more of them, one separator).
    grng = random.Random(seed * 104_729 + 11)
    ggen = TextGen(grng)
    gl_instr = ggen.text(400)
    entries = [f"- {ggen.text(2).strip()}: {ggen.text(grng.randint(10, 30))}" for _ in range(40)]
    gl_q = [ggen.tokens(15, 60) for _ in range(1000)]

    def glossary(i: int, v: str) -> Body:
        es = list(entries)
        if "fixed" in v:
            es.sort()
        else:
            random.Random(seed * 9_000_011 + i).shuffle(es)
        return _body([_sys(gl_instr + "\nGlossary:\n" + "\n".join(es), v), _user(gl_q[i % 1000])])

    out.append(App("glossary_shuffled", glossary, "reorder"))
    return out


# -- measurement -------------------------------------------------------------------------------------


@dataclass
class Run:
    cost: dict[str, int]  # per app, micros, from x-gateway-billing-cost headers
    ledger_cost: dict[str, int]  # per app, micros, the ledger's total
    input_cost: dict[str, int]  # per app, micros: input tokens at list price (cost without cache − output)
    errors: int
    advice: dict[str, Any]


def _micros(header: str) -> int:
    return int(Decimal(header) * 1_000_000)


async def run_stream(stream: list[tuple[str, Body]], names: list[str], workdir: Path, tag: str) -> Run:
    sim, urls = await asyncio.to_thread(
        start_sim,
        REPLICAS,
        extra=["--speed", "0", "--kv-capacity-blocks", "65536"],
        log_path=str(workdir / f"sim-{tag}.log"),
    )
    ledger_path = workdir / f"ledger-{tag}.db"
    cfg = workdir / f"gw-{tag}.yaml"
    cfg.write_text(yaml.safe_dump(policy_dict(urls, names, str(ledger_path), advisor=True)))
    gw: Proc | None = None
    cost = dict.fromkeys(names, 0)
    errors = 0
    advice: dict[str, Any] = {}
    try:
        gw = await asyncio.to_thread(
            start_gateway,
            ["--config", str(cfg)],
            env={"PREFIX_GATEWAY_SECRET": "advisor-apps", "PREFIX_GATEWAY_ADMIN_TOKEN": ADMIN_TOKEN},
            log_path=str(workdir / f"gw-{tag}.log"),
        )
        async with aiohttp.ClientSession() as session:
            for tenant, body in stream:
                async with session.post(
                    gw.url + "/v1/chat/completions",
                    json=body,
                    headers={"Authorization": f"Bearer {api_key(tenant)}"},
                    timeout=aiohttp.ClientTimeout(total=30),
                ) as r:
                    await r.read()
                    if r.status != 200:
                        errors += 1
                        continue
                    cost[tenant] += _micros(r.headers["x-gateway-billing-cost"])
            async with session.get(
                gw.url + "/admin/advice", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            ) as r:
                advice = await r.json(loads=orjson.loads)
    finally:
        if gw is not None:
            await asyncio.to_thread(gw.stop)
        await asyncio.to_thread(sim.stop)
    led = await SqliteLedger.open(str(ledger_path))
    try:
        rows = await led.query(group_by=("tenant",))
    finally:
        await led.close()
    ledger_cost = {r.tenant: r.cost_micros for r in rows if r.tenant}
    input_cost = {r.tenant: r.cost_without_cache_micros - r.micros.output for r in rows if r.tenant}
    return Run(cost, ledger_cost, input_cost, errors, advice)


def interleave(lays: list[App], n: int, variant: Callable[[App], str], seed: int) -> list[tuple[str, Body]]:
    """All apps' requests in one random order; each app's i-th request stays its i-th."""
    order = [lay for lay in lays for _ in range(n)]
    random.Random(seed).shuffle(order)
    counters = {lay.name: 0 for lay in lays}
    out = []
    for lay in order:
        i = counters[lay.name]
        counters[lay.name] += 1
        out.append((lay.name, lay.make(i, variant(lay))))
    return out


def findings_of(advice_doc: dict[str, Any], tenant: str) -> list[dict[str, Any]]:
    for t in advice_doc.get("advice", advice_doc).get("tenants", []):
        if t["tenant"] == tenant:
            return [f for m in t["models"] for f in m["findings"]]
    return []


def variant_for(findings: list[dict[str, Any]]) -> str:
    kinds = {f["kind"] for f in findings if f["saving"]["micros_per_request"] > 0}
    if not kinds:
        return "as_is"
    if kinds == {"explicit_would_pay"}:
        return "marked"
    return "fixed+marked" if "explicit_would_pay" in kinds else "fixed"


async def measure_seed(lays: list[App], n: int, seed: int, workdir: Path) -> list[dict[str, Any]]:
    names = [a.name for a in lays]
    before = await run_stream(interleave(lays, n, lambda a: "as_is", seed), names, workdir, f"b{seed}")
    found = {a.name: findings_of(before.advice, a.name) for a in lays}
    chosen = {a.name: variant_for(found[a.name]) for a in lays}
    after = await run_stream(interleave(lays, n, lambda a: chosen[a.name], seed), names, workdir, f"a{seed}")
    rows = []
    for a in lays:
        fs = found[a.name]
        est = sum(f["saving"]["micros_per_request"] for f in fs) * n
        measured = before.cost[a.name] - after.cost[a.name]
        input_cost = before.input_cost.get(a.name, 0)
        kinds = [f["kind"] for f in fs]
        if a.expect is None:
            kind_ok = all(
                f["saving"]["micros_per_request"] * n <= GOOD_LAYOUT_MAX_PCT / 100 * input_cost for f in fs
            )
        else:
            kind_ok = kinds[:1] == [a.expect] and kinds.count(a.expect) == 1
        ratio = est / measured if measured > 0 else None
        est_ok = (
            (ratio is not None and abs(ratio - 1) <= ESTIMATE_TOLERANCE)
            if chosen[a.name] != "as_is"
            else True
        )
        rows.append(
            {
                "seed": seed,
                "app": a.name,
                "held_out": a.held_out,
                "expect": a.expect,
                "kinds": kinds,
                "variant": chosen[a.name],
                "estimate_micros": round(est),
                "measured_micros": measured,
                "ratio": ratio,
                "input_cost_micros": input_cost,
                "ledger_matches_headers": before.ledger_cost.get(a.name) == before.cost[a.name]
                and after.ledger_cost.get(a.name) == after.cost[a.name],
                "raised_cost": measured < 0 and chosen[a.name] != "as_is",
                "kind_ok": kind_ok,
                "estimate_ok": est_ok,
                "errors": before.errors + after.errors,
            }
        )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = []
    for held in (False, True):
        lines.append(f"\n{'held-out' if held else 'tuning'} apps")
        lines.append(
            f"  {'app':28s} {'seed':>4s} {'expect':18s} {'findings':34s} {'estimate µ$':>11s} "
            f"{'measured µ$':>11s} {'est/meas':>8s}  ok"
        )
        for r in rows:
            if r["held_out"] != held:
                continue
            ratio = "-" if r["ratio"] is None else f"{r['ratio']:.3f}"
            ok = r["kind_ok"] and r["estimate_ok"] and not r["raised_cost"] and r["ledger_matches_headers"]
            lines.append(
                f"  {r['app']:28s} {r['seed']:4d} {r['expect']!s:18s} {','.join(r['kinds']) or '-':34s} "
                f"{r['estimate_micros']:11d} {r['measured_micros']:11d} {ratio:>8s}  {'ok' if ok else 'FAIL'}"
            )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="advisor-apps-") as d:
        for seed in args.seeds:
            lays = apps(seed)
            if args.apps:
                lays = [a for a in lays if a.name in args.apps.split(",")]
            rows += await measure_seed(lays, args.requests, seed, Path(d))
    print(table(rows))
    ok = all(
        r["kind_ok"] and r["estimate_ok"] and not r["raised_cost"] and r["ledger_matches_headers"]
        for r in rows
    )
    if args.json:
        Path(args.json).write_text(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
    print("\nresult:", "all checks passed" if ok else "CHECKS FAILED")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=150, help="requests per app (each replay)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--apps", help="comma-separated app names (default: all)")
    ap.add_argument("--json", help="write the rows to this file")
    sys.exit(asyncio.run(main_async(ap.parse_args(argv))))


if __name__ == "__main__":
    main()
