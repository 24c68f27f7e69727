from __future__ import annotations

from pathlib import Path

import pytest

from gguf_factory import minimax_m3_once


@pytest.fixture(scope="session")
def m3_standin(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The ~195 GiB MiniMax-M3-like sparse stand-in (6 shards), written once per test session."""
    return minimax_m3_once(tmp_path_factory.getbasetemp() / "m3-standin")
