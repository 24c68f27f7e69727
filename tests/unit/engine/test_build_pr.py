"""``engine build --pr``: upstream pull requests carried as patches on the pinned source.

No network and no compiling: the patches are made against a real file of the pinned source
(copied into a small tree), the fetch goes through an httpx MockTransport, and cmake is
replaced by a recorder while the rest of the build (patched copy, log, provenance) is real."""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

import splitserve.cli._engine  # noqa: F401  (registers `engine`)
from splitserve import BuildError, UsageError
from splitserve.cli import app
from splitserve.engine import BuildNote, BuildOptions, build_engine, get_engine
from splitserve.engine import _build as build_mod
from splitserve.engine._build import plan_build
from splitserve.engine._patches import PR_DIFF_URL, patches_dir, resolve_patch
from splitserve.engine._smoke import SmokeReport
from splitserve.engine._source import DEFAULT_PACKAGE, DEFAULT_VERSION

RPC = "ggml/src/ggml-rpc/ggml-rpc.cpp"
PINNED = Path.home() / ".cache/splitserve/sources" / f"{DEFAULT_PACKAGE}-{DEFAULT_VERSION}" / "llama.cpp"


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """A small llama.cpp tree holding a copy of the pinned ggml-rpc.cpp (the pinned tree is read only)."""
    # scripts/setup.sh unpacks it (the engine build's source); its absence is a broken setup
    assert (PINNED / RPC).is_file(), f"the pinned source is not unpacked at {PINNED} (run scripts/setup.sh)"
    root = tmp_path / "src" / "llama.cpp"
    (root / "ggml/src/ggml-rpc").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.14)\n")
    (root / "ggml/CMakeLists.txt").write_text("")
    shutil.copyfile(PINNED / RPC, root / RPC)
    return root


def make_patch(tree: Path, old: str, new: str) -> bytes:
    """A git-style diff of ggml-rpc.cpp replacing the first line containing ``old`` with ``new``."""
    before = (tree / RPC).read_text().splitlines(keepends=True)
    idx = next(i for i, line in enumerate(before) if old in line)
    after = [*before[:idx], before[idx].replace(old, new), *before[idx + 1 :]]
    body = "".join(difflib.unified_diff(before, after, f"a/{RPC}", f"b/{RPC}"))
    return f"diff --git a/{RPC} b/{RPC}\n{body}".encode()


# A line the pinned ggml-rpc.cpp has (the 10 MiB cache threshold, research round 3 section 2.4).
OLD = "HASH_THRESHOLD = 10 * 1024 * 1024"


def threshold_patch(tree: Path) -> bytes:
    text = (tree / RPC).read_text()
    assert OLD in text, f"the pinned {RPC} has no {OLD!r}"
    return make_patch(tree, OLD, "HASH_THRESHOLD = 1024 * 1024")


def test_a_patch_that_applies_changes_the_key_and_names_itself(cache: Path, tree: Path, tmp_path: Path) -> None:
    patch = tmp_path / "pr-23510.diff"
    patch.write_bytes(threshold_patch(tree))
    plain = plan_build(BuildOptions(source=str(tree)))
    patched = plan_build(BuildOptions(source=str(tree), prs=[str(patch)]))
    assert plain.key != patched.key, "a patched engine must not replace the plain one"
    assert "+pr23510-cpu-" in patched.key
    records = patched.source.identity["patches"]
    assert records == [{"pr": 23510, "sha256": resolve_patch(str(patch)).sha256}]
    assert len(records[0]["sha256"]) == 64
    # The pristine tree is untouched; the build uses a copy made when building.
    assert patched.pristine == tree and patched.source.path != tree
    assert OLD in (tree / RPC).read_text()


