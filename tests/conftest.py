"""Shared fixtures: the real engine build and the real small models."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from splitserve._assets import gemma3_path, smollm2_path
from splitserve.engine import BuildOptions, Engine, build_engine


@pytest.fixture(scope="session")
def engine() -> Engine:
    """The CPU llama.cpp build from the engine cache (built on first use, ~13 min on 2 cores).

    ``SPLITSERVE_TEST_ENGINE`` may name an engine folder to use instead.
    """
    from splitserve.engine._engine import load_engine

    override = os.environ.get("SPLITSERVE_TEST_ENGINE")
    if override:
        return load_engine(Path(override))
    built, _ = build_engine(BuildOptions(backend="cpu"))
    return built


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """SmolLM2-135M-Instruct Q4_1 (embeds a ChatML template)."""
    return smollm2_path()


@pytest.fixture(scope="session")
def gemma3() -> Path:
    """Gemma 3 270M Q4_K_M (sliding-window layers; embeds no chat template)."""
    return gemma3_path()


@pytest.fixture()
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private cluster state folder for one test."""
    state = tmp_path / "state"
    monkeypatch.setenv("SPLITSERVE_STATE", str(state))
    return state
