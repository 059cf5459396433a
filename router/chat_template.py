"""The model's own chat template, rendered as the serving engine renders it, for exact token ids.

Precise routing must hash the very tokens the engine hashes, so a chat request is rendered with the
Jinja template from the model's ``tokenizer_config.json`` in the environment ``transformers`` uses
(sandboxed, ``trim_blocks``, ``lstrip_blocks``, ``add_generation_prompt=True``, the special tokens as
variables), then tokenized without adding special tokens (vLLM's chat path). Content given as a list of
text parts is joined with newlines, as vLLM does for a string-content template; a request with any other
part (image, audio, file) cannot be reproduced here and renders as ``None`` (the router then falls back
to its approximate index). Pure: the file is read once, at construction.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


class ChatTemplate:
    def __init__(self, template: str, special: Mapping[str, str] | None = None) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
        env.globals["raise_exception"] = _raise
        self._template = env.from_string(template)
        self._special = dict(special or {})

    @classmethod
    def from_tokenizer_config(cls, path: str | Path) -> ChatTemplate:
        """The template of a ``tokenizer_config.json``; ``FileNotFoundError`` / ``ValueError`` naming the
        file when it is missing, not JSON, has no template or one that does not compile."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"chat template file not found: {path}")
        try:
            cfg = json.loads(path.read_text("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path} is not a JSON tokenizer_config: {exc}") from None
        template = cfg.get("chat_template") if isinstance(cfg, dict) else None
        if isinstance(template, list):  # named templates: the default one
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        if not isinstance(template, str):
            raise ValueError(f"{path}: no chat_template")
        special = {k: _token_text(cfg.get(k)) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
        try:
            return cls(template, {k: v for k, v in special.items() if v is not None})
        except ImportError:
            raise
        except Exception as exc:  # jinja2's TemplateSyntaxError and kin
            raise ValueError(f"{path}: the chat template does not compile: {exc}") from None

    def render(self, messages: Sequence[Any], tools: Any = None) -> str | None:
        """The prompt text the engine builds for these messages, or None when it cannot be reproduced."""
        msgs = []
        for m in messages:
            if not isinstance(m, Mapping):
                return None
            content = m.get("content")
            if isinstance(content, list):
                texts = []
                for part in content:
                    if isinstance(part, str):
                        texts.append(part)
                    elif isinstance(part, Mapping) and part.get("type") == "text":
                        texts.append(str(part.get("text", "")))
                    else:
                        return None
                content = "\n".join(texts)
            msgs.append({**m, "content": content})
        try:
            return self._template.render(
                messages=msgs, tools=tools or None, add_generation_prompt=True, **self._special
            )
        except Exception:  # a template error on odd input: no precise hashes for this request
            return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def _raise(message: str) -> None:
    raise ValueError(message)