def test_a_patch_that_does_not_apply_is_one_line_naming_pr_and_file(cache: Path, tree: Path, tmp_path: Path) -> None:
    patch = tmp_path / "pr-4242.diff"
    patch.write_bytes(make_patch(tree, OLD, "HASH_THRESHOLD = 1") if OLD in (tree / RPC).read_text() else b"")
    # Change the line the patch expects, as a newer upstream would.
    text = (tree / RPC).read_text()
    (tree / RPC).write_text(text.replace(OLD, "HASH_THRESHOLD = 11 * 1024 * 1024", 1))
    with pytest.raises(BuildError) as exc:
        plan_build(BuildOptions(source=str(tree), prs=[str(patch)]))
    msg = str(exc.value)
    assert "\n" not in msg
    assert "PR #4242" in msg and f"first failing file {RPC}" in msg and "does not apply cleanly" in msg


def test_cli_exits_non_zero_and_builds_nothing(
    cache: Path, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch = tmp_path / "bad.patch"
    patch.write_bytes(make_patch(tree, "#include", "#include /* x */"))
    (tree / RPC).write_text("nothing like the original\n")
    called: list[Any] = []
    monkeypatch.setattr(build_mod, "_run_logged", lambda *a, **k: called.append(a))
    res = CliRunner().invoke(app, ["engine", "build", "--source", str(tree), "--pr", str(patch)])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert any("bad.patch does not apply cleanly" in ln and RPC in ln for ln in lines), res.output
    assert called == [], "cmake must not run"
    assert not (cache / "engines").exists(), "no engine folder is made"


def test_the_cache_file_is_used_without_network(cache: Path, tree: Path) -> None:
    diff = threshold_patch(tree)
    (patches_dir()).mkdir(parents=True)
    (patches_dir() / "pr-23510.diff").write_bytes(diff)

    def no_network(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"fetched {request.url} although the cache has the diff")

    client = httpx.Client(transport=httpx.MockTransport(no_network))
    plan = plan_build(BuildOptions(source=str(tree), prs=["23510"]), client=client)
    assert plan.patches[0].origin == "cache" and plan.patches[0].pr == 23510


def test_a_missing_diff_is_fetched_once_into_the_cache(cache: Path, tree: Path) -> None:
    diff = threshold_patch(tree)
    seen: list[str] = []

    def github(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        return httpx.Response(200, content=diff)

    client = httpx.Client(transport=httpx.MockTransport(github))
    first = plan_build(BuildOptions(source=str(tree), prs=["#23510"]), client=client)
    again = plan_build(BuildOptions(source=str(tree), prs=["23510"]), client=client)
    assert seen == [PR_DIFF_URL.format(pr=23510)] == ["https://github.com/ggml-org/llama.cpp/pull/23510.diff"]
    assert (patches_dir() / "pr-23510.diff").read_bytes() == diff
    assert first.key == again.key and first.patches[0].origin == "fetched" and again.patches[0].origin == "cache"


def test_a_failed_fetch_says_where_to_put_the_file(cache: Path, tree: Path) -> None:
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(404)))
    with pytest.raises(BuildError) as exc:
        plan_build(BuildOptions(source=str(tree), prs=["99999"]), client=client)
    msg = str(exc.value)
    assert "\n" not in msg and "--pr 99999" in msg and "HTTP 404" in msg
    assert str(patches_dir() / "pr-99999.diff") in msg
    assert not (patches_dir() / "pr-99999.diff").exists()

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route", request=request)

    with pytest.raises(BuildError, match=r"--pr 7: cannot fetch .*save .* as .*pr-7\.diff by hand"):
        plan_build(
            BuildOptions(source=str(tree), prs=["7"]), client=httpx.Client(transport=httpx.MockTransport(refused))
        )


def test_not_a_patch_is_a_usage_error(cache: Path, tree: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"pull request number or a \.patch / \.diff file"):
        plan_build(BuildOptions(source=str(tree), prs=["fix.txt"]))
    with pytest.raises(UsageError, match="does not exist"):
        plan_build(BuildOptions(source=str(tree), prs=[str(tmp_path / "gone.patch")]))


