"""splitserve: serve one very large GGUF model across several machines with llama.cpp RPC."""

from __future__ import annotations

from ._errors import (
    BuildError,
    ClusterError,
    EngineError,
    ModelError,
    NodeError,
    NotRunningError,
    SpecError,
    SplitserveError,
    UsageError,
)

__version__ = "0.1.0"

__all__ = [
    "BuildError",
    "ClusterError",
    "EngineError",
    "ModelError",
    "NodeError",
    "NotRunningError",
    "SpecError",
    "SplitserveError",
    "UsageError",
    "__version__",
]
