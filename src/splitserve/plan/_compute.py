"""Compute-buffer estimates: what ``sched_reserve`` allocates per device for the worst-case graph.

llama.cpp reserves one graph of ``n_ubatch`` tokens against a full KV cache and lets ggml-alloc
pack its intermediate tensors (with reuse) into one buffer per backend.  The packing is not
something a formula reproduces byte for byte; this model keeps the terms that grow (so the
estimate scales to 200 GB models) and takes its constants from measurements of the pinned
llama.cpp over loopback RPC workers (SmolLM2, Gemma 3, synthetic dense / MoE / mixed models;
see docs/planner.md):

- **Inputs, per copy.**  With more than one device llama.cpp enables pipeline parallelism and
  the scheduler keeps ``GGML_SCHED_MAX_COPIES`` (4) copies of every split input: the KQ mask
  (``n_kv × n_ubatch``, F16 with flash attention, F32 without; one more for the sliding-window
  layers) and the hidden state arriving from the previous device (``n_embd × n_ubatch`` F32).
- **One layer's peak.**  The layers run one after another, so a device needs the peak of one
  layer, not the sum: the FFN (``4·n_ff`` floats per token for a dense FFN; for MoE
  ``max(3·U, U + D) + 2·n_embd`` with ``U = n_used·n_ff_exp`` and ``D = n_used·n_embd``) or the
  attention (without flash attention the ``n_kv × n_ubatch × n_head`` F32 scores dominate).
- **The first device** also holds the embeddings coming from the host and their copies:
  ``(copies + 5)·n_embd`` floats per token more (measured 9·n_embd with 4 copies).
- **The host** (the CPU backend of llama-server) holds the masks' copies, ``10·n_embd`` floats
  per token, and the logits (``n_vocab × n_parallel`` F32).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model import ModelInfo
from ._memory import KVSettings, pad

F32 = 4
MAX_COPIES = 4  # GGML_SCHED_MAX_COPIES


@dataclass(frozen=True)
class ComputeEstimate:
    device_bytes: list[int]
    host_bytes: int
    notes: list[str]


def _kv_per_stream(model: ModelInfo, s: KVSettings) -> tuple[int, int]:
    n_ctx = pad(max(s.ctx, 1), 256)
    seq = n_ctx if (s.unified or s.parallel == 1) else pad(n_ctx // s.parallel, 256)
    swa = pad(min(seq, model.n_swa * (s.parallel if s.unified else 1) + s.ubatch), 256) if model.n_swa else 0
    return seq, swa


def _ffn_floats(model: ModelInfo, moe: bool) -> int:
    e = model.n_embd
    if moe and model.n_expert_used:
        f_exp = model.n_ff_exp or model.n_ff
        u = model.n_expert_used * f_exp
        d = model.n_expert_used * e
        peak = max(3 * u, u + d) + 2 * e
        if model.n_expert_shared:
            peak = max(peak, 3 * f_exp * model.n_expert_shared + 3 * e)
        return peak
    return 4 * model.n_ff if model.n_ff else 8 * e


def _attn_floats(model: ModelInfo, layer_k: int, layer_v: int, n_head: int) -> int:
    """Attention peak without the score matrix (flash attention), floats per token."""
    e = model.n_embd
    d_k = layer_k or (e // max(n_head, 1))
    return 2 * e + 2 * n_head * d_k + 2 * n_head * (layer_v or d_k)


def estimate_compute(model: ModelInfo, s: KVSettings, devices: list[int], n_dev: int) -> ComputeEstimate:
    """Compute-buffer bytes per device (``devices``: the device of each layer, output layer last)."""
    notes: list[str] = []
    copies = MAX_COPIES if n_dev > 1 else 1
    ub = s.ubatch
    e = model.n_embd
    seq, swa = _kv_per_stream(model, s)
    mask_elt = 2 if s.flash_attn else F32
    has_swa = any(layer.swa for layer in model.layers)
    has_full = any(not layer.swa for layer in model.layers)
    mask = (seq * ub * mask_elt if has_full else 0) + (swa * ub * mask_elt if has_swa else 0)
    per_dev_layers: list[list[int]] = [[] for _ in range(n_dev)]
    for il, dev in enumerate(devices[:-1]):
        per_dev_layers[dev].append(il)
    out = []
    for d in range(n_dev):
        layers = per_dev_layers[d]
        if not layers:
            # output layer only: the logits of n_parallel outputs
            out.append(model.n_vocab * s.parallel * F32 if devices[-1] == d else 0)
            continue
        peak = 0
        for il in layers:
            layer = model.layers[il]
            ffn = _ffn_floats(model, layer.moe) * ub * F32
            attn = _attn_floats(model, layer.k_dim, layer.v_dim, model.n_head) * ub * F32
            if not s.flash_attn:
                n_kv = swa if layer.swa else seq
                scores = n_kv * ub * model.n_head * F32
                attn = scores + 7 * e * ub * F32
            peak = max(peak, ffn, attn)
        total = copies * (mask + e * ub * F32) + peak
        if d == devices[0]:
            total += (copies + 5) * e * ub * F32
        if devices[-1] == d:
            total = max(total, model.n_vocab * s.parallel * F32)
        out.append(total)
    host = copies * mask + 10 * e * ub * F32 + model.n_vocab * s.parallel * F32
    if model.architecture == "minimax-m3":
        notes.append(
            "MiniMax-M3 sparse attention (MSA) graph: compute buffers use the generic "
            "flash-attention model, not measured for this architecture"
        )
    if not model.known_architecture:
        notes.append("compute buffers use the generic dense/MoE model for an unknown architecture")
    return ComputeEstimate(out, host, notes)
