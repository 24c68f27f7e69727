"""Parallel ranged HTTP transfer of many files, with resume, stall detection and hashing.

``connections`` worker threads share one httpx client and take segments (byte ranges) from
the files in order; a worker whose queue runs dry takes half of the largest range still in
flight, so no connection idles at the end of a file.  Each worker streams its response
straight to the partial file with ``os.pwrite`` (nothing bigger than one socket read is held
in memory).  A read that sees no byte for ``stall_timeout`` seconds drops the connection and
the range is retried with exponential backoff and jitter; 5xx and 429 are retried the same
way; 401/403 (an expired presigned URL) and 416 make the file re-resolve its URL first.

Per file a hasher thread trails the writers, hashing the gap-free prefix already on disk,
so the SHA-256 is ready moments after the last byte.  A saver thread writes each file's
state (after ``fdatasync`` of the data it describes) when a range finishes and once a second.
A finished file whose size and hash match is renamed atomically to its final name; one that
does not is fetched once more from scratch, and fails if it is wrong again.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from ._errors import HubError
from ._hub import Resolved
from ._select import RemoteFile
from ._state import (
    PART_SIZE,
    FileIdentity,
    Segment,
    partial_path,
    plan_segments,
    remove_state,
    save_state,
    state_path,
    written_prefix,
)
from ._verify import expected_digest, hash_label, new_hasher

MiB = 1 << 20
SPLIT_MARGIN = 2 * MiB  # a split point lies this far beyond the writer (> one socket read)
SPLIT_MIN = 4 * MiB  # neither half of a split is smaller
_HASH_READ = 8 * MiB
_SOCKET_READ = 256 * 1024


def _widen_socket_reads() -> None:
    """Let httpcore read 256 KiB per recv instead of 64 KiB.

    The per-read Python cost (h11 event, chunk, pwrite) dominates the client's CPU: on a
    2-core box one stream went from ~200 to ~550 MiB/s.  httpcore has no option for it, only
    this class attribute; a larger maximum read is harmless to any other client in the process.
    """
    try:
        from httpcore._sync.http11 import HTTP11Connection
    except ImportError:  # another httpcore layout: keep its default
        return
    if getattr(HTTP11Connection, "READ_NUM_BYTES", _SOCKET_READ) < _SOCKET_READ:
        HTTP11Connection.READ_NUM_BYTES = _SOCKET_READ


@dataclass
class TransferOptions:
    connections: int = 16
    stall_timeout: float = 60.0  # seconds without a byte before a connection is dropped
    retries: int = 10  # failed attempts in a row, on one range, before its file fails
    backoff: float = 1.0  # first retry delay; doubles each time, with jitter
    backoff_max: float = 30.0
    part_size: int = PART_SIZE
    save_interval: float = 1.0
    refetch_on_mismatch: int = 1  # whole-file refetches after a hash mismatch


class Events:
    """Progress callbacks; the default does nothing.  Called from worker threads."""

    def file_started(self, path: str, size: int, resumed: int) -> None: ...
    def advance(self, path: str, nbytes: int) -> None: ...
    def file_state(self, path: str, state: str, detail: str = "") -> None: ...
    def note(self, message: str) -> None: ...


class _Retry(Exception):
    def __init__(self, reason: str, refresh: bool = False, wait: float | None = None) -> None:
        super().__init__(reason)
        self.reason, self.refresh, self.wait = reason, refresh, wait


class _Fatal(Exception):
    pass


@dataclass
class FileJob:
    """One file to transfer: its remote identity, where it goes, and its segments."""

    remote: RemoteFile
    final: Path
    identity: FileIdentity
    resolve: Callable[[], Resolved]
    segments: list[Segment]
    on_done: Callable[[FileJob], None] | None = None
    # filled while running
    status: str = "pending"  # pending | active | done | failed
    error: str | None = None
    refetches: int = 0
    fd: int = -1
    digest: str | None = None
    hashed: int = 0
    dirty: bool = False
    closed: bool = False
    _url: Resolved | None = None
    _gen: int = 0
    _url_lock: threading.Lock = field(default_factory=threading.Lock)
    _save_lock: threading.Lock = field(default_factory=threading.Lock)
    _open_lock: threading.Lock = field(default_factory=threading.Lock)
    _progress: threading.Event = field(default_factory=threading.Event)

    @property
    def path(self) -> str:
        return self.remote.path

    @property
    def terminal(self) -> bool:
        return self.status in ("done", "failed")

    def url(self) -> tuple[Resolved, int]:
        with self._url_lock:
            if self._url is None:
                self._url = self.resolve()
                self._gen += 1
            return self._url, self._gen

    def refresh(self, gen: int) -> None:
        """Resolve a new URL unless another worker already did since ``gen``."""
        with self._url_lock:
            if gen == self._gen:
                self._url = None


class Transfer:
    """Runs a list of :class:`FileJob` to completion on ``connections`` connections."""

    def __init__(
        self,
        jobs: list[FileJob],
        options: TransferOptions,
        events: Events | None = None,
        client: httpx.Client | None = None,
    ) -> None:
        self.jobs = jobs
        self.opt = options
        self.events = events or Events()
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._stop = threading.Event()
        self._poke = threading.Event()
        self._threads: list[threading.Thread] = []
        self._hashers: list[threading.Thread] = []
        n = max(1, options.connections)
        _widen_socket_reads()
        self.client = client or httpx.Client(
            timeout=httpx.Timeout(30.0, read=options.stall_timeout),
            limits=httpx.Limits(max_connections=n, max_keepalive_connections=n),
            follow_redirects=True,
        )
        self.fatal: str | None = None
        self.first_byte: float | None = None  # time.monotonic() of the first and last byte
        self.last_byte: float | None = None
        self.bytes_moved = 0

    # -- driving -----------------------------------------------------------------------------
    def run(self) -> None:
        """Transfer every job; returns when all are done or failed (see each job's status)."""
        for job in self.jobs:
            if not any(not s.finished for s in job.segments):
                self._activate(job)
        saver = threading.Thread(target=self._saver, name="fetch-saver", daemon=True)
        saver.start()
        self._threads = [
            threading.Thread(target=self._worker, name=f"fetch-{i}", daemon=True)
            for i in range(max(1, self.opt.connections))
        ]
        for t in self._threads:
            t.start()
        try:
            for t in self._threads:
                while t.is_alive():
                    t.join(0.2)
            for h in list(self._hashers):
                while h.is_alive():
                    h.join(0.2)
        except BaseException:  # Ctrl-C: stop soon, keep what is on disk
            self._stop.set()
            with self._cond:
                self._cond.notify_all()
            deadline = time.monotonic() + 3.0
            for t in self._threads + self._hashers:
                t.join(max(0.0, deadline - time.monotonic()))
            raise
        finally:
            self._stop.set()
            self._poke.set()
            saver.join(10)
            self._save_all(final=True)  # claims only bytes already written, threads or not
            if not any(t.is_alive() for t in self._threads + self._hashers):
                # a thread still blocked in a read could otherwise write into a reused fd
                for job in self.jobs:
                    if job.fd >= 0 and not job.closed:
                        os.close(job.fd)
                        job.fd = -1
                self.client.close()

    def stop(self) -> None:
        self._stop.set()

    def _activate(self, job: FileJob) -> None:
        """Open the partial file (sparse, full size) and start its hasher (once)."""
        with job._open_lock:
            if job.status != "pending":
                return
            part = partial_path(job.final)
            part.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(part, os.O_RDWR | os.O_CREAT, 0o644)
            if os.fstat(fd).st_size != job.remote.size:
                os.ftruncate(fd, job.remote.size)
            job.fd = fd
            job.dirty = True
            job.status = "active"
        self.events.file_started(job.path, job.remote.size, sum(s.done for s in job.segments))
        self._start_hasher(job)

    def _start_hasher(self, job: FileJob) -> None:
        h = threading.Thread(target=self._hash, args=(job,), name=f"hash-{job.path}", daemon=True)
        self._hashers.append(h)
        h.start()

    # -- scheduling --------------------------------------------------------------------------
    def _next(self) -> tuple[FileJob, Segment] | None:
        """The next range to work on, or None when every job is done or failed."""
        with self._cond:
            while not self._stop.is_set():
                for job in self.jobs:
                    if job.terminal:
                        continue
                    for seg in job.segments:
                        if not seg.active and not seg.finished:
                            seg.active = True
                            return job, seg
                stolen = self._split()
                if stolen is not None:
                    return stolen
                if all(j.terminal for j in self.jobs):
                    return None
                self._cond.wait(0.5)
            return None

    def _split(self) -> tuple[FileJob, Segment] | None:
        """Take the back half of the biggest range in flight (caller holds the lock)."""
        best: tuple[FileJob, Segment] | None = None
        for job in self.jobs:
            if job.terminal:
                continue
            for seg in job.segments:
                if seg.active and (best is None or seg.remaining > best[1].remaining):
                    best = (job, seg)
        if best is None:
            return None
        job, seg = best
        if seg.remaining < 2 * SPLIT_MIN + SPLIT_MARGIN:
            return None
        mid = seg.pos + SPLIT_MARGIN + (seg.remaining - SPLIT_MARGIN) // 2
        new = Segment(mid, seg.end, 0, active=True)
        seg.end = mid
        job.segments.insert(job.segments.index(seg) + 1, new)
        job.dirty = True
        return job, new

    def _worker(self) -> None:
        while True:
            work = self._next()
            if work is None:
                return
            job, seg = work
            if job.status == "pending":
                try:
                    self._activate(job)
                except OSError as exc:
                    self._fail(job, f"cannot write {partial_path(job.final)}: {exc.strerror}")
            try:
                if not job.terminal:
                    self._run_segment(job, seg)
            finally:
                with self._cond:
                    seg.active = False
                    job.dirty = True
                    self._cond.notify_all()
                self._poke.set()
                job._progress.set()

    def _fail(self, job: FileJob, message: str) -> None:
        with self._cond:
            if job.terminal:
                return
            job.status, job.error = "failed", message
            self._cond.notify_all()
        self.events.file_state(job.path, "failed", message)

    # -- one range ---------------------------------------------------------------------------
    def _run_segment(self, job: FileJob, seg: Segment) -> None:
        failures = 0
        refreshes = 0
        while not self._stop.is_set():
            with self._lock:
                if seg.finished or job.terminal:
                    return
                before = seg.pos
            try:
                resolved, gen = job.url()
                self._get(job, seg, resolved)
                continue  # finished or shrunk: the loop head decides
            except HubError as exc:
                self._fail(job, str(exc))
                return
            except _Fatal as exc:
                self._fail(job, f"{job.path}: {exc}")
                return
            except OSError as exc:  # writing the partial file
                self._fail(job, f"{partial_path(job.final)}: {exc.strerror or exc}")
                return
            except _Retry as exc:
                retry = exc
            if seg.pos > before:
                failures = refreshes = 0
            if retry.refresh:
                job.refresh(gen)
                refreshes += 1
                if refreshes == 1:  # a fresh URL right away; a second refusal counts as a failure
                    self.events.note(f"{job.path}: {retry.reason}; asking the hub for a fresh URL")
                    continue
            failures += 1
            if failures > self.opt.retries:
                self._fail(
                    job,
                    f"{job.path}: the range at byte {seg.pos} failed "
                    f"{failures} times in a row, last: {retry.reason}; run the same "
                    "command again to resume",
                )
                return
            delay = min(self.opt.backoff_max, self.opt.backoff * 2 ** (failures - 1))
            delay = delay * (0.5 + random.random() / 2)
            if retry.wait is not None:
                delay = max(delay, min(retry.wait, self.opt.backoff_max))
            self.events.note(
                f"{job.path}: {retry.reason} at byte {seg.pos}; retry {failures}/{self.opt.retries} in {delay:.1f}s"
            )
            self._stop.wait(delay)

    def _get(self, job: FileJob, seg: Segment, resolved: Resolved) -> None:
        with self._lock:
            start, end = seg.pos, seg.end
        size = job.remote.size
        headers = dict(resolved.headers)
        headers["Range"] = f"bytes={start}-{end - 1}"
        try:
            with self.client.stream("GET", resolved.url, headers=headers) as r:
                self._check(r, start, size)
                self._write(job, seg, r)
        except httpx.ReadTimeout:
            raise _Retry(f"stalled (no byte for {self.opt.stall_timeout:g}s)") from None
        except httpx.TransportError as exc:
            raise _Retry(f"connection lost ({type(exc).__name__})") from None
        with self._lock:
            if not seg.finished and seg.pos < end:
                raise _Retry("response ended early")

    def _check(self, r: httpx.Response, start: int, size: int) -> None:
        code = r.status_code
        if code in (401, 403):
            raise _Retry(f"storage refused the URL (HTTP {code}, expired?)", refresh=True)
        if code == 404:
            raise _Retry("storage answered 404", refresh=True)
        if code == 416:
            raise _Retry("storage answered 416 (range not satisfiable)", refresh=True)
        if code == 429 or code >= 500:
            wait = r.headers.get("Retry-After")
            raise _Retry(f"storage answered HTTP {code}", wait=float(wait) if wait and wait.isdigit() else None)
        if code == 206:
            cr = r.headers.get("Content-Range", "")
            try:
                _, _, rest = cr.partition(" ")
                span, _, total = rest.partition("/")
                first = int(span.split("-")[0])
            except ValueError:
                raise _Retry(f"bad Content-Range {cr!r}") from None
            if total.isdigit() and int(total) != size:
                raise _Fatal(
                    f"storage says the file has {total} bytes, the hub says {size}; the repository changed? fetch again"
                )
            if first != start:
                raise _Retry(f"storage sent bytes from {first}, asked for {start}")
        elif code == 200:
            if start != 0:
                raise _Retry("storage ignored the Range header")
        else:
            raise _Retry(f"storage answered HTTP {code}")

    def _write(self, job: FileJob, seg: Segment, r: httpx.Response) -> None:
        fd = job.fd
        for chunk in r.iter_raw():
            view = memoryview(chunk)
            off = 0
            while off < len(view):
                with self._lock:
                    pos, limit = seg.pos, seg.end
                    if job.terminal or self._stop.is_set():
                        return
                if pos >= limit:
                    return  # the range was split and this half is done
                n = min(len(view) - off, limit - pos, SPLIT_MARGIN)
                wrote = os.pwrite(fd, view[off : off + n], pos)
                off += wrote
                now = time.monotonic()
                with self._lock:
                    seg.done += wrote
                    job.dirty = True
                    finished = seg.finished
                    self.bytes_moved += wrote
                    if self.first_byte is None:
                        self.first_byte = now
                    self.last_byte = now
                if finished:
                    self._poke.set()  # save the state now
                    job._progress.set()  # and let the hasher look
                self.events.advance(job.path, wrote)
            with self._lock:
                if seg.finished:
                    return

    # -- hashing and finishing ---------------------------------------------------------------
    def _hash(self, job: FileJob) -> None:
        h = new_hasher(job.remote)
        pos = 0
        size = job.remote.size
        while not self._stop.is_set() and not job.terminal:
            job._progress.clear()
            with self._lock:
                upto = written_prefix(job.segments)
                all_done = all(s.finished for s in job.segments)
            if pos >= size and all_done:
                break
            if upto - pos < _HASH_READ and not (all_done and upto > pos):
                # wait for a worthwhile stretch (or a finished range) instead of per socket read
                job._progress.wait(0.1)
                continue
            while pos < upto and not self._stop.is_set():
                data = os.pread(job.fd, min(_HASH_READ, upto - pos), pos)
                if not data:
                    break
                h.update(data)
                pos += len(data)
                job.hashed = pos
        else:
            return
        job.digest = str(h.hexdigest())
        self._finish(job)

    def _finish(self, job: FileJob) -> None:
        want = expected_digest(job.remote)
        size_ok = os.fstat(job.fd).st_size == job.remote.size
        if size_ok and (want is None or job.digest == want):
            with job._save_lock:
                job.closed = True
                os.fsync(job.fd)
                os.close(job.fd)
                job.fd = -1
                os.replace(partial_path(job.final), job.final)
                try:
                    state_path(job.final).unlink()
                except FileNotFoundError:
                    pass
                _fsync_dir(job.final.parent)
            with self._cond:
                job.status = "done"
                self._cond.notify_all()
            if job.on_done is not None:
                job.on_done(job)
            self.events.file_state(job.path, "done")
            return
        got = f"{job.digest[:12]}…" if job.digest else "?"
        what = (
            f"{hash_label(job.remote)} mismatch (got {got}, hub says {want[:12]}…)"
            if size_ok and want
            else "size mismatch"
        )
        if job.refetches >= self.opt.refetch_on_mismatch:
            self._fail(
                job, f"{job.path}: {what} again after a re-fetch; the storage may be serving bad data, try again later"
            )
            with job._save_lock:
                job.closed = True
                os.close(job.fd)
                job.fd = -1
                remove_state(job.final)
            return
        self.events.note(f"{job.path}: {what}; re-fetching this file")
        self.events.file_state(job.path, "refetch", what)
        with self._cond:
            job.refetches += 1
            job.segments = plan_segments(job.remote.size, self.opt.connections, self.opt.part_size)
            job.digest, job.hashed, job.dirty = None, 0, True
            job.status = "active"
            self._cond.notify_all()
        self._start_hasher(job)

    # -- persistence -------------------------------------------------------------------------
    def _saver(self) -> None:
        while not self._stop.is_set():
            self._poke.wait(self.opt.save_interval)
            self._poke.clear()
            self._save_all()

    def _save_all(self, final: bool = False) -> None:
        for job in self.jobs:
            if job.fd < 0 or job.closed or not job.dirty:
                continue
            with job._save_lock:
                if job.closed or job.fd < 0:
                    continue
                with self._lock:
                    job.dirty = False
                    snap = [(s.start, s.end, s.done) for s in job.segments]
                try:
                    os.fdatasync(job.fd)
                    save_state(job.final, job.identity, snap)
                except OSError as exc:
                    self.fatal = f"cannot save {state_path(job.final)}: {exc.strerror or exc}"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
