"""How splitserve was installed, and the one command that adds a package beside it.

splitserve may live in a pipx venv, a ``uv tool`` venv (neither has pip), or an ordinary
virtual environment with or without pip; each adds a package its own way.  Messages that
tell a user to install something (the demo model) print the command for the method found.
"""

from __future__ import annotations

import importlib.util
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class InstallMethod:
    """Where this splitserve runs from."""

    kind: str
    """``pipx``, ``uv-tool``, ``pip`` (an environment with pip), ``uv`` (an environment without
    pip, uv on PATH) or ``unknown``."""
    prefix: Path
    """The environment's folder (``sys.prefix``)."""
    python: str
    """Its interpreter (``sys.executable``)."""

    def add_command(self, package: str, no_deps: bool = False) -> str:
        """The one shell command that installs ``package`` into this environment."""
        py = shlex.quote(self.python)
        flag = " --no-deps" if no_deps else ""
        if self.kind == "pipx":
            # `pipx inject --pip-args=--no-deps` installs but then fails on the undeclared
            # dependencies' metadata; runpip is pip (or `uv pip`) in the tool's own venv.
            return f"pipx runpip {shlex.quote(self.prefix.name)} install{flag} {package}"
        if self.kind in ("uv-tool", "uv"):
            # `uv tool install --with` has no per-package --no-deps; `uv pip` into the tool's venv has.
            return f"uv pip install --python {py}{flag} {package}"
        return f"{py} -m pip install{flag} {package}"


def install_method(prefix: Path | None = None, python: str | None = None) -> InstallMethod:
    """How the running splitserve (or the environment at ``prefix``) was installed."""
    prefix = Path(prefix or sys.prefix)
    python = python or sys.executable
    if (prefix / "pipx_metadata.json").is_file():
        return InstallMethod("pipx", prefix, python)
    if (prefix / "uv-receipt.toml").is_file():
        return InstallMethod("uv-tool", prefix, python)
    has_pip = (
        importlib.util.find_spec("pip") is not None
        if prefix == Path(sys.prefix)
        else any(prefix.glob("lib/python*/site-packages/pip"))
    )
    if has_pip:
        return InstallMethod("pip", prefix, python)
    if shutil.which("uv"):
        return InstallMethod("uv", prefix, python)
    return InstallMethod("unknown", prefix, python)
