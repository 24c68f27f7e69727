"""vLLM / SGLang parallel sizes chosen from the nodes and the model's shape.

    ModelShape.from_config(config.json as a dict) -> ModelShape     # heads, KV heads, layers
    choose_parallel({node: GPUs}, shape) -> ParallelChoice          # tensor, pipeline, one-line reason

The rules are the engines' own: the attention heads must divide evenly over the tensor parallel
ranks (vLLM: "Total number of attention heads (X) must be divisible by tensor parallel size (Y)"),
the KV heads must divide over them or be replicated evenly (``kv % tp == 0`` or ``tp % kv == 0``),
and each pipeline stage holds at least one layer (``layers >= pipeline``). The vocabulary is
padded by the engines and sets no rule.

The choice, in order: tensor parallel over every GPU of every node when the heads allow it;
else tensor over each node's GPUs and pipeline over the nodes (vLLM's multi-node layout); else
the largest tensor size within a node that the heads allow, pipeline over the rest. Without the
model's heads (no ``config.json`` to read) the second layout is taken and the reason says so.
With ``even`` (vLLM's native launcher and SGLang: every node runs world / nodes ranks) a node
with fewer GPUs sets the count for all; with Ray (``even = False``) every GPU counts.

Pure: numbers in, numbers and a sentence out; the cluster layer reads ``config.json`` and counts
the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_HEADS = ("num_attention_heads", "n_head", "num_heads", "n_heads")
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num")
_LAYERS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")


@dataclass(frozen=True)
class ModelShape:
    """What of a model bounds its parallel sizes (None: unknown)."""

    heads: int | None = None
    """``num_attention_heads``."""
    kv_heads: int | None = None
    """``num_key_value_heads`` (the heads when the config has none: no grouped-query attention)."""
    layers: int | None = None
    """``num_hidden_layers``."""
    source: str = ""
    """Where the numbers come from, or why there are none (for the reason)."""

    @classmethod
    def from_config(cls, config: Mapping[str, Any], source: str = "config.json") -> ModelShape:
        """The shape in a Hugging Face ``config.json`` (its ``text_config`` for a multimodal model
        whose top level has no heads)."""
        text = config.get("text_config")
        if _first(config, _HEADS) is None and isinstance(text, Mapping):
            config = text
        heads = _first(config, _HEADS)
        kv = _first(config, _KV_HEADS)
        return cls(heads=heads, kv_heads=kv if kv is not None else heads, layers=_first(config, _LAYERS), source=source)


@dataclass(frozen=True)
class ParallelChoice:
    """The sizes chosen and why."""

    tensor: int
    pipeline: int
    reason: str

    @property
    def note(self) -> str:
        """The line `up --dry-run` prints."""
        return f"parallel sizes: tensor {self.tensor} x pipeline {self.pipeline} (auto: {self.reason})"


def tensor_fits(tp: int, shape: ModelShape) -> bool:
    """The heads (and KV heads) split evenly over ``tp`` ranks; True when they are unknown."""
    if shape.heads is not None and shape.heads % tp:
        return False
    kv = shape.kv_heads
    return kv is None or kv % tp == 0 or tp % kv == 0


def pipeline_fits(pp: int, shape: ModelShape) -> bool:
    """Every one of ``pp`` stages gets a layer; True when the layers are unknown."""
    return shape.layers is None or shape.layers >= pp


def choose_parallel(
    gpus: Mapping[str, int | None],
    shape: ModelShape | None = None,
    *,
    data_parallel: int = 1,
    even: bool = True,
) -> ParallelChoice:
    """Tensor and pipeline sizes for one server over ``gpus`` (GPUs per node, in rank order; None
    where unknown); a ValueError naming the model's numbers when no split fits."""
    if not gpus:
        raise ValueError("no nodes to choose parallel sizes for")
    shape = shape or ModelShape()
    n = len(gpus)
    per_node, notes = _per_node(gpus, even)
    usable = {name: max(count // data_parallel, 1) for name, count in per_node.items()}
    g = min(usable.values())
    total = g * n if even else sum(usable.values())
    if data_parallel > 1:
        notes.append(f"data_parallel_size = {data_parallel}: {g} GPU(s) per node for each copy")
    prefix = "; ".join(notes) + "; " if notes else ""
    nodes = f"{n} nodes" if n > 1 else "the node"
    if shape.heads is None:
        why = f"heads unknown ({shape.source})" if shape.source else "heads unknown"
        tp = g if (total % g == 0) else 1
        pp = total // tp
        if n == 1:
            return ParallelChoice(tp, pp, f"{prefix}{why}; tensor over the node's {g} GPU(s)")
        return ParallelChoice(
            tp,
            pp,
            f"{prefix}{why}; tensor over each node's {tp} GPU(s), pipeline over {pp} "
            + ("nodes (vLLM's multi-node layout)" if pp == n else "stages"),
        )
    heads = _heads_text(shape)
    for tp, pp in _candidates(total, g):
        if not (tensor_fits(tp, shape) and pipeline_fits(pp, shape)):
            continue
        if pp == 1:
            over = f"all {total} GPUs of {nodes}" if n > 1 else f"the node's {total} GPU(s)"
            return ParallelChoice(tp, pp, f"{prefix}{heads} divide over {over}")
        if tp == g and pp == n:
            return ParallelChoice(
                tp,
                pp,
                f"{prefix}{heads} do not divide over {total} GPUs; tensor over each node's {g}, pipeline over {n} nodes",
            )
        tried = f"{total} or {g}" if total != g else f"{g}"
        return ParallelChoice(
            tp, pp, f"{prefix}{heads} do not divide over {tried} GPUs; tensor {tp}, pipeline over {pp} stages"
        )
    layers = f", {shape.layers} layers" if shape.layers is not None else ""
    raise ValueError(
        f"no tensor x pipeline split of {total} GPU(s) fits the model ({heads}{layers}): "
        "set tensor_parallel_size and pipeline_parallel_size"
    )


def _first(config: Mapping[str, Any], keys: tuple[str, ...]) -> int | None:
    for key in keys:
        value = config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _heads_text(shape: ModelShape) -> str:
    if shape.kv_heads is not None and shape.kv_heads != shape.heads:
        return f"{shape.heads} heads ({shape.kv_heads} KV)"
    return f"{shape.heads} heads"


def _per_node(gpus: Mapping[str, int | None], even: bool) -> tuple[dict[str, int], list[str]]:
    """Every node's GPU count (an unknown one taken as the smallest known, else 1) and what the
    reason says about them."""
    known = {name: c for name, c in gpus.items() if c is not None and c > 0}
    notes: list[str] = []
    unknown = [name for name in gpus if name not in known]
    fill = min(known.values()) if known else 1
    if unknown and known:
        notes.append(f"GPU count unknown on {', '.join(unknown)}: taken as {fill}")
    elif unknown:
        notes.append("GPU counts unknown: one per node assumed")
    counts = {name: known.get(name, fill) for name in gpus}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} {c}" for name, c in counts.items())
        use = f"{min(counts.values())} per node used" if even else "every GPU used (Ray places the ranks)"
        notes.append(f"GPUs differ per node ({listed}): {use}")
    return counts, notes


def _candidates(total: int, g: int) -> Iterator[tuple[int, int]]:
    """(tensor, pipeline) in the order of preference: tensor over every GPU, then the largest
    tensor size within a node that divides the total."""
    yield total, 1
    for tp in range(g, 0, -1):
        if g % tp == 0 and total % tp == 0 and tp != total:
            yield tp, total // tp


__all__ = ["ModelShape", "ParallelChoice", "choose_parallel", "pipeline_fits", "tensor_fits"]
