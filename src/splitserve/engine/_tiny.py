"""A tiny llama model with real (seeded random) weights, for the engine's smoke test.

The smoke test must run on any machine, hub or not, so its model is written here with the
``gguf`` library: two layers, 256 wide, the matrices in Q4_0 (the type llama.cpp's CPU
backend repacks and, on CPUs with AMX, hands to its AMX kernels: the paths that crash when a
CPU variant cannot run on the machine), about 1.5 MB. The weights are seeded, so every node
computes the same greedy token from the same prompt; a node that does not is computing wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFWriter, quants

from .._paths import cache_dir

VERSION = 1
N_VOCAB, N_EMBD, N_FF, N_LAYER, N_HEAD = 512, 256, 512, 2, 4


def tiny_model_path() -> Path:
    return cache_dir() / "smoke" / f"tiny-llama-q4_0-v{VERSION}.gguf"


def _vocab(w: GGUFWriter) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    words = [chr(c) for c in range(ord("a"), ord("z") + 1)] + [" ", ".", ","]
    tokens += ["\u2581" + w for w in words]
    tokens += [f"\u2581w{i}" for i in range(N_VOCAB - len(tokens))]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i) for i in range(N_VOCAB - 259)])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (N_VOCAB - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)


def write_tiny_model(path: Path) -> Path:
    """Write the model to ``path`` (atomically) and return it."""
    rng = np.random.default_rng(20261203)
    w = GGUFWriter(str(path) + ".tmp", "llama")
    w.add_name("splitserve-smoke")
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(2)  # mostly Q4_0
    _vocab(w)

    def mat(name: str, rows: int, cols: int) -> None:
        # numpy shape (rows, cols) is GGML's (ne0=cols, ne1=rows)
        data = (rng.standard_normal((rows, cols)) / np.sqrt(cols)).astype(np.float32)
        w.add_tensor(name, quants.quantize(data, GGMLQuantizationType.Q4_0), raw_dtype=GGMLQuantizationType.Q4_0)

    w.add_tensor("token_embd.weight", rng.standard_normal((N_VOCAB, N_EMBD)).astype(np.float32))
    for i in range(N_LAYER):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        for part in ("q", "k", "v", "output"):
            mat(f"blk.{i}.attn_{part}.weight", N_EMBD, N_EMBD)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        mat(f"blk.{i}.ffn_gate.weight", N_FF, N_EMBD)
        mat(f"blk.{i}.ffn_up.weight", N_FF, N_EMBD)
        mat(f"blk.{i}.ffn_down.weight", N_EMBD, N_FF)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    mat("output.weight", N_VOCAB, N_EMBD)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(str(path) + ".tmp", path)
    return path


def tiny_model() -> Path:
    """The smoke-test model, written on first use into the cache."""
    path = tiny_model_path()
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_tiny_model(path)
    return path
