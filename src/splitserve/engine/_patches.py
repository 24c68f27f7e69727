"""Upstream pull requests carried as patches on top of the pinned source (``engine build --pr``).

A patch is a unified diff: a local ``.patch``/``.diff`` file, or the diff of a llama.cpp pull
request, taken from the patch cache (``<cache>/patches/pr-N.diff``) or fetched once from GitHub
with httpx into that cache. Each is checked against the unpacked source with ``git apply --check``
before anything is built; the patched tree is a copy next to the pristine one (which stays
untouched), and the patches' digests join the source identity, so they change the engine cache
key and are recorded in the provenance.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx

from .._errors import BuildError, SplitserveError, UsageError
from .._node import run_command
from .._paths import cache_dir, sources_dir
from ._source import SourceTree

PR_DIFF_URL = "https://github.com/ggml-org/llama.cpp/pull/{pr}.diff"
PATCH_SUFFIXES = (".patch", ".diff")
APPLIED_MARKER = ".splitserve-patches.json"

Log = Callable[[str], None]


@dataclass(frozen=True)
class Patch:
    """One diff to apply: where it came from and its bytes' digest."""

    label: str
    """``PR #N`` or the file name, for messages."""
    path: Path
    sha256: str
    pr: int | None = None
    origin: str = "file"
    """``file`` (given by path), ``cache`` (the patch cache) or ``fetched`` (downloaded now)."""

    def record(self) -> dict[str, Any]:
        """The provenance entry (and the cache-key input) of this patch."""
        out: dict[str, Any] = {"pr": self.pr, "sha256": self.sha256}
        if self.pr is None:
            out["file"] = self.path.name
        return out


def patches_dir() -> Path:
    """``<cache>/patches``: ``pr-N.diff`` files, fetched or put there by hand."""
    return cache_dir() / "patches"


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _pr_number(spec: str) -> int | None:
    m = re.fullmatch(r"#?(\d+)", spec.strip())
    return int(m.group(1)) if m else None


def is_patch_file(spec: str | int) -> bool:
    return isinstance(spec, str) and _pr_number(spec) is None


def fetch_pr_diff(pr: int, dest: Path, client: httpx.Client | None = None) -> None:
    """Download pull request ``pr``'s diff from GitHub into ``dest`` (written whole or not at all)."""
    url = PR_DIFF_URL.format(pr=pr)
    hint = f"save {url} as {dest} by hand"
    own = client is None
    http = client or httpx.Client(timeout=60.0, follow_redirects=True)
    try:
        response = http.get(url)
    except httpx.HTTPError as exc:
        raise BuildError(f"--pr {pr}: cannot fetch {url} ({exc.__class__.__name__}: {exc}); {hint}") from exc
    finally:
        if own:
            http.close()
    if response.status_code != 200:
        raise BuildError(f"--pr {pr}: fetching {url} gave HTTP {response.status_code}; {hint}")
    if b"diff --git" not in response.content[:65536] and not response.content.startswith(b"---"):
        raise BuildError(f"--pr {pr}: {url} did not return a diff; {hint}")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".partial")
    tmp.write_bytes(response.content)
    tmp.rename(dest)


def resolve_patch(spec: str | int, client: httpx.Client | None = None, log: Log = lambda _m: None) -> Patch:
    """``N``/``#N`` (a llama.cpp pull request: the patch cache, else GitHub) or a ``.patch``/``.diff`` file."""
    pr = spec if isinstance(spec, int) else _pr_number(spec)
    if pr is None:
        path = Path(str(spec)).expanduser()
        if not path.name.endswith(PATCH_SUFFIXES):
            raise UsageError(f"--pr {spec!r}: give a pull request number or a .patch / .diff file")
        if not path.is_file():
            raise UsageError(f"--pr {spec!r}: {path} does not exist")
        m = re.search(r"(?:^|pr-?)(\d+)\.(?:patch|diff)$", path.name)
        number = int(m.group(1)) if m else None
        label = f"PR #{number} ({path.name})" if number else path.name
        return Patch(label=label, path=path.resolve(), sha256=_digest(path), pr=number, origin="file")
    cached = patches_dir() / f"pr-{pr}.diff"
    origin = "cache"
    if not cached.is_file():
        log(f"fetching the diff of pull request #{pr} from GitHub")
        fetch_pr_diff(pr, cached, client)
        origin = "fetched"
    return Patch(label=f"PR #{pr}", path=cached, sha256=_digest(cached), pr=pr, origin=origin)


