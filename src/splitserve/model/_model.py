"""A model as the planner needs it, built from GGUF headers: layers, bytes, KV geometry, experts.

inspect_model(path, tool_format=None) -> ModelInfo
ModelInfo.to_dict() -> the JSON of ``splitserve inspect --json``
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ModelError
from ._arch import KNOWN_ARCHS, MTP_ARCHS, swa_layers
from ._gguf import GGUFFile, TensorEntry, read_gguf

#: names the tool-call format a chat template writes (the chat layer's ``detect_format``); the
#: model layer knows no formats, so its caller passes one in
FormatDetector = Callable[[str], "str | None"]

_BLK = re.compile(r"^blk\.(\d+)\.")
_NEXTN = re.compile(r"^blk\.(\d+)\.nextn\.eh_proj\.")


@dataclass
class LayerInfo:
    """One repeating layer (``blk.N``): its tensors and the KV cache llama.cpp gives it."""

    index: int
    tensor_bytes: list[int] = field(default_factory=list)  #: nbytes of each tensor (unpadded)
    expert_bytes: int = 0  #: bytes of routed-expert tensors (``*_exps``)
    n_head_kv: int = 0
    k_dim: int = 0  #: K elements per token per KV head
    v_dim: int = 0  #: V elements per token per KV head (0 for MLA: no V cache)
    swa: bool = False
    extra_kv: list[tuple[int, int]] = field(default_factory=list)  #: other caches: (K, V) elements/token
    moe: bool = False

    @property
    def weights_bytes(self) -> int:
        return sum(self.tensor_bytes)

    @property
    def k_elements(self) -> int:
        return self.n_head_kv * self.k_dim

    @property
    def v_elements(self) -> int:
        return self.n_head_kv * self.v_dim


@dataclass
class ModelInfo:
    """Everything ``inspect`` shows and ``plan`` uses; all sizes in bytes."""

    path: Path
    shards: list[Path]
    architecture: str
    name: str | None
    file_bytes: int
    n_params: int
    quant_mix: dict[str, dict[str, int]]  #: type -> {"tensors", "bytes", "params"}
    n_layer: int
    n_embd: int
    n_head: int
    n_vocab: int
    n_ctx_train: int
    layers: list[LayerInfo]
    input_tensor_bytes: list[int]  #: tensors llama.cpp keeps on the host (token embeddings)
    output_tensor_bytes: list[int]  #: output layer: output norm, output (or a copy of the embeddings)
    tied_embeddings: bool
    n_swa: int
    n_expert: int
    n_expert_used: int
    n_expert_shared: int
    n_ff: int
    n_ff_exp: int
    mla: bool
    chat_template: str | None
    tool_call_format: str | None  #: as the caller's detector named it (None: no template, or none given)
    known_architecture: bool
    estimated: list[str] = field(default_factory=list)  #: what the planner had to guess, in words
    nextn_predict_layers: int = 0  #: ``<arch>.nextn_predict_layers``: MTP layers the header declares
    mtp_layers: list[int] = field(default_factory=list)  #: layers holding MTP weights (``blk.N.nextn.eh_proj``)
    cache: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)  #: planner memo

    @property
    def weights_bytes(self) -> int:
        return (
            sum(sum(layer.tensor_bytes) for layer in self.layers)
            + sum(self.input_tensor_bytes)
            + sum(self.output_tensor_bytes)
        )

    @property
    def expert_bytes(self) -> int:
        return sum(layer.expert_bytes for layer in self.layers)

    @property
    def mtp_problem(self) -> str | None:
        """Why ``--spec-type draft-mtp`` cannot use this model's own MTP layers (None: it can).

        llama.cpp drafts with MTP when the header declares ``nextn_predict_layers`` > 0, the
        ``blk.N.nextn.*`` weights are in the file, and the architecture builds an MTP graph.
        """
        a = self.architecture
        if self.nextn_predict_layers <= 0 and not self.mtp_layers:
            return f"the GGUF has no MTP layers (no {a}.nextn_predict_layers, no blk.N.nextn.* tensors)"
        if not self.mtp_layers:
            return (
                f"{a}.nextn_predict_layers = {self.nextn_predict_layers} but the blk.N.nextn.* weights are "
                "not in this GGUF (stripped by the quantiser)"
            )
        if self.nextn_predict_layers <= 0:
            return f"the GGUF has blk.N.nextn.* tensors but no {a}.nextn_predict_layers, so llama.cpp ignores them"
        if a not in MTP_ARCHS:
            return f"the pinned llama.cpp builds no MTP graph for architecture {a!r}"
        return None

    @property
    def has_mtp(self) -> bool:
        return self.mtp_problem is None

    def to_dict(self) -> dict[str, Any]:
        """The ``inspect --json`` document."""
        return {
            "path": str(self.path),
            "shards": [str(p) for p in self.shards],
            "architecture": self.architecture,
            "known_architecture": self.known_architecture,
            "name": self.name,
            "file_bytes": self.file_bytes,
            "file_size": self.file_bytes,  # same as file_bytes
            "n_params": self.n_params,
            "parameter_count": self.n_params,  # same as n_params
            "quant_mix": self.quant_mix,
            "n_layer": self.n_layer,
            "n_embd": self.n_embd,
            "n_head": self.n_head,
            "n_vocab": self.n_vocab,
            "context_length": self.n_ctx_train,
            "tied_embeddings": self.tied_embeddings,
            "host_bytes": sum(self.input_tensor_bytes),
            "output_bytes": sum(self.output_tensor_bytes),
            "layers": [
                {
                    "index": layer.index,
                    "weights_bytes": layer.weights_bytes,
                    "tensor_bytes": layer.weights_bytes,
                    "expert_bytes": layer.expert_bytes,
                    "n_head_kv": layer.n_head_kv,
                    "k_head_dim": layer.k_dim,
                    "v_head_dim": layer.v_dim,
                    "sliding_window": layer.swa,
                    "extra_kv": [list(x) for x in layer.extra_kv],
                    "moe": layer.moe,
                }
                for layer in self.layers
            ],
            "kv": {
                "sliding_window": self.n_swa or None,
                "swa_layers": sum(1 for layer in self.layers if layer.swa),
                "mla": self.mla,
            },
            "experts": {
                "count": self.n_expert,
                "used": self.n_expert_used,
                "shared": self.n_expert_shared,
                "ff_length": self.n_ff_exp,
                "bytes": self.expert_bytes,
            }
            if self.n_expert
            else None,
            "chat_template": {"embedded": self.chat_template is not None, "tool_call_format": self.tool_call_format},
            "mtp": {
                "nextn_predict_layers": self.nextn_predict_layers,
                "layers": self.mtp_layers,
                "draft_mtp": self.has_mtp,
                "problem": self.mtp_problem,
            },
            "estimated": self.estimated,
        }


def _int(g: GGUFFile, key: str, default: int = 0) -> int:
    v = g.get(key)
    if v is None:
        return default
    if isinstance(v, list):
        return int(max(v)) if v else default
    return int(v)


def _per_layer(g: GGUFFile, key: str, n_layer: int, default: int) -> list[int]:
    v = g.get(key)
    if v is None:
        return [default] * n_layer
    if isinstance(v, list):
        vals = [int(x) for x in v][:n_layer]
        return vals + [vals[-1] if vals else default] * (n_layer - len(vals))
    return [int(v)] * n_layer


@dataclass
class _Tensors:
    """What the tensor list says: per-layer bytes, the input and output tensors, the quant mix."""

    layers: list[LayerInfo]
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)
    mix: dict[str, dict[str, int]] = field(default_factory=dict)
    embd: TensorEntry | None = None
    tied: bool = False
    mtp_layers: set[int] = field(default_factory=set)


def _tally_tensors(g: GGUFFile, n_layer: int) -> _Tensors:
    """Each tensor to its layer (MTP / NextN layers past ``block_count`` are skipped, as llama.cpp
    does), to the inputs (the embeddings) or to the outputs; tied embeddings count as an output too."""
    out = _Tensors([LayerInfo(index=i) for i in range(n_layer)])
    mix: dict[str, dict[str, int]] = defaultdict(lambda: {"tensors": 0, "bytes": 0, "params": 0})
    names = {t.name for t in g.tensors}
    for t in g.tensors:
        nx = _NEXTN.match(t.name)
        if nx:
            out.mtp_layers.add(int(nx.group(1)))
        m = mix[t.type_name]
        m["tensors"] += 1
        m["bytes"] += t.nbytes
        m["params"] += t.n_elements
        b = _BLK.match(t.name)
        if b:
            il = int(b.group(1))
            if il >= n_layer:  # e.g. MTP / NextN layers past block_count: llama.cpp skips them here
                continue
            out.layers[il].tensor_bytes.append(t.nbytes)
            if "_exps." in t.name:
                out.layers[il].expert_bytes += t.nbytes
                out.layers[il].moe = True
        elif t.name.startswith("token_embd.") and not t.name.startswith("token_embd_norm"):
            out.inputs.append(t.nbytes)
            if t.name == "token_embd.weight":
                out.embd = t
        else:
            out.outputs.append(t.nbytes)
    out.mix = dict(sorted(mix.items(), key=lambda kv: -kv[1]["bytes"]))
    out.tied = "output.weight" not in names and out.embd is not None
    if out.tied and out.embd is not None:
        out.outputs.append(out.embd.nbytes)  # llama.cpp loads a duplicate of the embeddings as the output
    return out


def _set_kv_geometry(g: GGUFFile, a: str, layers: list[LayerInfo], n_embd: int, n_head: int) -> tuple[bool, int]:
    """Each layer's KV heads, K/V sizes and sliding window, as llama_hparams computes them;
    returns (MLA, the sliding window)."""
    n_layer = len(layers)
    head_kv = _per_layer(g, f"{a}.attention.head_count_kv", n_layer, n_head)
    d_default = n_embd // n_head if n_head else 0
    k_dim = _int(g, f"{a}.attention.key_length", d_default)
    v_dim = _int(g, f"{a}.attention.value_length", d_default)
    mla = g.get(f"{a}.attention.key_length_mla") is not None and g.get(f"{a}.attention.value_length_mla") is not None
    n_swa = _int(g, f"{a}.attention.sliding_window")
    swa = swa_layers(a, n_layer, n_swa, g.get(f"{a}.attention.sliding_window_pattern"))
    for layer, hkv, s in zip(layers, head_kv, swa):
        layer.n_head_kv = hkv
        layer.k_dim = k_dim
        layer.v_dim = 0 if mla else v_dim
        layer.swa = s
    if a == "minimax-m3":
        # llama_kv_cache_msa: an indexer cache (1 head, K = indexer key_length, V = value_length) on
        # every layer past the leading dense ones
        n_dense = _int(g, f"{a}.leading_dense_block_count")
        idx_k = _int(g, f"{a}.attention.indexer.key_length", k_dim)
        for layer in layers[n_dense:]:
            layer.extra_kv.append((idx_k, v_dim))
    return mla, n_swa


def model_from_gguf(g: GGUFFile, path: Path, tool_format: FormatDetector | None = None) -> ModelInfo:
    """Build a :class:`ModelInfo` from headers already read."""
    arch = g.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ModelError(f"{path}: no general.architecture in the GGUF header; not a model file")
    a = arch
    n_layer = _int(g, f"{a}.block_count")
    if n_layer <= 0:
        raise ModelError(f"{path}: no {a}.block_count in the GGUF header; cannot plan layers")
    n_embd = _int(g, f"{a}.embedding_length")
    n_head = _int(g, f"{a}.attention.head_count")
    n_vocab = _int(g, f"{a}.vocab_size") or g.array_lengths.get("tokenizer.ggml.tokens", 0)
    tensors = _tally_tensors(g, n_layer)
    if not n_vocab and tensors.embd is not None:
        n_vocab = tensors.embd.shape[1] if len(tensors.embd.shape) > 1 else 0
    mla, n_swa = _set_kv_geometry(g, a, tensors.layers, n_embd, n_head)
    known = a in KNOWN_ARCHS
    estimated = (
        []
        if known
        else [
            f"architecture {a!r} is not one splitserve knows: KV geometry and compute buffers "
            "use the generic rules (every layer a full-attention GQA cache)"
        ]
    )
    template = g.get("tokenizer.chat_template")
    return ModelInfo(
        path=path,
        shards=g.shards,
        architecture=a,
        name=g.get("general.name"),
        file_bytes=g.file_bytes,
        n_params=sum(t.n_elements for t in g.tensors),
        quant_mix=tensors.mix,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_vocab=n_vocab,
        n_ctx_train=_int(g, f"{a}.context_length"),
        layers=tensors.layers,
        input_tensor_bytes=tensors.inputs,
        output_tensor_bytes=tensors.outputs,
        tied_embeddings=tensors.tied,
        n_swa=n_swa,
        n_expert=_int(g, f"{a}.expert_count"),
        n_expert_used=_int(g, f"{a}.expert_used_count"),
        n_expert_shared=_int(g, f"{a}.expert_shared_count"),
        n_ff=_int(g, f"{a}.feed_forward_length"),
        n_ff_exp=_int(g, f"{a}.expert_feed_forward_length"),
        mla=mla,
        chat_template=template if isinstance(template, str) else None,
        tool_call_format=tool_format(template) if tool_format is not None and isinstance(template, str) else None,
        known_architecture=known,
        estimated=estimated,
        nextn_predict_layers=_int(g, f"{a}.nextn_predict_layers"),
        mtp_layers=sorted(tensors.mtp_layers),
    )


def inspect_model(path: str | Path, tool_format: FormatDetector | None = None) -> ModelInfo:
    """Read a GGUF model's headers (all shards, given any one) into a :class:`ModelInfo`;
    ``tool_format`` (e.g. ``splitserve.chat.detect_format``) names the chat template's tool-call format."""
    p = Path(path)
    g = read_gguf(p)
    return model_from_gguf(g, g.shards[0] if p.is_dir() else p, tool_format)
