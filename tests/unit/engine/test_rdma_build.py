"""The RPC RDMA transport in the engine build: decided from libibverbs, passed to cmake,
recorded in provenance with the reason, and kept out of the cache key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitserve.engine import BuildOptions
from splitserve.engine._build import plan_build
from splitserve.engine._engine import load_engine
from splitserve.engine._rdma import rdma_from_build_log, rdma_provenance, rdma_support, recorded_rdma

# cmake's own lines (ggml/src/ggml-rpc/CMakeLists.txt of the pinned source: message(STATUS ...)).
LOG_ON = "-- Using RPC backend\n--   RDMA transport enabled (auto-detected)\n-- Configuring done\n"
LOG_OFF = "-- Using RPC backend\n--   RDMA transport disabled\n-- Configuring done\n"


def debian_root(tmp_path: Path, lib: bool = True, header: bool = True) -> Path:
    root = tmp_path / "root"
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib/x86_64-linux-gnu/libibverbs.so.1").write_text("")  # the runtime (rdma-core's libibverbs1)
    if lib:
        (root / "usr/lib/x86_64-linux-gnu/libibverbs.so").write_text("")  # the -dev symlink cmake finds
    if header:
        (root / "usr/include/infiniband").mkdir(parents=True)
        (root / "usr/include/infiniband/verbs.h").write_text("")
    return root


def test_libibverbs_dev_installed_turns_rdma_on(tmp_path: Path) -> None:
    s = rdma_support(debian_root(tmp_path), system="Linux")
    assert s.on and s.state == "on" and s.cmake_flag() == "-DGGML_RPC_RDMA=ON"
    assert s.library == "/usr/lib/x86_64-linux-gnu/libibverbs.so" and "libibverbs found" in s.reason


def test_only_the_runtime_library_is_off_naming_the_package(tmp_path: Path) -> None:
    s = rdma_support(debian_root(tmp_path, lib=False, header=False), system="Linux")
    assert not s.on and s.cmake_flag() == "-DGGML_RPC_RDMA=OFF"
    assert s.text().startswith("off (libibverbs-dev not installed")


def test_a_library_without_its_header_is_off(tmp_path: Path) -> None:
    s = rdma_support(debian_root(tmp_path, header=False), system="Linux")
    assert not s.on and "verbs.h missing" in s.reason


def test_not_linux_leaves_it_to_llama_cpp(tmp_path: Path) -> None:
    s = rdma_support(debian_root(tmp_path), system="Darwin")
    assert not s.on and s.reason.startswith("not a Linux build") and s.cmake_flag() is None


def test_the_users_cmake_arg_wins(tmp_path: Path) -> None:
    s = rdma_support(debian_root(tmp_path), system="Linux", cmake_args=["-DGGML_RPC_RDMA=OFF"])
    assert not s.on and "--cmake-arg" in s.reason


def test_provenance_follows_cmakes_own_line() -> None:
    assert rdma_from_build_log(LOG_OFF + LOG_ON) == "on"  # the last configure wins
    assert rdma_from_build_log("no such line") is None
    s = rdma_support(Path("/nonexistent-root"), system="Linux")
    p = rdma_provenance(s, LOG_OFF)
    assert p == {"rdma": "off", "rdma_reason": s.reason}
    # cmake enabled it although splitserve did not ask (a user's cache): cmake's word counts
    assert rdma_provenance(s, LOG_ON)["rdma"] == "on"


def test_engines_built_before_rdma_was_recorded_read_it_from_their_build_log(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text(LOG_OFF)
    assert recorded_rdma({}, log) == ("off", "from the build log (built before splitserve recorded RDMA)")
    assert recorded_rdma({"rdma": "on", "rdma_reason": "x"}, None) == ("on", "x")
    assert recorded_rdma({}, tmp_path / "missing.log")[0] == "unknown"
    (tmp_path / "engine.json").write_text(json.dumps({"key": "k", "log": str(log), "binaries": {}}))
    engine = load_engine(tmp_path)
    assert engine.rdma == "off" and engine.provenance["rdma_reason"].startswith("from the build log")


def test_rdma_is_passed_to_cmake_but_not_part_of_the_cache_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from splitserve.engine import _build

    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    tree = tmp_path / "src"
    (tree / "ggml").mkdir(parents=True)
    (tree / "ggml" / "CMakeLists.txt").write_text("")
    (tree / "CMakeLists.txt").write_text("")
    on = debian_root(tmp_path)
    monkeypatch.setattr(_build, "rdma_support", lambda cmake_args: rdma_support(on, "Linux", cmake_args))
    with_rdma = plan_build(BuildOptions(source=str(tree)))
    monkeypatch.setattr(_build, "rdma_support", lambda cmake_args: rdma_support(tmp_path, "Linux", cmake_args))
    without = plan_build(BuildOptions(source=str(tree)))
    assert with_rdma.key == without.key
    assert with_rdma.configure_command()[-1] == "-DGGML_RPC_RDMA=ON"
    assert without.configure_command()[-1] == "-DGGML_RPC_RDMA=OFF"
    assert "-DGGML_RPC_RDMA=ON" not in with_rdma.cmake_args  # the key's flags


def test_a_node_without_libibverbs_gets_the_fix_in_the_smoke_verdict() -> None:
    from splitserve.engine._smoke import RunResult, judge

    # tools/rpc/rpc-server.cpp of the pinned source; the loader itself is silent in a release build
    log = "Failed to find RPC backend\n"
    check = judge("rpc", "ggml-rpc-server", RunResult(returncode=1, log=log), lambda _r: None)
    assert not check.ok and "install rdma-core (libibverbs1) there" in check.detail
    assert "-DGGML_RPC_RDMA=OFF" in check.detail
    fine = judge("rpc", "ggml-rpc-server", RunResult(returncode=None, log="RPC server v3.0.0"), lambda _r: None)
    assert fine.ok and fine.detail == "ggml-rpc-server ran"
