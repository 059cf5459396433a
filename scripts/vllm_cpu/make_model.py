"""Make the tiny Llama model the real-vLLM tests serve: nothing is downloaded.

A byte-level BPE tokenizer (vocab 4096) trained with ``tokenizers`` on local text (this Python's own
standard library sources, a fixed sorted list, so the result is reproducible), a simple chat template
in ``tokenizer_config.json`` and a ``LlamaForCausalLM`` config (2 layers, hidden 128, 4 heads, 4096
positions). vLLM serves it with ``--load-format dummy``: the weights are random, which is all that
prefix caching, routing and usage accounting need.

Usage: ``python scripts/vllm_cpu/make_model.py OUT_DIR`` (does nothing if OUT_DIR already holds it).
"""

from __future__ import annotations

import argparse
import json
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

VOCAB_SIZE = 4096
SPECIAL = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
# One line per message, then the generation prompt. Rendered by vLLM with jinja2 (trim_blocks,
# lstrip_blocks) and by the gateway's precise mode with the same settings (router.chat_template).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MARKER = "config.json"


def corpus(limit_bytes: int = 12_000_000) -> Iterator[str]:
    """Local text: the standard library's .py files in sorted order, up to ``limit_bytes``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    used = 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "test" in path.parts:
            continue
        try:
            text = path.read_text("utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        used += len(text)
        yield text
        if used >= limit_bytes:
            return


def train_tokenizer(out: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    tok.save(str(out / "tokenizer.json"))


def write_configs(out: Path, vocab: int) -> None:
    ids = {s: i for i, s in enumerate(SPECIAL)}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "bos_token": "<|bos|>",
        "eos_token": "<|eos|>",
        "pad_token": "<|pad|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": 128,
        "intermediate_size": 256,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "hidden_act": "silu",
        "tie_word_embeddings": False,
        "torch_dtype": "float32",
        "bos_token_id": ids["<|bos|>"],
        "eos_token_id": ids["<|eos|>"],
        "pad_token_id": ids["<|pad|>"],
    }
    generation_config = {"bos_token_id": ids["<|bos|>"], "eos_token_id": ids["<|eos|>"]}
    special_map = {"bos_token": "<|bos|>", "eos_token": "<|eos|>", "pad_token": "<|pad|>"}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=2))
    (out / "special_tokens_map.json").write_text(json.dumps(special_map, indent=2))
    (out / "generation_config.json").write_text(json.dumps(generation_config, indent=2))
    (out / MARKER).write_text(json.dumps(config, indent=2))  # last: its presence means "done"


def make_model(out: Path, force: bool = False) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    if (out / MARKER).is_file() and not force:
        return out
    train_tokenizer(out)
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(str(out / "tokenizer.json")).get_vocab_size()
    write_configs(out, vocab)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--force", action="store_true")
    args = ap.parse_args(argv)
    path = make_model(args.out, args.force)
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
