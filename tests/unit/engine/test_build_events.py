"""`engine build` as a library call: build_engine(options, on_event) reports each stage as a
BuildNote and each of ninja's [N/M] lines as a BuildStep while cmake runs (through the Node
process interface), appends cmake's output to the build log, turns a failing compile into one
BuildError line, and stops cmake when the caller is interrupted. cmake here is a shell script on
PATH; the probes and the smoke test of the (absent) binaries are stubbed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from splitserve import BuildError
from splitserve.engine import BuildEvent, BuildNote, BuildOptions, build_engine, build_summary
from splitserve.engine import _build as build_mod
from splitserve.engine._build import BuildStep
from splitserve.engine._smoke import SmokeReport

FAKE_CMAKE = """#!/bin/sh
echo $$ >> "{pids}"
case "$1" in
  --build)
    if [ -n "$FAKE_CMAKE_HANG" ]; then echo "[1/3] Building C object ggml.o"; sleep 60; fi
    if [ -n "$FAKE_CMAKE_FAIL" ]; then
      echo "[1/3] Building C object ggml.o"; echo "rpc.cpp:12: error: boom" >&2; exit 2
    fi
    echo "[1/3] Building C object ggml.o"
    echo "[2/3] Building CXX object rpc.o"
    printf "[3/3] Linking CXX executable bin/llama-server"
    ;;
  *) echo "-- Configuring done"; echo "-- Build files have been written" ;;
esac
"""


@pytest.fixture()
def fake_cmake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cmake on PATH (no ninja, no ccache), a source tree, the cache in tmp_path; returns the
    file where each cmake run writes its pid."""
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pids = tmp_path / "cmake.pids"
    cmake = bin_dir / "cmake"
    cmake.write_text(FAKE_CMAKE.format(pids=pids))
    cmake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(build_mod.shutil, "which", lambda name: str(cmake) if name == "cmake" else None)
    names = {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"}
    monkeypatch.setattr(build_mod, "find_binaries", lambda bin_dir: names)
    monkeypatch.setattr(build_mod, "_rpath", lambda binary: "$ORIGIN")
    monkeypatch.setattr(build_mod, "probe_server_version", lambda server: {})
    monkeypatch.setattr(build_mod, "probe_rpc_protocol", lambda rpc: "3.0.0")
    monkeypatch.setattr(build_mod, "smoke_with_fallback", lambda *a, **k: (SmokeReport(checks=[]), {}))
    (tmp_path / "llama.cpp" / "ggml").mkdir(parents=True)
    (tmp_path / "llama.cpp" / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\n")
    return pids


def options(tmp_path: Path) -> BuildOptions:
    return BuildOptions(source=str(tmp_path / "llama.cpp"), jobs=2)


def test_build_reports_stages_and_compile_steps_and_logs_cmake(fake_cmake: Path, tmp_path: Path) -> None:
    events: list[BuildEvent] = []
    engine, built = build_engine(options(tmp_path), events.append)
    assert built
    steps = [(e.done, e.total, e.line) for e in events if isinstance(e, BuildStep)]
    assert steps == [
        (1, 3, "[1/3] Building C object ggml.o"),
        (2, 3, "[2/3] Building CXX object rpc.o"),
        (3, 3, "[3/3] Linking CXX executable bin/llama-server"),  # the last line has no newline
    ]
    notes = [e.message for e in events if isinstance(e, BuildNote)]
    assert (
        notes[notes.index(f"configuring {engine.key}") + 1]
        == "compiling llama-server, ggml-rpc-server, llama-bench with 2 jobs"
    )
    assert notes.index("probing the binaries") > notes.index(f"configuring {engine.key}")
    # every stage comes before the compile steps it leads to: the bar follows the notes
    first_step = next(i for i, e in enumerate(events) if isinstance(e, BuildStep))
    before = events[first_step - 1]
    assert isinstance(before, BuildNote) and before.message.startswith("compiling")
    log = Path(engine.provenance["log"]).read_text()
    assert "splitserve: no patches applied" in log and "-- Configuring done" in log
    assert log.index("$ cmake -S") < log.index("-- Configuring done") < log.index("$ cmake --build")
    assert "[2/3] Building CXX object rpc.o" in log
    assert build_summary(engine, built) == [f"engine {engine.key}: built", f"  binaries: {engine.bin_dir}"]

    again: list[BuildEvent] = []
    cached, built_again = build_engine(options(tmp_path), again.append)
    assert not built_again and cached.key == engine.key
    assert not [e for e in again if isinstance(e, BuildStep)]
    assert build_summary(cached, built_again)[0] == f"engine {engine.key}: already built (cache hit, nothing to do)"


def test_a_failing_compile_is_one_line_naming_the_error_and_the_log(
    fake_cmake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_CMAKE_FAIL", "1")
    with pytest.raises(BuildError) as exc:
        build_engine(options(tmp_path))
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("cmake build failed (exit 2): rpc.cpp:12: error: boom")
    assert "full log: " in msg and not list((tmp_path / "cache" / "engines").glob("*/engine.json"))


def _gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(")") + 2] in "ZX"


def test_an_interrupted_build_leaves_no_cmake_running(
    fake_cmake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_CMAKE_HANG", "1")

    def interrupt(event: BuildEvent) -> None:
        if isinstance(event, BuildStep):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_engine(options(tmp_path), interrupt)
    # cmake (sleeping a minute after its first step) was still running when the interrupt came
    build_pid = int(fake_cmake.read_text().split()[-1])
    assert _gone(build_pid), "cmake was left running"
