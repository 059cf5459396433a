"""The token ids a vLLM replica will see for a request, and their engine block hashes (precise mode).

Chat: the model's chat template (``router.chat_template``), then the model's ``tokenizer.json`` without
added special tokens (vLLM's chat path). Completions: the prompt string tokenized with special tokens
added (vLLM's completions default), or the token ids as given. Anything else (batched prompts, media
parts, a template that fails) gives ``None``: the router then relies on its approximate index alone.
Files are read once, when it is constructed (a missing one fails at start); the rest is pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from router.chat_template import ChatTemplate
from router.tokenizers import load_hf_tokenizer, prefix_ids
from router.vllm_hash import block_hashes


class EnginePrompt:
    def __init__(
        self,
        tokenizer_path: str | Path,
        template_path: str | Path | None,
        block_size: int,
        *,
        hash_seed: str | None = None,
        max_tokens: int = 4096,
    ) -> None:
        self.tokenizer_path = Path(tokenizer_path)
        self.template_path = (
            Path(template_path) if template_path else self.tokenizer_path.with_name("tokenizer_config.json")
        )
        self.block_size = block_size
        self.hash_seed = hash_seed
        self.max_tokens = max_tokens
        self.max_blocks = max(1, max_tokens // block_size)
        self._tok: Any = load_hf_tokenizer(self.tokenizer_path)
        self._template = ChatTemplate.from_tokenizer_config(self.template_path)

    def token_ids(self, endpoint: str, body: Mapping[str, Any]) -> list[int] | None:
        """The engine's token ids of the request (its first ``max_tokens`` of a longer one)."""
        found = self.ids_and_count(endpoint, body)
        return found[0] if found is not None else None

    def ids_and_count(self, endpoint: str, body: Mapping[str, Any]) -> tuple[list[int], int] | None:
        """The engine's token ids (the first ``max_tokens`` of a longer prompt, which is tokenized only
        that far: ``router.tokenizers.prefix_ids``) and the prompt's token count."""
        tok, template = self._tok, self._template
        if endpoint == "chat":
            messages = body.get("messages")
            if not isinstance(messages, list):
                return None
            text = template.render(messages, body.get("tools"))
            if text is None:
                return None
            return prefix_ids(lambda t: tok.encode(t, add_special_tokens=False).ids, (text,), self.max_tokens)
        if endpoint == "completions":
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1:
                prompt = prompt[0]
            if isinstance(prompt, str):
                return prefix_ids(
                    lambda t: tok.encode(t, add_special_tokens=True).ids, (prompt,), self.max_tokens
                )
            if isinstance(prompt, list) and prompt and all(type(t) is int for t in prompt):
                return prompt, len(prompt)
        return None

    def hashes(self, endpoint: str, body: Mapping[str, Any], salt: str) -> tuple[int, ...]:
        """Event-form hashes of the request's full blocks (empty when not reproducible)."""
        ids = self.token_ids(endpoint, body)
        return self.hashes_of(ids, salt) if ids else ()

    def hashes_of(self, ids: list[int], salt: str) -> tuple[int, ...]:
        return block_hashes(
            ids, self.block_size, salt=salt or None, seed=self.hash_seed, max_blocks=self.max_blocks
        )
