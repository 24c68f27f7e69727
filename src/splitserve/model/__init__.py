"""GGUF headers across shards: architecture, per-layer tensor bytes, KV geometry, experts, template.

Reads headers only, never tensor data.
"""

from ._arch import swa_layers
from ._gguf import GGUFFile, TensorEntry, model_in_dir, read_gguf, shard_paths
from ._model import FormatDetector, LayerInfo, ModelInfo, inspect_model, model_from_gguf

__all__ = [
    "FormatDetector",
    "GGUFFile",
    "LayerInfo",
    "ModelInfo",
    "TensorEntry",
    "inspect_model",
    "model_from_gguf",
    "model_in_dir",
    "read_gguf",
    "shard_paths",
    "swa_layers",
]
