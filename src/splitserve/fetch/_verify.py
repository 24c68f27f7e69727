"""Hashes, the download manifest, and ``fetch --verify DIR``.

An LFS file is checked against its sha256 oid; a small file kept in git against its git blob
id (sha1 of ``"blob SIZE\\0"`` + bytes), which is what the hub lists as its ``blobId``.  Each
finished download is recorded in ``DIR/.splitserve-fetch.json`` (repo, commit, size and hash
per file), which ``--verify`` re-checks without the network.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from ._errors import FetchError
from ._select import RemoteFile, split_name

MANIFEST = ".splitserve-fetch.json"
_READ = 8 << 20


def new_hasher(remote: RemoteFile) -> Any:
    """A hashlib object that yields the hub's identity of ``remote`` once fed its bytes."""
    if remote.sha256 is not None:
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b"blob %d\0" % remote.size)
    return h


def expected_digest(remote: RemoteFile) -> str | None:
    """What :func:`new_hasher`'s hexdigest must be; None when the hub gave no hash."""
    return remote.sha256 if remote.sha256 is not None else remote.blob_id


def hash_label(remote: RemoteFile) -> str:
    return "SHA-256" if remote.sha256 is not None else "git blob id"


def hash_file(path: Path, remote: RemoteFile, progress: Callable[[int], None] | None = None) -> str:
    """Stream a file through the hash that identifies it on the hub."""
    h = new_hasher(remote)
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(_READ):
            h.update(chunk)
            if progress is not None:
                progress(len(chunk))
    return str(h.hexdigest())


class ManifestEntry(BaseModel):
    repo_id: str
    commit: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None
    mtime_ns: int | None = None  # of the file when it was verified; a change means re-hash
    corrupt: str | None = None
    """Set by ``--verify`` when the file's hash was wrong (what it found); cleared only when a
    fetch replaces the file (or re-hashes it right), so a second ``--verify`` still fails."""

    def remote(self, path: str) -> RemoteFile:
        return RemoteFile(path, self.size, self.sha256, self.blob_id)


class Manifest(BaseModel):
    version: int = 1
    files: dict[str, ManifestEntry] = {}


class ManifestStore:
    """``DIR/.splitserve-fetch.json``, updated atomically one finished file at a time."""

    def __init__(self, root: Path) -> None:
        self.path = root / MANIFEST
        self._lock = threading.Lock()
        self.data = self._load()

    def _load(self) -> Manifest:
        try:
            return Manifest.model_validate_json(self.path.read_text())
        except FileNotFoundError:
            return Manifest()
        except (ValidationError, ValueError, OSError) as exc:
            raise FetchError(
                f"{self.path}: unreadable manifest ({exc.__class__.__name__}); "
                "delete it and run fetch again to rebuild it"
            ) from None

    def matches(self, remote: RemoteFile, target: Path) -> bool:
        """Whether ``target`` was verified as ``remote`` and has not been touched since."""
        e = self.data.files.get(remote.path)
        if e is None or e.corrupt or e.size != remote.size or e.sha256 != remote.sha256:
            return False
        if remote.sha256 is None and e.blob_id != remote.blob_id:
            return False
        try:
            st = target.stat()
        except OSError:
            return False
        return st.st_size == e.size and st.st_mtime_ns == e.mtime_ns

    def record(self, repo_id: str, commit: str, remote: RemoteFile, target: Path) -> None:
        with self._lock:
            self.data.files[remote.path] = ManifestEntry(
                repo_id=repo_id,
                commit=commit,
                size=remote.size,
                sha256=remote.sha256,
                blob_id=remote.blob_id,
                mtime_ns=target.stat().st_mtime_ns,
            )
            self._write()

    def forget(self, path: str) -> None:
        """Drop a file from the manifest."""
        with self._lock:
            if self.data.files.pop(path, None) is not None:
                self._write()

    def mark_corrupt(self, path: str, detail: str) -> None:
        """Keep a file that failed verification marked as corrupt until a fetch replaces it: the
        next fetch does not trust it, and the next ``--verify`` reports it again."""
        with self._lock:
            entry = self.data.files.get(path)
            if entry is not None:
                entry.corrupt = detail
                self._write()

    def _write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(self.data.model_dump_json(indent=1))
        os.replace(tmp, self.path)


