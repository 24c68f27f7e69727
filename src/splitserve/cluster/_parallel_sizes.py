"""vLLM / SGLang parallel sizes a spec leaves unset, chosen when the plan is built.

:func:`with_parallel_sizes` takes a spec whose ``[vllm]`` / ``[sglang]`` table gives neither
``tensor_parallel_size`` nor ``pipeline_parallel_size`` and the GPUs each node reported, and
returns a copy of the spec with both set by :func:`splitserve.plan.choose_parallel`, plus the
line `up --dry-run` prints (``parallel sizes: tensor 8 x pipeline 1 (auto: 64 heads (8 KV)
divide over all 8 GPUs of 2 nodes)``). A node's GPUs are its ``devices`` in the spec when listed,
else its ``nvidia-smi -L`` count. The model's heads come from its ``config.json`` as this machine
(the head) holds it: in the model's folder, or for a hub id in the Hugging Face cache (nothing is
downloaded); a GGUF's from its header. Without them the choice is tensor over each node's GPUs,
pipeline over the nodes. With ``topology = "replicas"`` the sizes are those of one replica's group of nodes (the
smallest choice over the groups, so every replica fits).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from .._errors import ClusterError, SplitserveError
from ..plan import ModelShape, ParallelChoice, choose_parallel
from ._model_rows import is_model_path
from ._spec import ClusterSpec
from ._spec_engines import SglangSpec, VllmSpec, engine_table, server_groups, spec_gpus


def model_shape(model: str, env: Mapping[str, str] | None = None) -> ModelShape:
    """The heads, KV heads and layers of ``model`` as this machine (the head) holds it: the
    ``config.json`` of a folder, of a hub id in the Hugging Face cache (``HF_HUB_CACHE`` /
    ``HF_HOME`` from ``env``, the engine's, else the default; nothing is downloaded), or a GGUF's
    header; an empty shape saying why when there is none to read."""
    if model.lower().endswith(".gguf"):
        return _gguf_shape(model)
    if is_model_path(model):
        return _config_shape(Path(model).expanduser() / "config.json")
    cached = _hub_config(model, env or {})
    if cached is None:
        return ModelShape(source=f"{model}: no config.json in this machine's Hugging Face cache")
    return _config_shape(cached)


def _config_shape(path: Path) -> ModelShape:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError:
        return ModelShape(source=f"no readable {path}")
    except ValueError:
        return ModelShape(source=f"{path} is not JSON")
    if not isinstance(data, dict):
        return ModelShape(source=f"{path} is not a JSON object")
    shape = ModelShape.from_config(data, str(path))
    return shape if shape.heads is not None else ModelShape(source=f"{path} names no num_attention_heads")


def _hub_config(repo_id: str, env: Mapping[str, str]) -> Path | None:
    """``config.json`` of ``repo_id`` in the local Hugging Face cache, or None (never fetched)."""
    from huggingface_hub import try_to_load_from_cache

    cache = env.get("HF_HUB_CACHE") or (f"{env['HF_HOME']}/hub" if env.get("HF_HOME") else None)
    try:
        found = try_to_load_from_cache(repo_id, "config.json", cache_dir=cache)
    except ValueError:  # not a repository id
        return None
    return Path(found) if isinstance(found, str) else None


def _gguf_shape(model: str) -> ModelShape:
    from ..model import inspect_model

    path = Path(model).expanduser()
    try:
        info = inspect_model(path)
    except (OSError, SplitserveError) as exc:
        return ModelShape(source=f"{path}: {exc}")
    kv = max((layer.n_head_kv for layer in info.layers), default=0) or info.n_head
    return ModelShape(heads=info.n_head or None, kv_heads=kv or None, layers=info.n_layer or None, source=str(path))


def _table_to_size(spec: ClusterSpec) -> VllmSpec | SglangSpec | None:
    """``spec``'s engine table when ``up`` chooses its parallel sizes: none given, and not the Ray
    probe (which starts no engine); else None."""
    table = engine_table(spec)
    if table is None or not table.auto_sizes or (isinstance(table, VllmSpec) and table.ray_probe):
        return None
    return table


def shape_to_size(spec: ClusterSpec) -> ModelShape | None:
    """The model's shape when ``up`` chooses ``spec``'s parallel sizes (read once, with the nodes'
    facts), else None."""
    table = _table_to_size(spec)
    return model_shape(table.model, table.env) if table is not None else None


def with_parallel_sizes(
    spec: ClusterSpec, node_gpus: Mapping[str, int | None], shape: ModelShape | None = None
) -> tuple[ClusterSpec, str | None]:
    """``spec`` with its engine table's unset parallel sizes chosen (see the module), and the note
    saying which and why; ``spec`` itself and None when the sizes are given (or for the Ray probe,
    which starts no engine). ``node_gpus``: each node's ``nvidia-smi -L`` count (None: unknown);
    ``shape``: the model's, read from its folder when not given. A ClusterError when no split fits."""
    table = _table_to_size(spec)
    if table is None:
        return spec, None
    shape = shape if shape is not None else model_shape(table.model, table.env)
    given = spec_gpus(spec)
    counts = {name: given.get(name) if given.get(name) is not None else node_gpus.get(name) for name in given}
    even = not (isinstance(table, VllmSpec) and table.launcher == "ray")
    groups = server_groups(spec)
    try:
        choices = [
            (
                group,
                choose_parallel(
                    {n: counts[n] for n in group}, shape, data_parallel=table.data_parallel_size, even=even
                ),
            )
            for group in groups
        ]
    except ValueError as exc:
        raise ClusterError(f"{spec.source_file or '<spec>'}: {spec.backend}: {exc}") from None
    group, choice = min(choices, key=lambda gc: gc[1].tensor * gc[1].pipeline)
    if len(groups) > 1 or spec.topology_asked[0] == "replicas":
        which = f"group {', '.join(group)}: " if len({(c.tensor, c.pipeline) for _, c in choices}) > 1 else ""
        choice = ParallelChoice(
            choice.tensor, choice.pipeline, f"per replica of {len(group)} node(s); {which}{choice.reason}"
        )
    sized = table.model_copy(update={"tensor_parallel_size": choice.tensor, "pipeline_parallel_size": choice.pipeline})
    out = spec.model_copy(update={spec.backend: sized})
    trivial = all(len(g) == 1 for g in groups) and all(c == 1 for c in counts.values())  # nothing to choose
    return out, None if trivial else choice.note


__all__ = ["model_shape", "shape_to_size", "with_parallel_sizes"]
