"""Every file a policy names, resolved and loaded before a gateway serves with it.

A policy can validate and still name a ``tokenizer.json`` that does not exist: before this check such a
policy passed ``check-config``, ``serve`` started, ``/ready`` said 200 and every chat request answered
500. Now ``check-config``, ``serve`` (before it listens) and every reload load what the policy names
(the tokenizer of each ``hf`` pool, the chat template of each precise pool) and check the SQLite
ledger, and a failure is a ``PolicyError`` naming the policy file, the path inside it and the file.

Paths are the policy's own, already made absolute against the policy file's directory by
``config.loader.load_policy``.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from config.loader import PolicyError
from config.policy import Policy
from router.chat_template import ChatTemplate
from router.tokenizers import load_hf_tokenizer

Problem = tuple[str, str]  # (path in the policy, message)


def model_file_problems(policy: Policy) -> list[Problem]:
    """Load each pool's tokenizer and chat template once; what failed, by policy path."""
    problems: list[Problem] = []
    for i, m in enumerate(policy.models):
        routing, where = m.routing, f"models[{i}].routing"
        tokenizer = routing.tokenizer
        if tokenizer.kind == "hf" and tokenizer.path is not None:
            try:
                load_hf_tokenizer(tokenizer.path)
            except (OSError, ValueError, RuntimeError) as exc:
                problems.append((f"{where}.tokenizer.path", str(exc)))
                continue
        if routing.index == "precise" and tokenizer.path is not None:
            template = routing.chat_template or str(Path(tokenizer.path).with_name("tokenizer_config.json"))
            try:
                ChatTemplate.from_tokenizer_config(template)
            except (OSError, ValueError, ImportError) as exc:
                problems.append((f"{where}.chat_template", str(exc)))
    return problems


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def ledger_problems(policy: Policy, *, create: bool) -> tuple[list[Problem], list[Problem]]:
    """(problems, warnings) of the SQLite ledger file. ``create`` (at start): make its directory and
    open it, as the gateway is about to; else (``check-config``) touch nothing: an existing file must
    open read-only as a database, a missing one gets a warning when its directory cannot be made here
    (the policy may be meant for another machine, e.g. a pod)."""
    ledger = policy.billing.ledger
    if not policy.billing.enabled or ledger.kind != "sqlite" or ledger.path == ":memory:":
        return [], []
    path, where = Path(ledger.path), "billing.ledger.path"
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            con = sqlite3.connect(path)
        elif path.exists():
            con = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        else:
            base = _nearest_existing(path.parent)
            if not (base.is_dir() and os.access(base, os.W_OK | os.X_OK)):
                return [], [(where, f"{path} does not exist and {base} is not a writable directory here")]
            return [], []
        try:
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            con.close()
    except (OSError, sqlite3.Error) as exc:
        return [(where, f"cannot open the SQLite ledger {path}: {exc}")], []
    return [], []


def check_files(policy: Policy, source: str, *, create: bool) -> list[Problem]:
    """Raise ``PolicyError`` (naming ``source``) for any file the policy names that cannot be used;
    return the warnings."""
    ledger, warnings = ledger_problems(policy, create=create)
    problems = model_file_problems(policy) + ledger
    if problems:
        raise PolicyError(source, problems)
    return warnings