@dataclass
class VerifyItem:
    path: str
    size: int
    status: str  # ok | missing | size | hash
    detail: str = ""


@dataclass
class VerifyReport:
    root: Path
    items: list[VerifyItem] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # incomplete shard sets, leftovers

    @property
    def ok(self) -> bool:
        return not self.problems and all(i.status == "ok" for i in self.items)

    def as_dict(self) -> dict[str, Any]:
        """What ``fetch --verify DIR --json`` prints."""
        return {
            "dir": str(self.root),
            "ok": self.ok,
            "problems": self.problems,
            "files": [asdict(i) for i in self.items],
        }


def verify_dir(root: Path, progress: Callable[[str, int], None] | None = None) -> VerifyReport:
    """Re-hash every file the manifest lists and check the GGUF shard sets are whole.

    A file whose hash is wrong stays marked corrupt in the manifest (later ``--verify`` runs
    report it without re-hashing, and its shard set counts as broken) until running the same
    ``fetch`` again replaces it.
    """
    if not root.is_dir():
        raise FetchError(f"{root}: no such folder; --verify checks a folder made by `splitserve fetch`")
    store = ManifestStore(root)
    if not store.path.is_file():
        raise FetchError(f"{root}: no {MANIFEST}; --verify checks a folder made by `splitserve fetch`")
    report = VerifyReport(root)
    for path, entry in sorted(store.data.files.items()):
        remote = entry.remote(path)
        target = root / path
        if not target.is_file():
            report.items.append(VerifyItem(path, entry.size, "missing", "not on disk"))
            continue
        if entry.corrupt:
            report.items.append(
                VerifyItem(
                    path,
                    entry.size,
                    "hash",
                    f"{entry.corrupt} (found by an earlier --verify; marked corrupt until fetched again)",
                )
            )
            continue
        size = target.stat().st_size
        if size != entry.size:
            report.items.append(VerifyItem(path, entry.size, "size", f"{size} bytes on disk, hub says {entry.size}"))
            continue
        step: Callable[[int], None] | None = None
        if progress is not None:

            def step(n: int, p: str = path) -> None:
                progress(p, n)

        digest = hash_file(target, remote, step)
        want = expected_digest(remote)
        if want is not None and digest != want:
            detail = f"{hash_label(remote)} {digest[:12]}…, hub says {want[:12]}…"
            report.items.append(VerifyItem(path, entry.size, "hash", detail))
            store.mark_corrupt(path, detail)  # the next fetch must replace it, not trust the manifest
        else:
            report.items.append(VerifyItem(path, entry.size, "ok"))
    # shard sets on disk must be whole: every shard there, none of them corrupt
    bad = {i.path for i in report.items if i.status != "ok"}
    shards: dict[str, tuple[int, set[int], set[int]]] = {}
    for p in sorted(root.rglob("*.gguf")):
        rel = p.relative_to(root).as_posix()
        parsed = split_name(rel)
        if parsed:
            prefix, index, count = parsed
            shard = shards.setdefault(prefix, (count, set(), set()))
            shard[1].add(index)
            if rel in bad:
                shard[2].add(index)
    for prefix, (count, seen, corrupt) in sorted(shards.items()):
        missing = sorted(set(range(1, count + 1)) - seen)
        if missing:
            report.problems.append(f"{prefix}: shard(s) {', '.join(map(str, missing))} of {count} missing")
        if corrupt:
            report.problems.append(
                f"{prefix}: shard(s) {', '.join(map(str, sorted(corrupt)))} of {count} corrupt (run fetch again)"
            )
    for p in sorted(root.rglob("*.incomplete")):
        report.problems.append(f"{p.relative_to(root)}: an unfinished download (run fetch again)")
    return report
