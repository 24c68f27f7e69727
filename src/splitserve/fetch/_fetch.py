"""``fetch()``: list, select, check the disk, transfer, verify; the one entry point.

A plan comes first (:func:`plan_fetch`, no bytes moved): the repository's files at one
commit, the selection, and per file whether it is already there (recorded in the manifest
or hashing right), resumable (a partial with a matching state file) or new.  Then the free
disk space is checked against what is left, and :class:`~._transfer.Transfer` moves the bytes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from .._errors import UsageError
from ._errors import DiskSpaceError, FetchError, HubError
from ._hub import HfHub, Hub, Resolved
from ._select import RemoteFile, ShardSet, incomplete_sets, select_files, shard_sets
from ._state import PART_SIZE, FileIdentity, load_state, partial_path, plan_segments, remove_state
from ._transfer import Events, FileJob, Transfer, TransferOptions
from ._verify import ManifestStore, expected_digest, hash_file, hash_label

DISK_RESERVE = 256 << 20  # keep this much free beyond what the download needs


@dataclass
class FetchOptions:
    """What to fetch and how (the ``splitserve fetch`` arguments)."""

    repo_id: str
    revision: str | None = None
    includes: list[str] = field(default_factory=list)
    quants: list[str] = field(default_factory=list)
    dir: Path | None = None
    connections: int = 16
    stall_timeout: float = 60.0
    retries: int = 10
    backoff: float = 1.0
    part_size: int = PART_SIZE
    token: str | None = None  #: a hub token (default: HF_TOKEN or the stored login)


@dataclass
class PlannedFile:
    remote: RemoteFile
    final: Path
    action: str  # skip | resume | new | replace
    have: int = 0  # bytes already on disk (a partial's done bytes, or the whole file)
    record: bool = False  # on disk and hashing right, but not yet in the manifest


@dataclass
class FetchPlan:
    repo_id: str
    revision: str
    commit: str
    root: Path
    files: list[PlannedFile]
    sets: list[ShardSet]
    warnings: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(f.remote.size for f in self.files)

    @property
    def todo(self) -> int:
        return sum(f.remote.size - f.have for f in self.files if f.action != "skip")

    def as_dict(self) -> dict[str, Any]:
        """What ``fetch --dry-run --json`` prints: each file with its action and the bytes on disk."""
        return {
            "repo_id": self.repo_id,
            "commit": self.commit,
            "dir": str(self.root),
            "total": self.total,
            "todo": self.todo,
            "files": [
                {"path": f.remote.path, "size": f.remote.size, "action": f.action, "have": f.have} for f in self.files
            ],
        }


@dataclass
class FileOutcome:
    path: str
    size: int
    status: str  # skipped | fetched | refetched | failed
    message: str = ""


@dataclass
class FetchResult:
    plan: FetchPlan
    outcomes: list[FileOutcome]
    seconds: float  # the whole fetch: resolving, transfer, hashing, renames
    fetched_bytes: int  # bytes of the files completed in this run (resumed parts excluded)
    transfer_seconds: float = 0.0  # first byte received to last byte received
    moved_bytes: int = 0  # bytes received and written (re-fetches included)

    @property
    def models(self) -> list[Path]:
        """The file to pass to ``llama-server -m`` for each shard set fetched."""
        return [self.plan.root / s.first for s in self.plan.sets if not s.is_mmproj]

    def as_dict(self) -> dict[str, Any]:
        """What ``fetch --json`` prints (also when the fetch failed): the figures and each file's outcome."""
        return {
            "repo_id": self.plan.repo_id,
            "commit": self.plan.commit,
            "dir": str(self.plan.root),
            "seconds": round(self.seconds, 3),
            "fetched_bytes": self.fetched_bytes,
            "transfer_seconds": round(self.transfer_seconds, 3),
            "moved_bytes": self.moved_bytes,
            "files": [asdict(o) for o in self.outcomes],
            "models": [str(p) for p in self.models],
        }


def _safe_target(root: Path, path: str) -> Path:
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise HubError(f"the hub listed a file outside the repository: {path!r}")
    return root / Path(*p.parts)


