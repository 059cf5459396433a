"""The semantic cache at the command line: what ``check-config`` checks, and ``semantic explain``.

``check-config`` compiles every semantic section the way a started gateway does (``SemanticRoute``:
an intent term claimed by two intents only shows there), names each dangerous filler
(``cache.semantic.vocab``: a word that can change the answer, which the route never ignores) and
checks the synonym table (``vocab.synonym_problems``: a term that is a slot's value or another intent's
own wording is an error, one that hides a value a warning).

    prefix-gateway semantic explain --config FILE [--model NAME] [--guarded] "question" ["question" ...]

prints each question's fingerprint (intent, slots, constraints, what was ignored, the typos corrected,
the synonyms that fired and where each comes from: the policy, the inflection rule or the built-in
lexicon, what was left unexplained) and, for two or more, whether each would share the first one's answer and
why: a policy can be tested before it serves. In embedding mode, or with ``--guarded`` for a policy in
fingerprint mode (its rules in guarded embedding mode, default guards), each pair also gets the
guards' verdict: served whatever the similarity (equal fingerprints), served at or above the threshold
(the compatible rule), or the guard that refuses it (``cache.semantic.guards.veto``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

from cache.semantic.fingerprint import residual_words
from cache.semantic.guards import GuardFeatures, veto
from cache.semantic.normalize import base_normalize
from cache.semantic.route import SemanticRoute
from cache.semantic.vocab import dangerous_fillers, synonym_problems
from config import PolicyError, load_policy
from config.policy import Policy
from config.semantic import EmbeddingConfig, SemanticConfig

_SECRET = b"explain"  # tags are never printed; any secret compiles the same rules


def semantic_sections(policy: Policy) -> Iterator[tuple[str, str | None, SemanticConfig]]:
    """(path in the policy, model or None for the section, config) of every semantic section."""
    yield "cache.semantic", None, policy.cache.semantic
    for i, o in enumerate(policy.cache.overrides):
        if o.semantic is not None:
            yield f"cache.overrides[{i}].semantic", o.model, o.semantic


def semantic_problems(policy: Policy) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(errors, warnings) of the policy's semantic sections, each a (path, message) pair."""
    errors: list[tuple[str, str]] = []
    warnings: list[tuple[str, str]] = []
    for path, _, cfg in semantic_sections(policy):
        if cfg.mode == "off":
            continue
        try:
            SemanticRoute(cfg, _SECRET)
        except ValueError as exc:
            errors.append((path, f"does not compile as a started gateway would: {exc}"))
        for sp in synonym_problems(cfg):
            term = cfg.synonyms[sp.group].terms[sp.term]
            (errors if sp.error else warnings).append(
                (f"{path}.synonyms[{sp.group}].terms[{sp.term}]", f"{term!r} {sp.message}")
            )
        for d in dangerous_fillers(cfg):
            warnings.append(
                (
                    f"{path}.fillers[{d.index}]",
                    f"{d.filler!r} can change the answer ({d.why}); it is never ignored, so listing it "
                    "as a filler does nothing: remove it",
                )
            )
    return errors, warnings


def _guarded(cfg: SemanticConfig) -> SemanticConfig:
    """A fingerprint-mode section's rules in guarded embedding mode (default guards, threshold 0.9)."""
    if cfg.embedding is not None:
        return cfg.model_copy(update={"mode": "embedding"})
    emb = EmbeddingConfig(url="http://127.0.0.1:1", model="explain")  # never called: no similarity here
    return cfg.model_copy(update={"mode": "embedding", "embedding": emb})


def _route(policy: Policy, model: str | None, guarded: bool = False) -> SemanticRoute:
    for _, m, cfg in semantic_sections(policy):
        if m == model and cfg.mode != "off":
            return SemanticRoute(_guarded(cfg) if guarded else cfg, _SECRET)
    if model is not None:
        return _route(policy, None, guarded)
    raise SystemExit("the policy has no semantic section with a mode other than off")


