"""Small header-true GGUFs for the speculation and MiniMax-M3 rules: a GLM-4-MoE with MTP
(nextn) layers, the same with the MTP weights stripped, and a tiny MiniMax-M3.

    glm4moe_mtp(path, nextn=1, weights=True, arch="glm4moe") -> [Path]
    tiny_m3(path) -> [Path]
"""

from __future__ import annotations

from pathlib import Path

from gguf_factory import Q, T, _attn, _ffn, write_model


def glm4moe_mtp(
    path: Path,
    *,
    n_layer: int = 3,
    nextn: int = 1,
    weights: bool = True,
    kv: bool = True,
    arch: str = "glm4moe",
    n_embd: int = 128,
    n_vocab: int = 512,
) -> list[Path]:
    """A GLM-4-MoE-shaped model whose last ``nextn`` blocks are MTP layers, as the converter
    writes them: ``block_count`` counts them, ``<arch>.nextn_predict_layers`` names how many, and
    each holds ``blk.N.nextn.{eh_proj,enorm,hnorm,shared_head_norm}``.  ``weights=False`` leaves
    the nextn tensors out (a quant that strips them); ``kv=False`` leaves out the key."""
    n_head, n_head_kv, d, n_ff = 2, 2, 64, 256
    ts = [T("token_embd.weight", (n_embd, n_vocab), Q.Q8_0)]
    total = n_layer + nextn
    for i in range(total):
        ts += _attn(i, n_embd, n_head, n_head_kv, d, Q.Q8_0) + _ffn(i, n_embd, n_ff, Q.Q8_0, Q.Q8_0)
        if i >= n_layer and weights:
            ts += [
                T(f"blk.{i}.nextn.eh_proj.weight", (2 * n_embd, n_embd), Q.Q8_0),
                T(f"blk.{i}.nextn.enorm.weight", (n_embd,)),
                T(f"blk.{i}.nextn.hnorm.weight", (n_embd,)),
                T(f"blk.{i}.nextn.shared_head_norm.weight", (n_embd,)),
            ]
    ts += [T("output_norm.weight", (n_embd,)), T("output.weight", (n_embd, n_vocab), Q.Q8_0)]
    meta = {
        "{arch}.context_length": 4096,
        "{arch}.embedding_length": n_embd,
        "{arch}.block_count": total,
        "{arch}.feed_forward_length": n_ff,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_head_kv,
        "{arch}.attention.key_length": d,
        "{arch}.attention.value_length": d,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-5,
    }
    if kv:
        meta["{arch}.nextn_predict_layers"] = nextn
    return write_model(path, arch, meta, ts, n_vocab=n_vocab, name="glm4moe-mtp")


def tiny_m3(path: Path, *, n_layer: int = 3, n_embd: int = 128, n_vocab: int = 512) -> list[Path]:
    """A MiniMax-M3-shaped model (one leading dense layer, routed + shared experts, the MSA
    indexer), small enough to plan in milliseconds."""
    n_head, n_head_kv, d, n_ff, n_exp, f = 2, 1, 64, 256, 4, 64
    ts = [T("token_embd.weight", (n_embd, n_vocab), Q.Q8_0)]
    for i in range(n_layer):
        ts += _attn(i, n_embd, n_head, n_head_kv, d, Q.Q8_0, norms=True)
        if i == 0:
            ts += _ffn(i, n_embd, n_ff, Q.Q8_0, Q.Q8_0)
            continue
        ts += [
            T(f"blk.{i}.ffn_norm.weight", (n_embd,)),
            T(f"blk.{i}.ffn_gate_inp.weight", (n_embd, n_exp)),
            T(f"blk.{i}.exp_probs_b.bias", (n_exp,)),
            T(f"blk.{i}.ffn_gate_exps.weight", (n_embd, f, n_exp), Q.Q8_0),
            T(f"blk.{i}.ffn_up_exps.weight", (n_embd, f, n_exp), Q.Q8_0),
            T(f"blk.{i}.ffn_down_exps.weight", (f, n_embd, n_exp), Q.Q8_0),
            T(f"blk.{i}.indexer.q_proj.weight", (n_embd, 2 * d)),
            T(f"blk.{i}.indexer.k_proj.weight", (n_embd, d)),
        ]
    ts += [T("output_norm.weight", (n_embd,)), T("output.weight", (n_embd, n_vocab), Q.Q8_0)]
    meta = {
        "{arch}.context_length": 65536,
        "{arch}.embedding_length": n_embd,
        "{arch}.block_count": n_layer,
        "{arch}.feed_forward_length": n_ff,
        "{arch}.expert_feed_forward_length": f,
        "{arch}.expert_count": n_exp,
        "{arch}.expert_used_count": 2,
        "{arch}.expert_shared_count": 0,
        "{arch}.leading_dense_block_count": 1,
        "{arch}.attention.head_count": n_head,
        "{arch}.attention.head_count_kv": n_head_kv,
        "{arch}.attention.key_length": d,
        "{arch}.attention.value_length": d,
        "{arch}.attention.indexer.head_count": 2,
        "{arch}.attention.indexer.key_length": d,
        "{arch}.attention.layer_norm_rms_epsilon": 1e-6,
    }
    return write_model(path, "minimax-m3", meta, ts, n_vocab=n_vocab, name="tiny-m3")
