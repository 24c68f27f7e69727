"""Synthetic GGUF files for tests: dense, MoE, mixed quantisation, and header-true sparse stand-ins.

Every file is *header-true*: its metadata and tensor table are what a real model of that shape
would have.  The data section is never written, only sized with ``truncate``, so it reads as zeros
(a valid bit pattern for every GGML type) and a 400 GB stand-in takes a few MB of disk.  Small
models built this way load in llama.cpp like any other GGUF.

    write_model(path, arch, kv, tensors, n_vocab=..., n_shards=1) -> list[Path]
    dense_llama(path, ...), moe_qwen3(path, ...), mixed_quant_llama(path, ...)
    minimax_m3_like(folder, n_shards=6, ...)   # 60 layers, 128 experts, ~194 GiB
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFWriter

Q = GGMLQuantizationType
ALIGN = 32


@dataclass(frozen=True)
class T:
    """One tensor: GGUF name, shape in GGML order (ne0 first) and type."""

    name: str
    ne: tuple[int, ...]
    qtype: GGMLQuantizationType = Q.F32


def nbytes(ne: Sequence[int], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    assert ne[0] % block == 0, f"ne0={ne[0]} is not a multiple of {qtype.name} block {block}"
    rows = 1
    for n in ne[1:]:
        rows *= n
    return ne[0] // block * size * rows


def _pad(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _vocab(writer: GGUFWriter, n_vocab: int) -> None:
    """A SentencePiece-style vocabulary llama.cpp accepts: specials, 256 byte tokens, fillers."""
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    tokens += [f"\u2581t{i}" for i in range(n_vocab - len(tokens))]
    types = [2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens[:n_vocab])
    writer.add_token_scores([0.0] * 3 + [0.0] * 256 + [-float(i) for i in range(n_vocab - 259)])
    writer.add_token_types(types[:n_vocab])
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)


def shard_names(path: Path, n_shards: int) -> list[Path]:
    if n_shards == 1:
        return [path]
    stem = path.name.removesuffix(".gguf")
    return [path.with_name(f"{stem}-{i + 1:05d}-of-{n_shards:05d}.gguf") for i in range(n_shards)]


def write_model(
    path: Path,
    arch: str,
    kv: dict[str, Any],
    tensors: list[T],
    *,
    n_vocab: int,
    n_shards: int = 1,
    chat_template: str | None = None,
    name: str = "synthetic",
) -> list[Path]:
    """Write a header-true GGUF (split into ``n_shards`` files the llama.cpp way); returns the files."""
    path = Path(path)
    paths = shard_names(path, n_shards)
    per: list[list[T]] = [[] for _ in range(n_shards)]
    # contiguous, roughly equal-byte shards (first shard also holds the metadata)
    total = sum(nbytes(t.ne, t.qtype) for t in tensors)
    acc, shard = 0, 0
    for t in tensors:
        size = nbytes(t.ne, t.qtype)
        if shard < n_shards - 1 and acc > 0 and acc + size / 2 > total * (shard + 1) / n_shards:
            shard += 1
        per[shard].append(t)
        acc += size
    for i, (p, ts) in enumerate(zip(paths, per)):
        w = GGUFWriter(p, arch)
        if i == 0:
            w.add_name(name)
            w.add_file_type(1)
            for key, value in kv.items():
                _add(w, key.format(arch=arch), value)
            _vocab(w, n_vocab)
            if chat_template is not None:
                w.add_chat_template(chat_template)
        if n_shards > 1:
            w.add_uint16("split.no", i)
            w.add_uint16("split.count", n_shards)
            w.add_int32("split.tensors.count", len(tensors))
        for t in ts:
            w.add_tensor_info(
                t.name, tuple(reversed(t.ne)), np.dtype(np.float32), nbytes(t.ne, t.qtype), raw_dtype=t.qtype
            )
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        assert w.fout is not None
        f = w.fout[0]
        f.flush()
        start = _pad(f.tell())
        size = sum(_pad(nbytes(t.ne, t.qtype)) for t in ts)
        f.truncate(start + size)
        w.close()
    return paths


def _add(w: GGUFWriter, key: str, value: Any) -> None:
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, (list, tuple)):
        w.add_array(key, list(value))
    else:  # pragma: no cover - factory misuse
        raise TypeError(f"{key}: {type(value)}")


# ---- shapes -------------------------------------------------------------------------------------


def _attn(i: int, n_embd: int, n_head: int, n_head_kv: int, d: int, qt: Q, norms: bool = False) -> list[T]:
    ts = [
        T(f"blk.{i}.attn_norm.weight", (n_embd,)),
        T(f"blk.{i}.attn_q.weight", (n_embd, n_head * d), qt),
        T(f"blk.{i}.attn_k.weight", (n_embd, n_head_kv * d), qt),
        T(f"blk.{i}.attn_v.weight", (n_embd, n_head_kv * d), qt),
        T(f"blk.{i}.attn_output.weight", (n_head * d, n_embd), qt),
    ]
    if norms:
        ts += [T(f"blk.{i}.attn_q_norm.weight", (d,)), T(f"blk.{i}.attn_k_norm.weight", (d,))]
    return ts


def _ffn(i: int, n_embd: int, n_ff: int, gate_up: Q, down: Q) -> list[T]:
    return [
        T(f"blk.{i}.ffn_norm.weight", (n_embd,)),
        T(f"blk.{i}.ffn_gate.weight", (n_embd, n_ff), gate_up),
        T(f"blk.{i}.ffn_up.weight", (n_embd, n_ff), gate_up),
        T(f"blk.{i}.ffn_down.weight", (n_ff, n_embd), down),
    ]


def dense_llama(
    path: Path,
    *,
    n_layer: int = 8,
    n_embd: int = 512,
    n_head: int = 8,
    n_head_kv: int = 4,
    n_ff: int = 1024,
    n_vocab: int = 4096,
    qtype: Q = Q.Q8_0,
    tied: bool = False,
    n_ctx_train: int = 8192,
    n_shards: int = 1,
    chat_template: str | None = None,
) -> list[Path]:
    """A Llama-architecture dense model (GQA); ``tied`` leaves out ``output.weight``."""
    d = n_embd // n_head
    ts = [T("token_embd.weight", (n_embd, n_vocab), qtype)]
    for i in range(n_layer):
        ts += _attn(i, n_embd, n_head, n_head_kv, d, qtype) + _ffn(i, n_embd, n_ff, qtype, qtype)
    ts.append(T("output_norm.weight", (n_embd,)))
    if not tied:
        ts.append(T("output.weight", (n_embd, n_vocab), qtype))
    kv = {
        "{arch}.context_length": n_ctx_train,
        "{arch}.embedding_length": n_embd,
        "{arch}.block_count": n_layer,
        "{arch}.feed_forward_length": n_ff,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_head_kv,
        "{arch}.rope.dimension_count": d,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-5,
        "{arch}.vocab_size": n_vocab,
    }
    return write_model(
        path, "llama", kv, ts, n_vocab=n_vocab, n_shards=n_shards, chat_template=chat_template, name="dense-llama"
    )


def mixed_quant_llama(path: Path, *, n_layer: int = 8, n_embd: int = 512, n_vocab: int = 4096) -> list[Path]:
    """A dense Llama model whose tensors mix F16, Q8_0, Q6_K, Q5_K, Q4_K and Q4_0 (like a K-quant mix)."""
    n_head, n_head_kv, n_ff = 8, 2, 1536
    d = n_embd // n_head
    mix = [Q.Q4_K, Q.Q5_K, Q.Q6_K, Q.Q4_0, Q.Q8_0]
    ts = [T("token_embd.weight", (n_embd, n_vocab), Q.Q6_K)]
    for i in range(n_layer):
        a = mix[i % len(mix)]
        ts += _attn(i, n_embd, n_head, n_head_kv, d, a)
        ts += _ffn(i, n_embd, n_ff, mix[(i + 1) % len(mix)], Q.F16 if i == 0 else Q.Q6_K)
    ts += [T("output_norm.weight", (n_embd,)), T("output.weight", (n_embd, n_vocab), Q.Q8_0)]
    kv = {
        "{arch}.context_length": 8192,
        "{arch}.embedding_length": n_embd,
        "{arch}.block_count": n_layer,
        "{arch}.feed_forward_length": n_ff,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_head_kv,
        "{arch}.rope.dimension_count": d,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-5,
    }
    return write_model(path, "llama", kv, ts, n_vocab=n_vocab, name="mixed-quant-llama")


def moe_qwen3(
    path: Path,
    *,
    n_layer: int = 6,
    n_embd: int = 512,
    n_head: int = 8,
    n_head_kv: int = 2,
    d: int = 64,
    n_expert: int = 64,
    n_expert_used: int = 8,
    n_ff_exp: int = 256,
    n_vocab: int = 4096,
    qtype: Q = Q.Q8_0,
    n_shards: int = 1,
    n_ctx_train: int = 32768,
) -> list[Path]:
    """A Qwen3-MoE model: many experts, 3-D expert tensors, per-head QK norm."""
    ts = [T("token_embd.weight", (n_embd, n_vocab), qtype)]
    for i in range(n_layer):
        ts += _attn(i, n_embd, n_head, n_head_kv, d, qtype, norms=True)
        ts += [
            T(f"blk.{i}.ffn_norm.weight", (n_embd,)),
            T(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_expert)),
            T(f"blk.{i}.ffn_gate_exps.weight", (n_embd, n_ff_exp, n_expert), qtype),
            T(f"blk.{i}.ffn_up_exps.weight", (n_embd, n_ff_exp, n_expert), qtype),
            T(f"blk.{i}.ffn_down_exps.weight", (n_ff_exp, n_embd, n_expert), qtype),
        ]
    ts += [T("output_norm.weight", (n_embd,)), T("output.weight", (n_embd, n_vocab), qtype)]
    kv = {
        "{arch}.context_length": n_ctx_train,
        "{arch}.embedding_length": n_embd,
        "{arch}.block_count": n_layer,
        "{arch}.feed_forward_length": n_ff_exp * 4,
        "{arch}.expert_feed_forward_length": n_ff_exp,
        "{arch}.expert_count": n_expert,
        "{arch}.expert_used_count": n_expert_used,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_head_kv,
        "{arch}.attention.key_length": d,
        "{arch}.attention.value_length": d,
        "{arch}.rope.freq_base": 1000000.0,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-6,
    }
    return write_model(path, "qwen3moe", kv, ts, n_vocab=n_vocab, n_shards=n_shards, name="moe-qwen3")


# MiniMax-M3 (config of MiniMaxAI/MiniMax-M3; tensor set from src/models/minimax-m3.cpp of the pinned
# llama.cpp): 60 layers, 3 leading dense, 128 routed experts (4 used) + 1 shared, GQA 64/4 x 128.
M3 = {
    "n_layer": 60,
    "n_dense": 3,
    "n_embd": 6144,
    "n_head": 64,
    "n_head_kv": 4,
    "d": 128,
    "n_ff_dense": 12288,
    "n_ff_exp": 3072,
    "n_expert": 128,
    "n_expert_used": 4,
    "n_vocab": 200064,
    "idx_heads": 4,
    "idx_dim": 128,
}


def minimax_m3_like(
    folder: Path,
    *,
    n_shards: int = 6,
    n_layer: int = 60,
    big_expert_layers: int = 9,
    chat_template: str | None = None,
    experts: Q | None = None,
    stem: str = "MiniMax-M3-UD-IQ4_XS",
) -> list[Path]:
    """A header-true MiniMax-M3 stand-in in a UD-IQ4_XS-like mix (~194 GiB), split into shards.

    Experts: down IQ4_XS; gate/up IQ4_XS in the first ``big_expert_layers`` MoE layers, IQ3_S after;
    attention, shared expert and dense FFN Q8_0; embeddings Q6_K; norms/router F32 (as the
    converter forces the indexer to F32).  ``experts=Q.Q8_0`` puts every expert tensor in that
    type instead (~421 GiB, like an 8-bit release).
    """
    m = M3
    e, d, H, Hkv = m["n_embd"], m["d"], m["n_head"], m["n_head_kv"]
    ts = [T("token_embd.weight", (e, m["n_vocab"]), Q.Q6_K)]
    for i in range(n_layer):
        ts += _attn(i, e, H, Hkv, d, Q.Q8_0, norms=True)
        if i < m["n_dense"]:
            ts += _ffn(i, e, m["n_ff_dense"], Q.Q8_0, Q.Q8_0)
            continue
        gu = Q.IQ4_XS if i - m["n_dense"] < big_expert_layers else Q.IQ3_S
        down = Q.IQ4_XS
        if experts is not None:
            gu = down = experts
        f, n = m["n_ff_exp"], m["n_expert"]
        ts += [
            T(f"blk.{i}.ffn_norm.weight", (e,)),
            T(f"blk.{i}.ffn_gate_inp.weight", (e, n)),
            T(f"blk.{i}.exp_probs_b.bias", (n,)),
            T(f"blk.{i}.ffn_gate_exps.weight", (e, f, n), gu),
            T(f"blk.{i}.ffn_up_exps.weight", (e, f, n), gu),
            T(f"blk.{i}.ffn_down_exps.weight", (f, e, n), down),
            T(f"blk.{i}.ffn_gate_shexp.weight", (e, f), Q.Q8_0),
            T(f"blk.{i}.ffn_up_shexp.weight", (e, f), Q.Q8_0),
            T(f"blk.{i}.ffn_down_shexp.weight", (f, e), Q.Q8_0),
            T(f"blk.{i}.indexer.q_proj.weight", (e, m["idx_heads"] * m["idx_dim"])),
            T(f"blk.{i}.indexer.k_proj.weight", (e, m["idx_dim"])),
            T(f"blk.{i}.indexer.q_norm.weight", (m["idx_dim"],)),
            T(f"blk.{i}.indexer.k_norm.weight", (m["idx_dim"],)),
        ]
    ts += [T("output_norm.weight", (e,)), T("output.weight", (e, m["n_vocab"]), Q.Q6_K)]
    kv = {
        "{arch}.context_length": 1048576,
        "{arch}.embedding_length": e,
        "{arch}.block_count": n_layer,
        "{arch}.feed_forward_length": m["n_ff_dense"],
        "{arch}.expert_feed_forward_length": m["n_ff_exp"],
        "{arch}.expert_count": m["n_expert"],
        "{arch}.expert_used_count": m["n_expert_used"],
        "{arch}.expert_shared_count": 1,
        "{arch}.expert_weights_scale": 2.0,
        "{arch}.expert_weights_norm": True,
        "{arch}.expert_gating_func": 2,
        "{arch}.leading_dense_block_count": m["n_dense"],
        "{arch}.attention.head_count": H,
        "{arch}.attention.head_count_kv": Hkv,
        "{arch}.attention.key_length": d,
        "{arch}.attention.value_length": d,
        "{arch}.rope.dimension_count": 64,
        "{arch}.rope.freq_base": 5000000.0,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-6,
        "{arch}.attention.indexer.head_count": m["idx_heads"],
        "{arch}.attention.indexer.key_length": m["idx_dim"],
        "{arch}.attention.indexer.top_k": 16,
        "{arch}.attention.indexer.block_size": 128,
        "{arch}.attention.indexer.local_blocks": 1,
    }
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return write_model(
        folder / f"{stem}.gguf",
        "minimax-m3",
        kv,
        ts,
        n_vocab=m["n_vocab"],
        n_shards=n_shards,
        chat_template=chat_template,
        name="MiniMax-M3-like",
    )


def minimax_m3_once(folder: Path) -> list[Path]:
    """:func:`minimax_m3_like` into ``folder``, reusing the files when an earlier call wrote them."""
    folder = Path(folder)
    names = shard_names(folder / "MiniMax-M3-UD-IQ4_XS.gguf", 6)
    done = folder / ".complete"
    if done.exists() and all(p.exists() for p in names):
        return names
    paths = minimax_m3_like(folder)
    done.write_text("ok")
    return paths
