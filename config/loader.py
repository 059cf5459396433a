"""Load a YAML policy: expand ``${ENV}`` references, validate, and explain errors precisely.

An error names the file, the path inside it (``models[0].replicas[2].url``) and what was expected, so an
operator can fix a policy without reading our source.

Files a policy names (a tokenizer, a chat template, the SQLite ledger) are resolved against the
policy file's own directory when relative (``base_dir``), so every command that reads one policy
(``serve``, ``usage``, ``check-config``), from whatever working directory, means the same files.
The keys file (``tenancy.keys_file``) is read here too, its digests merged into the tenants, so every
load of the policy (a reload included) reads the keys as they are now.
A policy from elsewhere (an upload to ``POST /admin/reload``) expands only the environment variables
its caller passes (``env``): the file policy's ``admin.upload_env``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

from config.keys import KeysFileError, merge_keys, read_keys
from config.policy import Policy

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class PolicyError(Exception):
    """A policy that cannot be used; ``problems`` lists (path, message) pairs."""

    def __init__(self, source: str, problems: list[tuple[str, str]]):
        self.source = source
        self.problems = problems
        super().__init__(self.render())

    def render(self) -> str:
        lines = [f"{self.source}: invalid policy ({len(self.problems)} problem(s))"]
        lines += [f"  {path or '<root>'}: {msg}" for path, msg in self.problems]
        return "\n".join(lines)


def expand_env(
    value: Any, env: Mapping[str, str], source: str, path: str = "", unset: str = "is not set"
) -> Any:
    """Replace ``${NAME}`` and ``${NAME:-default}`` in every string of a parsed YAML tree; a name not
    in ``env`` takes its default, else is an error (``unset`` says why it is missing)."""
    if isinstance(value, str):

        def sub(m: re.Match[str]) -> str:
            name, default = m.group(1), m.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise PolicyError(
                source, [(path, f"environment variable {name} {unset} (referenced as ${{{name}}})")]
            )

        return _ENV_REF.sub(sub, value)
    if isinstance(value, dict):
        return {k: expand_env(v, env, source, _join(path, k), unset) for k, v in value.items()}
    if isinstance(value, list):
        return [expand_env(v, env, source, f"{path}[{i}]", unset) for i, v in enumerate(value)]
    return value


def _resolved(path: str | None, base_dir: Path) -> str | None:
    if path is None or path == ":memory:" or Path(path).is_absolute():
        return path
    return str(base_dir / path)


def resolve_paths(policy: Policy, base_dir: str | os.PathLike[str]) -> Policy:
    """The policy with its relative file paths (tokenizer, chat template, SQLite ledger, the batch
    files and job store) made absolute against ``base_dir``."""
    base = Path(base_dir).absolute()
    models = []
    for m in policy.models:
        r = m.routing
        tokenizer = r.tokenizer.model_copy(update={"path": _resolved(r.tokenizer.path, base)})
        routing = r.model_copy(
            update={"tokenizer": tokenizer, "chat_template": _resolved(r.chat_template, base)}
        )
        models.append(m.model_copy(update={"routing": routing}))
    ledger = policy.billing.ledger.model_copy(update={"path": _resolved(policy.billing.ledger.path, base)})
    billing = policy.billing.model_copy(update={"ledger": ledger})
    b = policy.batch
    batch = b.model_copy(
        update={"dir": _resolved(b.dir, base), "sqlite_path": _resolved(b.sqlite_path, base)}
    )
    tenancy = policy.tenancy.model_copy(update={"keys_file": _resolved(policy.tenancy.keys_file, base)})
    return policy.model_copy(
        update={"models": models, "billing": billing, "batch": batch, "tenancy": tenancy}
    )


def with_keys_file(policy: Policy, source: str) -> Policy:
    """The policy with the digests of ``tenancy.keys_file`` merged into its tenants (``config.keys``)."""
    path = policy.tenancy.keys_file
    if path is None:
        return policy
    try:
        tenancy = merge_keys(policy.tenancy, read_keys(path))
    except KeysFileError as exc:
        raise PolicyError(source, [("tenancy.keys_file", str(exc))]) from None
    return policy.model_copy(update={"tenancy": tenancy})


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _loc_to_path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = _join(out, part)
    return out


def _explain(err: ErrorDetails) -> str:
    msg = err["msg"]
    if err["type"] == "extra_forbidden":
        return "unknown field (check the spelling; see docs/configuration.md)"
    if err["type"] == "missing":
        return "required field is missing"
    inp = err.get("input")
    if inp is not None and not isinstance(inp, dict | list):
        shown = repr(inp)
        if len(shown) > 60:
            shown = shown[:57] + "..."
        return f"{msg} (got {shown})"
    return msg


def parse_policy(
    text: str,
    source: str = "<policy>",
    env: Mapping[str, str] | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
    unset: str = "is not set",
    keys: bool = True,
) -> Policy:
    """Parse policy YAML text into a validated ``Policy``; raise ``PolicyError`` otherwise.

    ``env``: the variables ``${...}`` may name (default: the process environment; ``unset`` explains a
    name that is not there). ``base_dir``: what relative file paths are relative to (default: as given,
    i.e. the working directory). ``keys``: merge the keys file (``prefix-gateway keys`` reads the policy
    without it, to edit the file)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise PolicyError(source, [(where, f"not valid YAML: {getattr(exc, 'problem', exc)}")]) from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise PolicyError(source, [("", f"expected a mapping at the top level, got {type(raw).__name__}")])
    raw = expand_env(raw, os.environ if env is None else env, source, unset=unset)
    try:
        policy = Policy.model_validate(raw)
    except ValidationError as exc:
        problems = [(_loc_to_path(e["loc"]), _explain(e)) for e in exc.errors()]
        raise PolicyError(source, problems) from None
    policy = policy if base_dir is None else resolve_paths(policy, base_dir)
    return with_keys_file(policy, source) if keys else policy


def load_policy(
    path: str | os.PathLike[str], env: Mapping[str, str] | None = None, *, keys: bool = True
) -> Policy:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise PolicyError(str(p), [("", f"cannot read file: {exc.strerror or exc}")]) from None
    except UnicodeDecodeError:
        raise PolicyError(str(p), [("", "file is not UTF-8 text")]) from None
    return parse_policy(text, str(p), env, base_dir=p.absolute().parent, keys=keys)


EXAMPLES_DIR = Path(__file__).parent / "examples"


def example_path(name: str) -> Path:
    """Path of a shipped example policy, e.g. ``example_path("local")``."""
    return EXAMPLES_DIR / f"{name}.yaml"
