"""A tiny random-weight Llama with its own tokenizer, made offline, for an engine smoke test.

    python3 benchmarks/make_tiny_llama.py OUT_DIR [--layers 4] [--hidden 256] [--vocab 1024]

The tokenizer is a byte-level BPE trained on the repository's own docs (``tokenizers``), with
ChatML special tokens and a ChatML ``chat_template`` in ``tokenizer_config.json``. The model
(``transformers`` + ``torch``, bfloat16 safetensors) has ``vocab_size`` equal to the tokenizer's
size. With ``--tokenizer-only`` no torch is needed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def corpus(root: Path) -> list[str]:
    lines: list[str] = []
    for path in sorted([*root.glob("docs/*.md"), root / "README.md"]):
        if path.is_file():
            lines += [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    return lines or ["the quick brown fox jumps over the lazy dog"] * 10


def make_tokenizer(out: Path, vocab: int, root: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(root), trainer=trainer)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": True,
            }
            for t in SPECIALS
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(
        json.dumps({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, indent=2)
    )
    return tok.get_vocab_size()


def make_model(out: Path, vocab: int, layers: int, hidden: int, eos: int, pad: int) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=max(1, hidden // 64),
        num_key_value_heads=max(1, hidden // 128),
        head_dim=64,
        max_position_embeddings=4096,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    GenerationConfig(eos_token_id=eos, pad_token_id=pad).save_pretrained(str(out))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--tokenizer-only", action="store_true")
    a = ap.parse_args()
    root = Path(__file__).resolve().parent.parent
    n = make_tokenizer(a.out, a.vocab, root)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(a.out / "tokenizer.json"))
    eos, pad = tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")
    print(f"tokenizer: {n} tokens, eos {eos}, pad {pad}")
    if not a.tokenizer_only:
        make_model(a.out, n, a.layers, a.hidden, eos, pad)
        print(f"model: {a.layers} layers, hidden {a.hidden}, vocab {n} -> {a.out}")


if __name__ == "__main__":
    main()
