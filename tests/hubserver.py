"""A local stand-in for the model hub: its API, its resolve redirect and a storage server.

Two real HTTP servers on 127.0.0.1, the way the hub is deployed:

* the **hub** (``HF_ENDPOINT`` points here) answers what ``huggingface_hub`` asks:
  ``GET /api/models/{repo}[/revision/{rev}]?blobs=true`` (model info with siblings, sizes and
  the LFS sha256 oid) and ``HEAD|GET /{repo}/resolve/{rev}/{path}``: for an LFS file a 302 to
  a presigned-style storage URL with ``X-Linked-Etag`` (the sha256), ``X-Linked-Size`` and
  ``X-Repo-Commit``; for a small file a 200 with the bytes and the git blob id as ``ETag``.
* the **storage** host (another port, so the redirect leaves the hub origin as it does for
  real) serves ``GET /blobs/{sha256}?gen=&exp=&sig=`` with byte ranges, and answers 403
  "Request has expired" for a URL whose time or generation has passed.

Bodies are streamed from files on disk with ``sendfile`` (a sparse file of several GB costs
nothing), optionally paced to a per-connection bandwidth cap.  Every storage response is
logged (range asked, bytes actually sent) so tests can count what was served.  Faults are
queued with :meth:`HubServer.add_fault` and consumed by the requests they match:
``drop`` (close the connection after N bytes), ``stall`` (stop sending), ``status`` (answer a
5xx, 429 or 416 instead), ``corrupt`` (send wrong bytes in one response) and ``expire``
(invalidate every storage URL issued so far, answering 403).

Run it by hand with ``python tests/hubserver.py REPO FILE...``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, quote, unquote, urlsplit

_SECRET = b"hubserver-test-secret"
_SEND = 256 * 1024

FaultKind = Literal["drop", "stall", "status", "corrupt", "expire"]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubFile:
    """One file of a repository as the server knows it."""

    path: str
    source: Path
    size: int
    sha256: str
    lfs: bool
    blob_id: str


@dataclass
class Repo:
    repo_id: str
    commit: str
    files: dict[str, HubFile] = field(default_factory=dict)
    gated: bool = False  # answer 403 GatedRepo unless the request carries the server's token
    private: bool | None = None  # 401 without the token; None: private iff the server has one


@dataclass
class Fault:
    """One injected failure, applied to the next ``times`` storage responses it matches.

    ``path`` limits it to one repository file; ``min_start`` to ranges starting at or after an
    offset; ``after`` is how many body bytes go out before it strikes (drop, stall, corrupt).
    """

    kind: FaultKind
    path: str | None = None
    after: int = 0
    status: int = 503
    seconds: float = 30.0
    times: int = 1
    min_start: int = 0
    hits: int = 0


@dataclass
class Served:
    """One storage response: the file, the range asked for, and the body bytes sent."""

    path: str
    start: int
    end: int  # inclusive, as in the Range header
    status: int
    sent: int
    fault: str | None = None


class HubServer:
    """The hub API and a storage host on two loopback ports; use as a context manager."""

    def __init__(self, root: Path, *, url_ttl: float = 3600.0, token: str | None = None) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.repos: dict[str, Repo] = {}
        self.url_ttl = url_ttl
        self.token = token
        self.cap_bps: float | None = None  # per-connection bandwidth cap, bytes per second
        self.faults: list[Fault] = []
        self.log: list[Served] = []
        self.resolves = 0  # HEAD/GET on /resolve for LFS files (URL issues)
        self.auth_leaks = 0  # storage requests that carried an Authorization header
        self.generation = 0  # storage URLs of an older generation are expired
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hub = _Server(("127.0.0.1", 0), _HubHandler, self)
        self._storage = _Server(("127.0.0.1", 0), _StorageHandler, self)
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._hub.server_address[1]}"

    @property
    def storage_endpoint(self) -> str:
        return f"http://127.0.0.1:{self._storage.server_address[1]}"

    def start(self) -> HubServer:
        for srv in (self._hub, self._storage):
            t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
            t.start()
            self._threads.append(t)
        return self

    def stop(self) -> None:
        self._stop.set()
        for srv in (self._hub, self._storage):
            srv.shutdown()
            srv.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- content -----------------------------------------------------------------------------
    def add_repo(self, repo_id: str, commit: str | None = None) -> Repo:
        commit = commit or hashlib.sha1(repo_id.encode()).hexdigest()
        repo = self.repos[repo_id] = Repo(repo_id, commit)
        return repo

    def add_file(
        self, repo_id: str, path: str, data: bytes | Path, *, lfs: bool | None = None, sha256: str | None = None
    ) -> HubFile:
        """Add a file from bytes or from a file on disk (served from disk, never loaded)."""
        repo = self.repos.get(repo_id) or self.add_repo(repo_id)
        if isinstance(data, bytes):
            source = self.root / "blobs" / hashlib.sha256(data).hexdigest()
            source.parent.mkdir(parents=True, exist_ok=True)
            source.write_bytes(data)
        else:
            source = Path(data)
        size = source.stat().st_size
        digest = sha256 or sha256_file(source)
        is_lfs = lfs if lfs is not None else (path.endswith(".gguf") or size > 10 << 20)
        if is_lfs:
            pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {size}\n").encode()
            blob_id = git_blob_sha1(pointer)
        else:
            blob_id = git_blob_sha1(source.read_bytes())
        f = repo.files[path] = HubFile(path, source, size, digest, is_lfs, blob_id)
        return f

    def add_fault(self, kind: FaultKind, **kw: Any) -> Fault:
        fault = Fault(kind, **kw)
        with self._lock:
            self.faults.append(fault)
        return fault

    def expire_urls(self) -> None:
        """Make every storage URL issued so far answer 403 (as when its signature lapses)."""
        with self._lock:
            self.generation += 1

    # -- accounting --------------------------------------------------------------------------
    def served(self, path: str | None = None, since: int = 0) -> list[Served]:
        with self._lock:
            return [s for s in self.log[since:] if path is None or s.path == path]

    def bytes_served(self, path: str | None = None, since: int = 0) -> int:
        return sum(s.sent for s in self.served(path, since))

    # -- internals ---------------------------------------------------------------------------
    def _find(self, repo_id: str, rev: str) -> Repo | None:
        repo = self.repos.get(repo_id)
        if repo is None or rev not in ("main", repo.commit):
            return None
        return repo

    def _sign(self, sha: str, gen: int, exp: int) -> str:
        return hmac.new(_SECRET, f"{sha}:{gen}:{exp}".encode(), "sha256").hexdigest()[:32]

    def storage_url(self, f: HubFile) -> str:
        with self._lock:
            self.resolves += 1
            gen = self.generation
        exp = int(time.time() + self.url_ttl)
        return (
            f"{self.storage_endpoint}/blobs/{f.sha256}?gen={gen}&exp={exp}"
            f"&sig={self._sign(f.sha256, gen, exp)}&name={quote(f.path, safe='')}"
        )

    def _take_fault(self, path: str, start: int) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.hits >= fault.times:
                    continue
                if fault.path not in (None, path) or start < fault.min_start:
                    continue
                fault.hits += 1
                if fault.kind == "expire":
                    self.generation += 1
                return fault
        return None


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, addr: tuple[str, int], handler: type, hub: HubServer) -> None:
        super().__init__(addr, handler)
        self.hub = hub

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)  # a real bug in the fixture: show it


class _Base(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _reply(
        self,
        status: int,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: Any, headers: dict[str, str] | None = None) -> None:
        self._reply(status, json.dumps(data).encode(), headers)


_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)(?:/revision/(?P<rev>[^/?]+))?$")
_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")


class _HubHandler(_Base):
    def do_GET(self) -> None:
        self._route()

    def do_HEAD(self) -> None:
        self._route()

    def _route(self) -> None:
        hub = self.server.hub
        url = urlsplit(self.path)
        path = unquote(url.path)
        authorized = hub.token is not None and self.headers.get("Authorization") == f"Bearer {hub.token}"
        m = _API.match(path) or _RESOLVE.match(path)
        target = hub.repos.get(m["repo"]) if m else None
        if target is not None and target.gated and not authorized:
            self._json(
                403,
                {"error": "Access to this model is restricted"},
                {"X-Error-Code": "GatedRepo", "X-Error-Message": "gated repository"},
            )
            return
        private = hub.token is not None if target is None or target.private is None else target.private
        if private and not authorized and not (target is not None and target.gated):
            self._json(
                401,
                {"error": "Invalid credentials in Authorization header"},
                {"X-Error-Code": "RepoNotFound", "X-Error-Message": "Invalid credentials"},
            )
            return
        if m := _API.match(path):
            repo = hub._find(m["repo"], unquote(m["rev"] or "main"))
            if repo is None:
                # As the hub does: a known repository at an unknown revision is RevisionNotFound.
                if target is not None:
                    self._json(
                        404,
                        {"error": f"Invalid rev id: {unquote(m['rev'] or 'main')}"},
                        {"X-Error-Code": "RevisionNotFound"},
                    )
                else:
                    self._json(404, {"error": "Repository not found"}, {"X-Error-Code": "RepoNotFound"})
                return
            blobs = "blobs" in parse_qs(url.query)
            siblings = []
            for hub_file in repo.files.values():
                s: dict[str, Any] = {"rfilename": hub_file.path}
                if blobs:
                    s |= {"size": hub_file.size, "blobId": hub_file.blob_id}
                    if hub_file.lfs:
                        s["lfs"] = {"size": hub_file.size, "sha256": hub_file.sha256, "pointerSize": 134}
                siblings.append(s)
            self._json(
                200,
                {
                    "id": repo.repo_id,
                    "modelId": repo.repo_id,
                    "sha": repo.commit,
                    "private": False,
                    "siblings": siblings,
                },
            )
            return
        if m := _RESOLVE.match(path):
            repo = hub._find(m["repo"], m["rev"])
            f = repo.files.get(m["path"]) if repo else None
            if repo is None or f is None:
                code = (
                    "EntryNotFound"
                    if repo is not None
                    else "RevisionNotFound"
                    if target is not None
                    else "RepoNotFound"
                )
                self._json(404, {"error": "not found"}, {"X-Error-Code": code})
                return
            common = {"X-Repo-Commit": repo.commit, "Accept-Ranges": "bytes"}
            if f.lfs:
                self._reply(
                    302,
                    b"",
                    common
                    | {
                        "Location": hub.storage_url(f),
                        "ETag": f'"{f.blob_id}"',
                        "X-Linked-Etag": f'"{f.sha256}"',
                        "X-Linked-Size": str(f.size),
                    },
                )
                return
            data = f.source.read_bytes()
            self._reply(200, data, common | {"ETag": f'"{f.blob_id}"'}, content_type="application/octet-stream")
            return
        self._json(404, {"error": f"no route {path}"})


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _StorageHandler(_Base):
    _conn_start: float | None = None
    _conn_sent = 0

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        hub = self.server.hub
        url = urlsplit(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        if self.headers.get("Authorization"):
            with hub._lock:
                hub.auth_leaks += 1
        sha = url.path.rsplit("/", 1)[-1]
        f = next((f for r in hub.repos.values() for f in r.files.values() if f.sha256 == sha), None)
        if f is None:
            self._reply(404, b"<Error><Code>NoSuchKey</Code></Error>", content_type="application/xml")
            return
        try:
            gen, exp = int(q["gen"]), int(q["exp"])
            good = hmac.compare_digest(q["sig"], hub._sign(sha, gen, exp))
        except (KeyError, ValueError):
            good, gen, exp = False, 0, 0
        if not good:
            self._reply(403, b"<Error><Code>SignatureDoesNotMatch</Code></Error>", content_type="application/xml")
            return
        if gen < hub.generation or time.time() > exp:
            self._expired(f, 0)
            return
        size = f.size
        start, end = 0, size - 1
        ranged = False
        if rng := self.headers.get("Range"):
            m = _RANGE.match(rng.strip())
            if not m or int(m[1]) >= size:
                self._reply(416, b"", {"Content-Range": f"bytes */{size}"})
                with hub._lock:
                    hub.log.append(Served(f.path, start, end, 416, 0))
                return
            start = int(m[1])
            end = min(int(m[2]), size - 1) if m[2] else size - 1
            ranged = True
        fault = hub._take_fault(f.path, start) if self.command == "GET" else None
        if fault is not None and fault.kind == "expire":
            self._expired(f, start)
            return
        if fault is not None and fault.kind == "status":
            headers = {"Content-Range": f"bytes */{size}"} if fault.status == 416 else {}
            self._reply(fault.status, b"", headers)
            with hub._lock:
                hub.log.append(Served(f.path, start, end, fault.status, 0, "status"))
            return
        length = end - start + 1
        self.send_response(206 if ranged else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{f.sha256}"')
        if ranged:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            return
        record = Served(f.path, start, end, 206 if ranged else 200, 0, fault.kind if fault else None)
        with hub._lock:
            hub.log.append(record)
        try:
            self._send_body(f, start, length, fault, record)
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True

    def _expired(self, f: HubFile, start: int) -> None:
        hub = self.server.hub
        body = b"<Error><Code>AccessDenied</Code><Message>Request has expired</Message></Error>"
        self._reply(403, body, content_type="application/xml")
        with hub._lock:
            hub.log.append(Served(f.path, start, start, 403, 0, "expire"))

    def _pace(self, n: int) -> None:
        """Sleep so this connection stays under the cap after sending ``n`` more bytes."""
        cap = self.server.hub.cap_bps
        if not cap:
            return
        if self._conn_start is None:
            self._conn_start, self._conn_sent = time.monotonic(), 0
        self._conn_sent += n
        ahead = self._conn_sent / cap - (time.monotonic() - self._conn_start)
        if ahead > 0:
            time.sleep(ahead)
        elif ahead < -0.5:  # idle a while (keep-alive): do not bank unused bandwidth
            self._conn_start, self._conn_sent = time.monotonic(), 0

    def _send_body(self, f: HubFile, start: int, length: int, fault: Fault | None, record: Served) -> None:
        hub = self.server.hub
        sock: socket.socket = self.connection
        limit = length
        if fault is not None and fault.kind in ("drop", "stall"):
            limit = min(length, fault.after)
        cap = hub.cap_bps
        step = _SEND if not cap else max(16 * 1024, min(_SEND, int(cap / 20)))
        with open(f.source, "rb") as src:
            pos = 0
            while pos < limit:
                n = min(step, limit - pos)
                if fault is not None and fault.kind == "corrupt" and pos <= fault.after < pos + n:
                    src.seek(start + pos)
                    buf = bytearray(src.read(n))
                    i = fault.after - pos
                    for j in range(i, min(n, i + 4096)):
                        buf[j] ^= 0x5A
                    sock.sendall(buf)
                    sent = n
                else:
                    sent = sock.sendfile(src, start + pos, n) or 0
                    if sent == 0:
                        break
                pos += sent
                with hub._lock:
                    record.sent += sent
                self._pace(sent)
        if fault is not None and fault.kind == "stall":
            hub._stop.wait(fault.seconds)
        if fault is not None and fault.kind in ("drop", "stall"):
            self.close_connection = True
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def zeros_sha256(size: int) -> str:
    """The sha256 of ``size`` zero bytes (what a sparse file holds)."""
    h = hashlib.sha256()
    block = bytes(16 << 20)
    while size > 0:
        h.update(block[: min(size, len(block))])
        size -= len(block)
    return h.hexdigest()


def main() -> None:  # pragma: no cover - used by benchmarks/bench_fetch.py and by hand
    """``python tests/hubserver.py --repo R [--file PATH] [--sparse NAME:MIB] [--cap-mib N]``.

    Prints one JSON line ``{"endpoint": ..., "storage": ...}`` when ready, serves until killed.
    """
    import argparse
    import sys

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repo", required=True)
    ap.add_argument("--root", default=os.path.join(os.environ.get("TMPDIR", "/tmp"), "hubserver"))
    ap.add_argument("--file", action="append", default=[], help="a file to serve under its name")
    ap.add_argument("--sparse", action="append", default=[], help="NAME:MIB, a sparse zero file")
    ap.add_argument("--cap-mib", type=float, default=0.0, help="per-connection cap, MiB/s")
    args = ap.parse_args()
    root = Path(args.root)
    hub = HubServer(root)
    for p in args.file:
        hub.add_file(args.repo, Path(p).name, Path(p))
    for spec in args.sparse:
        name, mib = spec.rsplit(":", 1)
        size = int(float(mib) * (1 << 20))
        path = root / "sparse" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as fh:
            fh.truncate(size)
        hub.add_file(args.repo, name, path, sha256=zeros_sha256(size), lfs=True)
    hub.cap_bps = args.cap_mib * (1 << 20) or None
    hub.start()
    print(json.dumps({"endpoint": hub.endpoint, "storage": hub.storage_endpoint}), flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        hub.stop()
        for spec in args.sparse:
            (root / "sparse" / spec.rsplit(":", 1)[0]).unlink(missing_ok=True)
        sys.exit(0)


if __name__ == "__main__":  # pragma: no cover
    main()