def _identity(repo_id: str, commit: str, remote: RemoteFile) -> FileIdentity:
    return FileIdentity(
        repo_id=repo_id, commit=commit, path=remote.path, size=remote.size, sha256=remote.sha256, blob_id=remote.blob_id
    )


def plan_fetch(
    options: FetchOptions, hub: Hub | None = None, events: Events | None = None, check_existing: bool = True
) -> FetchPlan:
    """List and select; decide per file what is left to do.  Moves no bytes, writes nothing."""
    if options.connections < 1 or options.connections > 256:
        raise UsageError(f"--connections {options.connections}: use 1 to 256")
    if options.stall_timeout <= 0:
        raise UsageError(f"--stall-timeout {options.stall_timeout:g}: give a number of seconds above 0")
    if options.retries < 0:
        raise UsageError(f"--retries {options.retries}: give 0 or more")
    if options.dir is not None and options.dir.exists() and not options.dir.is_dir():
        raise UsageError(f"--dir {options.dir}: that is a file, not a folder; choose another --dir")
    hub = hub or HfHub(token=options.token)
    events = events or Events()
    listing = hub.list_files(options.repo_id, options.revision)
    chosen = select_files(listing.files, options.includes, options.quants)
    if not chosen:
        raise FetchError(f"{options.repo_id}: nothing to fetch (the repository lists no files)")
    root = (options.dir or Path.cwd() / options.repo_id.split("/")[-1]).resolve()
    warnings = [
        f"{s.name}: only {len(s.files)} of its {s.count} shards are selected; llama.cpp needs all of them"
        for s in incomplete_sets(chosen)
    ]
    store = ManifestStore(root)
    planned = []
    for remote in chosen:
        final = _safe_target(root, remote.path)
        ident = _identity(listing.repo_id, listing.commit, remote)
        if final.is_file() and check_existing:
            if store.matches(remote, final):
                planned.append(PlannedFile(remote, final, "skip", remote.size))
                continue
            if final.stat().st_size == remote.size and expected_digest(remote):
                events.file_state(remote.path, "checking")
                if hash_file(final, remote) == expected_digest(remote):
                    planned.append(PlannedFile(remote, final, "skip", remote.size, record=True))
                    continue
            segs = load_state(final, ident)
            have = sum(s.done for s in segs) if segs else 0
            planned.append(PlannedFile(remote, final, "replace", have))
            continue
        segs = load_state(final, ident) if final.parent.is_dir() else None
        if segs is not None:
            planned.append(PlannedFile(remote, final, "resume", sum(s.done for s in segs)))
        else:
            planned.append(PlannedFile(remote, final, "new"))
    return FetchPlan(
        listing.repo_id,
        listing.revision,
        listing.commit,
        root,
        planned,
        [s for s in shard_sets(chosen) if s.complete],
        warnings,
    )


def check_disk(plan: FetchPlan) -> None:
    """Raise DiskSpaceError when what is left to fetch does not fit on the target disk."""
    probe = plan.root
    while not probe.exists():
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    need = plan.todo
    if need and need + DISK_RESERVE > free:
        raise DiskSpaceError(
            f"{plan.root}: {_gib(need)} still to fetch but only {_gib(free)} free "
            "on that disk; free some space or choose another --dir"
        )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


def fetch(
    options: FetchOptions, hub: Hub | None = None, events: Events | None = None, plan: FetchPlan | None = None
) -> FetchResult:
    """Fetch the selected files into ``options.dir``; raise FetchError if any failed."""
    hub = hub or HfHub(token=options.token)
    events = events or Events()
    t0 = time.monotonic()
    plan = plan or plan_fetch(options, hub, events)
    for w in plan.warnings:
        events.note(w)
    check_disk(plan)
    plan.root.mkdir(parents=True, exist_ok=True)
    with _dir_lock(plan.root):
        return _fetch_locked(options, hub, events, plan, t0)


LOCK = ".splitserve-fetch.lock"