def fake_binaries(monkeypatch: pytest.MonkeyPatch, commands: list[list[str]]) -> None:
    """cmake records its command line; the probes and smoke test of the (absent) binaries pass."""
    names = {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"}
    monkeypatch.setattr(build_mod.shutil, "which", lambda name: "/usr/bin/" + name if name == "cmake" else None)
    monkeypatch.setattr(build_mod, "_run_logged", lambda node, cmd, log, env, progress, what: commands.append(cmd))
    monkeypatch.setattr(build_mod, "find_binaries", lambda bin_dir: names)
    monkeypatch.setattr(build_mod, "_rpath", lambda binary: "$ORIGIN")
    monkeypatch.setattr(build_mod, "probe_server_version", lambda server: {})
    monkeypatch.setattr(build_mod, "probe_rpc_protocol", lambda rpc: "7.0.0")
    monkeypatch.setattr(build_mod, "smoke_with_fallback", lambda *a, **k: (SmokeReport(checks=[]), {}))


def test_build_applies_the_patch_to_a_copy_and_records_it(
    cache: Path, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch = tmp_path / "pr-23510.diff"
    patch.write_bytes(threshold_patch(tree))
    commands: list[list[str]] = []
    fake_binaries(monkeypatch, commands)
    logged: list[str] = []
    engine, built = build_engine(
        BuildOptions(source=str(tree), prs=[str(patch)]),
        lambda e: logged.append(e.message) if isinstance(e, BuildNote) else None,
    )
    assert built
    configure = commands[0]
    src = Path(configure[configure.index("-S") + 1])
    assert (
        src != tree and "HASH_THRESHOLD = 1024 * 1024" in (src / RPC).read_text() and OLD not in (src / RPC).read_text()
    )
    assert OLD in (tree / RPC).read_text(), "the pristine source is never patched"
    sha = resolve_patch(str(patch)).sha256
    assert engine.provenance["patches"] == [{"pr": 23510, "sha256": sha}]
    assert engine.provenance["source"]["patches"] == [{"pr": 23510, "sha256": sha}]
    assert f"splitserve: applied PR #23510 (pr-23510.diff) (sha256 {sha})" in Path(engine.provenance["log"]).read_text()
    assert any("applied PR #23510" in m for m in logged)

    info = CliRunner().invoke(app, ["engine", "info", engine.key, "--json"])
    assert info.exit_code == 0, info.output
    assert json.loads(info.output)["patches"] == [{"pr": 23510, "sha256": sha}]


def test_the_default_engine_stays_the_plain_one(
    cache: Path, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    patch = tmp_path / "pr-23510.diff"
    patch.write_bytes(threshold_patch(tree))
    fake_binaries(monkeypatch, [])
    plain, _ = build_engine(BuildOptions(source=str(tree)))
    record = plain.root / "engine.json"  # built long before the patched one
    record.write_text(json.dumps(json.loads(record.read_text()) | {"built_at": "2000-01-01T00:00:00+00:00"}))
    patched, _ = build_engine(BuildOptions(source=str(tree), prs=[str(patch)]))
    assert plain.root.is_dir() and patched.root.is_dir() and plain.key != patched.key
    assert get_engine().key == plain.key, "a newer patched engine is used only when named"
    assert get_engine(patched.key).key == patched.key
    assert plain.provenance["patches"] == []


def test_two_patches_that_each_apply_but_not_together_build_nothing(
    cache: Path, tree: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = tmp_path / "pr-1.diff", tmp_path / "pr-2.diff"
    first.write_bytes(threshold_patch(tree))
    second.write_bytes(make_patch(tree, OLD, "HASH_THRESHOLD = 2 * 1024 * 1024"))
    commands: list[list[str]] = []
    fake_binaries(monkeypatch, commands)
    with pytest.raises(BuildError) as exc:
        build_engine(BuildOptions(source=str(tree), prs=[str(first), str(second)]))
    msg = str(exc.value)
    assert "\n" not in msg and "PR #2 (pr-2.diff) does not apply on top of the patches before it" in msg
    assert RPC in msg and commands == [], "cmake must not run"
    assert not list((cache / "engines").glob("*/engine.json"))