def _git_env(tree: Path) -> dict[str, str]:
    # Keep git from treating an enclosing repository (a cache under a checkout) as the tree's.
    return {"GIT_CEILING_DIRECTORIES": str(tree.parent)}


def _first_failing_file(stderr: str) -> str:
    for pattern in (
        r"error: patch failed: (.+?):\d+",
        r"error: (.+?): (?:patch does not apply|No such file or directory|does not exist in index|already exists)",
    ):
        m = re.search(pattern, stderr)
        if m:
            return m.group(1)
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return lines[0].removeprefix("error: ") if lines else "unknown file"


def _git_apply(tree: Path, patch: Path, check: bool) -> subprocess.CompletedProcess[str]:
    cmd = ["git", "apply", "--whitespace=nowarn", *(["--check"] if check else []), str(patch)]
    try:
        return run_command(cmd, cwd=tree, env=_git_env(tree), timeout=300.0)
    except SplitserveError as exc:
        raise BuildError(f"git apply {patch.name}: {exc}") from None


def check_patch(tree: Path, patch: Patch, base: str) -> None:
    """``git apply --check`` of one patch against ``tree``; a one-line error when it does not apply."""
    proc = _git_apply(tree, patch.path, check=True)
    if proc.returncode != 0:
        raise BuildError(
            f"--pr: {patch.label} does not apply cleanly to {base}: first failing file "
            f"{_first_failing_file(proc.stderr)}; drop it or rebase the patch (nothing was built)"
        )


def patched_source(source: SourceTree, patches: list[Patch]) -> SourceTree:
    """The source with ``patches`` applied: identity and slug name them; the tree is a copy
    (made by :func:`prepare_patched_tree`) next to the pristine one."""
    records = [p.record() for p in patches]
    identity = dict(source.identity, patches=records)
    digest = hashlib.sha256(json.dumps(records, sort_keys=True).encode()).hexdigest()[:12]
    tag = "+".join(f"pr{p.pr}" if p.pr is not None else "patch" for p in patches)
    return replace(
        source,
        path=sources_dir() / "patched" / f"{source.slug}+{digest}" / source.path.name,
        identity=identity,
        slug=f"{source.slug}+{tag}",
    )


def plan_patches(
    source: SourceTree, specs: list[str | int], client: httpx.Client | None = None, log: Log = lambda _m: None
) -> tuple[SourceTree, list[Patch]]:
    """Resolve and check every patch against ``source``; returns the patched source (not yet
    on disk) and the patches. Raises before anything is built when one does not apply."""
    if not specs:
        return source, []
    patches = [resolve_patch(s, client, log) for s in specs]
    seen: set[str] = set()
    for p in patches:
        if p.sha256 in seen:
            raise UsageError(f"--pr: {p.label} is given twice")
        seen.add(p.sha256)
    base = source.slug
    for p in patches:
        check_patch(source.path, p, base)
        log(f"{p.label} applies cleanly to {base} (sha256 {p.sha256[:12]}, from the {p.origin})")
    return patched_source(source, patches), patches


def prepare_patched_tree(pristine: Path, patched: SourceTree, patches: list[Patch], log: Log) -> list[str]:
    """Copy ``pristine`` to ``patched.path`` and apply ``patches`` in order (once: a marker
    records what was applied). Returns the lines saying which were applied."""
    lines = [f"applied {p.label} (sha256 {p.sha256})" for p in patches]
    dest = patched.path
    marker = dest / APPLIED_MARKER
    records = [p.record() for p in patches]
    if marker.is_file() and json.loads(marker.read_text()) == records:
        return lines
    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    log(f"copying the source to {dest} to apply {len(patches)} patch(es)")
    shutil.copytree(pristine, dest, symlinks=True, ignore=shutil.ignore_patterns("build", ".git"))
    for p, line in zip(patches, lines, strict=True):
        proc = _git_apply(dest, p.path, check=False)
        if proc.returncode != 0:
            shutil.rmtree(dest, ignore_errors=True)
            raise BuildError(
                f"--pr: {p.label} does not apply on top of the patches before it: first failing file "
                f"{_first_failing_file(proc.stderr)} (nothing was built)"
            )
        log(line)
    marker.write_text(json.dumps(records))
    return lines