def explain(route: SemanticRoute, question: str) -> dict[str, Any]:
    body = {"model": "m", "messages": [{"role": "user", "content": question}]}
    a = route.analyse("chat", body)
    fp = a.fingerprint
    out: dict[str, Any] = {"question": question, "normalised": a.text, "admission": a.decision.reason}
    if fp is None:
        return out
    text = a.text
    ignored = [text[m.start : m.end] for m in route.fillers.find(text)]
    spans = [(f.start, f.end) for e in (*route.slots, *route.constraints) for f in e.extract(text)]
    spans += [(m.start, m.end) for m in route.intents.matcher.find(text)]
    spans += [(m.start, m.end) for m in route.fillers.find(text)]
    typos = route.normalize.typos
    rest = residual_words(text, spans)
    by_words = fp.complete and fp.rule == "words"  # every left-over word is one of the intent's own words
    out |= {
        "corrected": [f"{t} -> {w}" for t, w in typos.corrections(base_normalize(question))] if typos else [],
        "synonyms": [f"{t} -> {c} ({src})" for t, c, src in route.normalize.fired(question)],
        "intent": fp.intent,
        "intent_by": ("its own words in any order: " + " ".join(rest)) if by_words else "a phrase",
        "slots": dict(fp.slots) if fp.complete else dict(fp.found),
        "constraints": dict(fp.constraints),
        "lang": fp.lang,
        "ignored": ignored,
        "unexplained": [] if by_words else rest,
        "complete": fp.complete,
        "missing": fp.missing,
        "cacheable": a.decision.allowed and fp.complete,
    }
    if a.guards is not None:
        out["guards"] = {"numbers": list(a.guards.numbers), "negations": list(a.guards.negations),
                         "entities": list(a.guards.entities)}  # fmt: skip
    return out


def guarded_verdict(route: SemanticRoute, first: str, other: str) -> str | None:
    """What guarded embedding mode would do with ``other`` when ``first`` is cached (None: not that mode)."""
    emb = route.cfg.embedding
    ga, gb = (
        route.analyse("chat", {"model": "m", "messages": [{"role": "user", "content": q}]})
        for q in (first, other)
    )
    if emb is None or ga.guards is None or gb.guards is None:
        return None
    if not ga.decision.allowed or not gb.decision.allowed:
        return "no shared answer (admission: " + ", ".join(
            f"{q!r}: {x.decision.reason}" for q, x in ((first, ga), (other, gb)) if not x.decision.allowed
        ) + ")"  # fmt: skip
    why = veto(gb.guards, ga.guards, emb.guards)
    if why is not None:
        return f"refused by the {why!r} guard"
    return _served(ga.guards, gb.guards, emb.threshold)


def _served(a: GuardFeatures, b: GuardFeatures, threshold: float) -> str:
    if a.meaning is not None and a.meaning == b.meaning:
        return "SHARES the answer whatever the similarity (equal fingerprints)"
    return (
        f"SHARES the answer if the similarity is >= {threshold} (compatible rule: only harmless words differ)"
    )


def _verdict(first: dict[str, Any], other: dict[str, Any]) -> str:
    if not first.get("cacheable") or not other.get("cacheable"):
        why = [
            f"{q['question']!r}: {q.get('missing') or q['admission']}"
            for q in (first, other)
            if not q.get("cacheable")
        ]
        return "no shared answer (no key: " + "; ".join(why) + ")"
    keys = ("intent", "slots", "constraints", "lang")
    diff = [k for k in keys if first[k] != other[k]]
    return (
        "SHARES the answer (equal fingerprints)"
        if not diff
        else f"no shared answer (differ in {', '.join(diff)})"
    )


def cmd_semantic_explain(args: Any) -> int:
    try:
        policy = load_policy(args.config)
    except PolicyError as err:
        print(err.render(), file=sys.stderr)
        return 1
    route = _route(policy, args.model, args.guarded)
    results = [explain(route, q) for q in args.questions]
    for i, r in enumerate(results):
        print(f"[{i}] {r['question']!r}")
        for k, v in r.items():
            if k != "question":
                print(f"    {k}: {v}")
        if i:
            print(f"    vs [0]: {_verdict(results[0], r)}")
            guarded = guarded_verdict(route, args.questions[0], r["question"])
            if guarded is not None:
                print(f"    vs [0], guarded: {guarded}")
    return 0


def add_semantic_command(sub: Any) -> None:
    p = sub.add_parser("semantic", help="test a semantic-cache policy before it serves")
    s = p.add_subparsers(dest="semantic_command", required=True)
    e = s.add_parser("explain", help="each question's fingerprint, and whether questions share an answer")
    e.add_argument("--config", required=True, help="the policy file")
    e.add_argument("--model", help="a model with its own semantic override (default: the section)")
    e.add_argument(
        "--guarded", action="store_true", help="also the guarded embedding mode's verdict (default guards)"
    )
    e.add_argument("questions", nargs="+")
    e.set_defaults(func=cmd_semantic_explain)
