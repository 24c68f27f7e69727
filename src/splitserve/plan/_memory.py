"""Layer assignment, weight buffers and KV buffers, the way the pinned llama.cpp computes them.

- Layers: ``llama_model::load_tensors`` normalises ``--tensor-split`` to cumulative float32
  fractions and gives layer ``il`` (the output layer is ``il = n_layer``) to the first device
  whose fraction exceeds ``il / (n_layer + 1)`` (``std::upper_bound``), with ``-ngl`` ≥ n_layer + 1.
  The token embeddings stay on the host.
- Weights: a device's model buffer is its tensors, each padded to the 32-byte alignment.
- KV (``llama_kv_cache``): per layer ``row_size(type_k, n_head_kv·d_k) + row_size(type_v, …)`` bytes
  per cell; cells = ``n_ctx`` padded to 256 (per stream: ``pad(n_ctx / n_seq, 256)``); sliding-window
  layers hold ``pad(min(cells, n_swa·n_seq_unified + n_ubatch), 256)`` (``llama_kv_cache_iswa``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .._errors import UsageError
from ..model import ModelInfo

ALIGN = 32
CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def pad(x: int, n: int) -> int:
    return (x + n - 1) // n * n


def row_size(type_name: str, n: int) -> int:
    """``ggml_row_size``: bytes of ``n`` elements of a GGML type."""
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType[type_name.upper()]]
    except KeyError:
        raise UsageError(f"cache type {type_name!r} is not a GGML type; use one of {', '.join(CACHE_TYPES)}") from None
    return n // block * size


def layer_devices(n_layer: int, split: Sequence[float]) -> list[int]:
    """Device index of layers ``0..n_layer`` (the last entry is the output layer)."""
    if not split or all(x == 0 for x in split):
        raise UsageError("tensor split is empty or all zero")
    if any(x < 0 for x in split):
        raise UsageError(f"tensor split {list(split)} has a negative entry")
    cum = np.cumsum(np.asarray(split, dtype=np.float32), dtype=np.float32)  # float32 sums, as in C++
    cum = (cum / cum[-1]).astype(np.float32)
    v = (np.arange(n_layer + 1, dtype=np.float32) / np.float32(n_layer + 1)).astype(np.float32)
    dev = np.searchsorted(cum, v, side="right")  # std::upper_bound
    return [int(x) for x in np.minimum(dev, len(split) - 1)]


@dataclass(frozen=True)
class KVSettings:
    ctx: int
    parallel: int = 1
    unified: bool = False
    type_k: str = "f16"
    type_v: str = "f16"
    ubatch: int = 512
    flash_attn: bool = True


def kv_cells(model: ModelInfo, s: KVSettings) -> tuple[int, int]:
    """(cells for a full-attention layer, cells for a sliding-window layer), over all streams."""
    n_ctx = pad(max(s.ctx, 1), 256)
    if s.unified or s.parallel == 1:
        n_ctx_seq, n_stream = n_ctx, 1
    else:
        n_ctx_seq, n_stream = pad(n_ctx // s.parallel, 256), s.parallel
    full = n_ctx_seq * n_stream
    if model.n_swa > 0:
        swa_seq = pad(min(n_ctx_seq, model.n_swa * (s.parallel if s.unified else 1) + s.ubatch), 256)
    else:
        swa_seq = n_ctx_seq
    return full, swa_seq * n_stream


def layer_kv_bytes(model: ModelInfo, s: KVSettings) -> list[int]:
    """KV bytes of each layer at settings ``s``."""
    if not s.flash_attn and s.type_v.lower() not in ("f32", "f16", "bf16"):
        raise UsageError(
            f"a quantized V cache ({s.type_v}) needs flash attention; use --flash-attn on "
            "or --cache-type-v f16 (llama.cpp refuses this combination)"
        )
    full, swa = kv_cells(model, s)
    return [c * (swa if layer.swa else full) for c, layer in zip(_per_cell(model, s.type_k, s.type_v), model.layers)]


def _per_cell(model: ModelInfo, type_k: str, type_v: str) -> list[int]:
    key = ("kv_per_cell", type_k, type_v)
    if key not in model.cache:
        out = []
        for layer in model.layers:
            per_cell = row_size(type_k, layer.k_elements) + row_size(type_v, layer.v_elements)
            for k, v in layer.extra_kv:
                per_cell += row_size(type_k, k) + row_size(type_v, v)
            out.append(per_cell)
        model.cache[key] = out
    return list(model.cache[key])


def kv_bytes_per_token(model: ModelInfo, type_k: str, type_v: str) -> int:
    """KV bytes one token adds across all layers (full-attention layers; SWA layers are capped)."""
    return sum(_per_cell(model, type_k, type_v))


def weights_per_device(model: ModelInfo, devices: list[int], n_dev: int) -> list[int]:
    """Model buffer bytes of each device for the layer assignment ``devices``."""
    out = [0] * n_dev
    padded = padded_layer_bytes(model)
    for b, dev in zip(padded, devices):
        out[dev] += b
    return out


def padded_layer_bytes(model: ModelInfo) -> list[int]:
    """Each layer's tensors padded to the buffer alignment; the output layer last."""
    if "padded" not in model.cache:
        model.cache["padded"] = [sum(pad(b, ALIGN) for b in layer.tensor_bytes) for layer in model.layers] + [
            sum(pad(b, ALIGN) for b in model.output_tensor_bytes)
        ]
    return list(model.cache["padded"])


def host_bytes(model: ModelInfo) -> int:
    """Bytes of the tensors llama.cpp keeps on the host (the input layer: token embeddings)."""
    return sum(pad(b, ALIGN) for b in model.input_tensor_bytes)