@contextlib.contextmanager
def _dir_lock(root: Path) -> Iterator[None]:
    """One fetch per folder at a time (the kernel drops the lock if the process dies)."""
    fd = os.open(root / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            raise FetchError(
                f"{root}: another fetch (pid {other}) is writing into this folder; wait for it or choose another --dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _fetch_locked(options: FetchOptions, hub: Hub, events: Events, plan: FetchPlan, t0: float) -> FetchResult:
    store = ManifestStore(plan.root)
    topt = TransferOptions(
        connections=options.connections,
        stall_timeout=options.stall_timeout,
        retries=options.retries,
        backoff=options.backoff,
        part_size=options.part_size,
    )
    jobs: list[FileJob] = []
    outcomes: dict[str, FileOutcome] = {}
    for pf in plan.files:
        if pf.action == "skip":
            if pf.record:
                store.record(plan.repo_id, plan.commit, pf.remote, pf.final)
            outcomes[pf.remote.path] = FileOutcome(
                pf.remote.path, pf.remote.size, "skipped", "already there and verified"
            )
            continue
        ident = _identity(plan.repo_id, plan.commit, pf.remote)
        segs = load_state(pf.final, ident)
        if segs is None:
            if partial_path(pf.final).exists():
                events.note(
                    f"{pf.remote.path}: the partial download on disk is of another "
                    "version of the file (or its state is unreadable); starting it over"
                )
            remove_state(pf.final)
            segs = plan_segments(pf.remote.size, options.connections, options.part_size)
        pf.final.parent.mkdir(parents=True, exist_ok=True)

        def resolve(remote: RemoteFile = pf.remote) -> Resolved:
            return _resolve_checked(hub, plan, remote)

        def on_done(job: FileJob) -> None:
            store.record(plan.repo_id, plan.commit, job.remote, job.final)

        jobs.append(FileJob(pf.remote, pf.final, ident, resolve, segs, on_done))
    before = {j.path: sum(s.done for s in j.segments) for j in jobs}
    transfer = Transfer(jobs, topt, events)
    transfer.run()
    fetched = 0
    for job in jobs:
        fetched += job.remote.size - before[job.path] if job.status == "done" else 0
        if job.status == "done":
            status = "refetched" if job.refetches else "fetched"
            msg = (
                f"{hash_label(job.remote)} was wrong the first time; re-fetched and verified"
                if job.refetches
                else "verified"
            )
            outcomes[job.path] = FileOutcome(job.path, job.remote.size, status, msg)
        else:
            outcomes[job.path] = FileOutcome(job.path, job.remote.size, "failed", job.error or "interrupted")
    span = (
        transfer.last_byte - transfer.first_byte
        if transfer.first_byte is not None and transfer.last_byte is not None
        else 0.0
    )
    result = FetchResult(
        plan,
        [outcomes[pf.remote.path] for pf in plan.files],
        time.monotonic() - t0,
        fetched,
        span,
        transfer.bytes_moved,
    )
    failed = [o for o in result.outcomes if o.status == "failed"]
    if transfer.fatal:
        raise FetchError(transfer.fatal)
    if failed:
        raise FetchFailed(result, f"{len(failed)} of {len(result.outcomes)} files failed; first: {failed[0].message}")
    return result


class FetchFailed(FetchError):
    """Some files failed; ``result`` says which (the others are done and verified)."""

    def __init__(self, result: FetchResult, message: str) -> None:
        super().__init__(message)
        self.result = result


def _resolve_checked(hub: Hub, plan: FetchPlan, remote: RemoteFile) -> Resolved:
    r = hub.resolve(plan.repo_id, plan.commit, remote.path)
    if r.size is not None and r.size != remote.size:
        raise HubError(
            f"{remote.path}: the hub lists {remote.size} bytes but its metadata says {r.size}; try again later"
        )
    if remote.sha256 and r.etag and len(r.etag) == 64 and r.etag != remote.sha256:
        raise HubError(f"{remote.path}: the hub's listing and metadata disagree on the SHA-256; try again later")
    return r


def partial_files(root: Path) -> list[Path]:
    """Unfinished downloads under ``root``."""
    return sorted(p for p in root.rglob("*.incomplete") if os.path.isfile(p))


__all__ = [
    "FetchFailed",
    "FetchOptions",
    "FetchPlan",
    "FetchResult",
    "FileOutcome",
    "PlannedFile",
    "check_disk",
    "fetch",
    "partial_files",
    "plan_fetch",
]
