"""The dashboard: ``/ui`` (the page), ``/ui/state`` (its JSON), ``/ui/static/*``, ``/ui/file/ID``.

The page is a static shell (no data in it, so a browser may load it without a key); everything it
shows comes from ``/ui/state``, which takes the API's key (``Authorization: Bearer KEY``; the page
asks once and keeps it in ``sessionStorage``). The state is read at most once a second whoever asks,
off the event loop, and the slower readings (the planner, the run folders, remote processes) less
often, so an open page costs the serving path next to nothing.

What is read (all read-only): the cluster state folder `up` writes (found from the gateway's own
log file, else by matching this gateway in ``$SPLITSERVE_STATE``), the head's load log while it
loads, the supervisor's log, llama-server's ``/slots``, the head's TCP sockets to its workers
(``ss -ti``: round trip and bytes sent, which during a load is the weights streamed over RPC), the
planner's figures for the spec, the gateway's prometheus registry, and the newest ``bench`` and
``eval`` results under ``./bench-runs`` and ``./eval-runs`` (here and beside the spec).
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .._errors import EngineError, SplitserveError
from .._node import run_command
from ..cluster import STATE_FILE, ClusterState, read_state
from ..cluster import read_tail as cluster_read_tail
from ..engine import EngineInfo
from ._engine_errors import api_error
from ._errors import APIError
from ._router import ReplicaBackend
from ._ui_state import History, Sample, Snapshot, assemble


class _Config(Protocol):
    @property
    def port(self) -> int: ...

    @property
    def engine_url(self) -> str: ...


class _Info(Protocol):
    async def info(self, timeout: float | None = None) -> EngineInfo: ...


class _Registry(Protocol):
    @property
    def registry(self) -> Any: ...


class Gateway(Protocol):
    """What the page needs of :class:`splitserve.gateway.Gateway` (a Protocol: ``_app`` imports this module)."""

    @property
    def config(self) -> _Config: ...

    @property
    def backend(self) -> _Info: ...

    @property
    def metrics(self) -> _Registry: ...

    def authenticate(self, request: Request) -> str: ...


REFRESH_SECONDS = 1.0
"""The state is computed at most this often, however many pages poll."""
SLOW_SECONDS = 10.0
"""Run folders, remote processes and root discovery: at most this often."""
_STATIC = {"app.js": "text/javascript", "app.css": "text/css"}
_LOG_TAIL = 4 << 20


# -- finding the cluster -------------------------------------------------------------------------


def find_root(port: int, engine_url: str) -> Path | None:
    """The state folder of the cluster whose gateway this is: `up` sends the gateway's output to
    ``ROOT/logs/gateway.log``; else a state in ``$SPLITSERVE_STATE`` naming this port or engine."""
    try:
        log = Path(os.readlink("/proc/self/fd/1"))
    except OSError:
        log = None
    if log is not None and log.name == "gateway.log" and log.parent.name == "logs":
        return log.parent.parent
    from .._paths import state_dir

    base = state_dir()
    for path in sorted(base.glob(f"*/{STATE_FILE}")) if base.is_dir() else []:
        try:
            state = ClusterState.from_json(path.read_text())
        except (OSError, ValueError, TypeError):
            continue
        gw = state.gateway
        if (gw is not None and gw.port == port) or state.engine_url.rstrip("/") == engine_url.rstrip("/"):
            return path.parent
    return None


# -- readings ----------------------------------------------------------------------------------------

_SS_PEER = re.compile(r"^\S+\s+\S+\s+(?P<local>\S+)\s+(?P<peer>\S+)")
_SS_MINRTT = re.compile(r"\bminrtt:(?P<rtt>[\d.]+)")
_SS_ACKED = re.compile(r"\bbytes_acked:(?P<n>\d+)")


def parse_ss(text: str, endpoints: set[str]) -> dict[str, dict[str, float]]:
    """``ss -tinH state established`` output -> per peer endpoint: ``rtt_ms``, the link RTT as
    preflight measures it (:data:`splitserve.cluster.LINK_RTT_MEANING`): the kernel's ``minrtt`` of
    the connection, the lowest over the connections to one endpoint; and ``bytes_sent``
    (acknowledged bytes), summed over them. The smoothed ``rtt:`` is not read: on a busy RPC
    connection it holds delayed ACKs and the worker's compute time."""
    out: dict[str, dict[str, float]] = {}
    peer: str | None = None
    for line in text.splitlines():
        if line and not line[0].isspace():
            m = _SS_PEER.match(line)
            peer = m.group("peer") if m and m.group("peer") in endpoints else None
            continue
        if peer is None:
            continue
        rtt, acked = _SS_MINRTT.search(line), _SS_ACKED.search(line)
        link = out.setdefault(peer, {"bytes_sent": 0.0})
        if rtt:
            link["rtt_ms"] = min(link.get("rtt_ms", math.inf), float(rtt.group("rtt")))
        if acked:
            link["bytes_sent"] += float(acked.group("n"))
        peer = None
    return out


def read_links(endpoints: set[str]) -> dict[str, dict[str, float]]:
    if not endpoints:
        return {}
    try:
        res = run_command(["ss", "-tinH", "state", "established"], timeout=2.0)
    except SplitserveError:  # it did not finish in time
        return {}
    if res.returncode != 0:  # no `ss` here (127), or it failed
        return {}
    return parse_ss(res.stdout, endpoints)


def read_tail(path: Path, max_bytes: int) -> str:
    """:func:`splitserve.cluster.read_tail`, "" for any file the gateway cannot read."""
    try:
        return cluster_read_tail(path, max_bytes)
    except OSError:
        return ""


def read_events(root: Path) -> list[dict[str, Any]]:
    """The supervisor's last events (its JSON-lines log; the tail only)."""
    out = []
    for line in read_tail(root / "supervisor.log", 128 << 10).splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            event.pop("tail", None)  # log excerpts: long, and the page links no logs
            out.append(event)
    return out


def plan_for_state(state: ClusterState) -> tuple[dict[str, Any] | None, str | None]:
    """The planner's figures for the cluster's spec; workers without ``memory_gib`` get this
    machine's RAM (said in the note)."""
    if not state.spec_file:
        return None, "no spec file in the cluster state"
    try:
        from dataclasses import replace

        from ..cluster import load_spec, plan_for_spec, spec_nodes, spec_options
        from ..plan import Node

        spec = load_spec(Path(state.spec_file))
        note = None
        try:
            nodes = spec_nodes(spec)
        except SplitserveError:
            import psutil

            ram = int(psutil.virtual_memory().total)
            nodes = []
            for w in spec.workers:
                devices: list[str | None] = [*w.devices] or [None]
                for d in devices:
                    nodes.append(
                        Node(
                            w.name if d is None else f"{w.name}/{d}",
                            ram,
                            getattr(w, "device_kind", None),
                            getattr(w, "bandwidth_gbps", None),
                        )
                    )
            nodes += [Node(f"head/{d}", ram) for d in spec.head.devices]
            note = f"memory_gib not set: each device assumed to have this machine's {ram / 2**30:.1f} GiB"
        plan = plan_for_spec(spec, nodes=nodes, options=replace(spec_options(spec)))
        return plan.to_dict(), note
    except (SplitserveError, OSError, ValueError) as exc:
        return None, f"no plan: {exc}"


def _newest(paths: list[Path]) -> Path | None:
    stamped = []
    for p in paths:
        try:
            stamped.append((p.stat().st_mtime, p))
        except OSError:
            continue
    return max(stamped)[1] if stamped else None


def _report_lines(md: Path, limit: int = 120) -> list[str]:
    try:
        return md.read_text(errors="replace").splitlines()[:limit]
    except OSError:
        return []


def find_runs(folders: list[Path], files: dict[str, Path]) -> dict[str, Any]:
    """The newest bench run (its JSON and report folder) and eval run (its report) under
    ``bench-runs`` / ``eval-runs`` of ``folders``; their PNGs go into ``files`` by id."""
    files.clear()
    out: dict[str, Any] = {"bench": None, "eval": None, "searched": [str(f) for f in folders]}
    bench = _newest([p for f in folders for p in (f / "bench-runs").glob("*.json")])
    if bench is not None:
        out["bench"] = _bench_run(bench, files)
    run = _newest([p for f in folders for p in (f / "eval-runs").glob("*/report/report.md")])
    if run is not None:
        out["eval"] = _run_entry("eval", run.parent.parent.name, run.parent.parent, run.parent, files)
        try:
            summary = json.loads((run.parent / "summary.json").read_text())
            out["eval"]["summary"] = {k: v for k, v in summary.items() if not isinstance(v, (dict, list))}
        except (OSError, ValueError, AttributeError):
            pass
    return out


def _bench_run(path: Path, files: dict[str, Path]) -> dict[str, Any]:
    report = path.with_suffix("")
    entry = _run_entry("bench", path.stem, path, report, files)
    try:
        if path.stat().st_size < 64 << 20:
            data = json.loads(path.read_text())
            entry.update(
                kind=data.get("kind"),
                label=data.get("label"),
                created_at=data.get("created_at"),
                complete=data.get("complete"),
                headline=(data.get("summary") or {}).get("headline"),
            )
    except (OSError, ValueError, AttributeError):
        pass
    return entry


def _run_entry(kind: str, name: str, path: Path, report: Path, files: dict[str, Path]) -> dict[str, Any]:
    images = []
    lines = _report_lines(report / "report.md")
    text = "\n".join(lines)
    # in the report's own order (its image links), then by name
    pngs = sorted(report.glob("*.png") if report.is_dir() else [], key=lambda p: (_place(text, p.name), p.name))
    for i, png in enumerate(pngs):
        key = f"{kind}-{i}"
        files[key] = png
        images.append({"id": key, "name": png.name})
    return {"name": name, "path": str(path), "report": lines, "images": images}


def _place(text: str, name: str) -> int:
    """Where a report links the image ``name`` (``](name)``); unlinked images go last."""
    at = text.find(f"]({name})")
    return at if at >= 0 else len(text)


# -- the reader ------------------------------------------------------------------------------------


class ClusterReader:
    """Reads the cluster state folder and the machine (runs in a worker thread)."""

    def __init__(self, port: int, engine_url: str) -> None:
        self.port, self.engine_url = port, engine_url
        self.root: Path | None = None
        self.files: dict[str, Path] = {}
        self._root_at = 0.0
        self._runs: tuple[float, dict[str, Any]] = (0.0, {})
        self._plan_key: tuple[str | None, float] | None = None
        self._plan: tuple[dict[str, Any] | None, str | None] = (None, None)
        self._remote: dict[str, tuple[float, bool | None]] = {}
        self._worker_side: dict[str, tuple[float, dict[str, int], Any]] = {}
        self._log: tuple[tuple[str, int], Any] | None = None
        self._transports: tuple[float, dict[str, dict[str, Any]]] = (0.0, {})

    def read(self, snap: Snapshot) -> None:
        now = time.monotonic()
        if self.root is None and now - self._root_at > SLOW_SECONDS / 2:
            self._root_at = now
            self.root = find_root(self.port, self.engine_url)
        state = None
        if self.root is not None:
            try:
                state = read_state(self.root)
            except SplitserveError as exc:
                snap.plan_note = str(exc)
        if state is not None and self.root is not None:
            snap.state = state
            self._read_cluster(snap, state, self.root, now)
        if now - self._runs[0] > SLOW_SECONDS or not self._runs[1]:
            folders = [Path.cwd()]
            if state is not None and state.spec_file:
                folders.append(Path(state.spec_file).parent)
            unique = list(dict.fromkeys(f.resolve() for f in folders))
            self._runs = (now, find_runs(unique, self.files))
        snap.runs = self._runs[1]

    def _read_cluster(self, snap: Snapshot, state: ClusterState, root: Path, now: float) -> None:
        snap.alive = {p.node: self._alive(p, state, now) for p in state.processes}
        snap.events = read_events(root)
        self._read_head_log(snap, state)
        head = next((p for p in state.processes if p.role == "server"), None)
        if head is not None and head.host == "local":
            from ._ui_state import _endpoint

            snap.links = read_links({_endpoint(p.bind, p.port) for p in state.processes if p.role == "rpc"})
            if state.phase == "starting":
                self._read_worker_load(snap, state)
        snap.transports = self._read_transports(state, now)
        key = (state.spec_file, _mtime(state.spec_file))
        if key != self._plan_key:
            self._plan_key, self._plan = key, plan_for_state(state)
        snap.plan, note = self._plan
        snap.plan_note = snap.plan_note or note

    def _read_transports(self, state: ClusterState, now: float) -> dict[str, dict[str, Any]]:
        """Each worker's transport, read again at most every SLOW_SECONDS (a remote worker's
        log and sysfs are an ssh round trip away)."""
        from ..cluster import worker_transports

        at, value = self._transports
        if now - at < SLOW_SECONDS and value:
            return value
        try:
            value = {node: t.as_dict() for node, t in worker_transports(state).items()}
        except SplitserveError:
            value = {}
        self._transports = (now, value)
        return value

    def _read_worker_load(self, snap: Snapshot, state: ClusterState) -> None:
        """Each worker's weights in place, from its side too (cache hits, RDMA): ``loaded_bytes``."""
        from ..cluster import read_worker_side, worker_loaded_bytes
        from ._ui_state import _endpoint

        for p in state.processes:
            ep = _endpoint(p.bind, p.port)
            if p.role != "rpc" or ep not in snap.links:
                continue
            at, io, log = self._worker_side.get(p.node, (0.0, {}, None))
            if p.host == "local" or time.monotonic() - at >= SLOW_SECONDS:  # ssh for a remote one: not every refresh
                io, log = read_worker_side(p.host, p.pid, p.log, state.ssh)
                self._worker_side[p.node] = (time.monotonic(), io, log)
            link = snap.links[ep]
            link["loaded_bytes"] = float(worker_loaded_bytes(link.get("bytes_sent") or 0, io, log))

    def _alive(self, p: Any, state: ClusterState, now: float) -> bool | None:
        from ..cluster import node_for

        if p.host != "local":
            at, value = self._remote.get(p.node, (0.0, None))
            if now - at < SLOW_SECONDS:
                return value
        try:
            value = node_for(p.host, state.ssh).alive(p.ref)
        except SplitserveError:
            value = None
        if p.host != "local":
            self._remote[p.node] = (now, value)
        return value

    def _read_head_log(self, snap: Snapshot, state: ClusterState) -> None:
        """While loading, the stage, buffers and warnings come from the head's log; once ready,
        from what `up` stored (the log grows with every request at verbosity 4)."""
        from ..cluster import load_progress, load_warnings, parse_load_report

        head = next((p for p in state.processes if p.role == "server"), None)
        if state.phase == "ready" or head is None or head.host != "local":
            snap.memory = list(state.extra.get("memory") or [])
            snap.load_warnings = list(state.extra.get("warnings") or [])
            snap.load_stage = "serving" if state.phase == "ready" else None
            return
        key = (head.log, _size(head.log))
        if self._log is None or self._log[0] != key:
            text = read_tail(Path(head.log), _LOG_TAIL)
            start = text.rfind("# splitserve:")
            text = text[start:] if start > 0 else text
            self._log = (
                key,
                (
                    [d.as_dict() for d in parse_load_report(text).devices],
                    load_progress(text),
                    [w.as_dict() for w in load_warnings(text)],
                ),
            )
        snap.memory, snap.load_stage, snap.load_warnings = self._log[1]


def _mtime(path: str | None) -> float:
    try:
        return os.stat(path).st_mtime if path else 0.0
    except OSError:
        return 0.0


def _size(path: str) -> int:
    try:
        return os.stat(path).st_size
    except OSError:
        return -1


def samples_of(registry: Any) -> list[Sample]:
    """Every sample of a prometheus registry (new metrics simply add samples)."""
    out: list[Sample] = []
    for family in registry.collect():
        for s in family.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


# -- the routes -------------------------------------------------------------------------------------


class Dashboard:
    """The page's state, computed at most once per :data:`REFRESH_SECONDS`."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.reader = ClusterReader(gw.config.port, gw.config.engine_url)
        self.history = History()
        self._lock = anyio.Lock()
        self._at = -1e9
        self._body = b"{}"

    async def state_bytes(self) -> bytes:
        async with self._lock:
            if time.monotonic() - self._at >= REFRESH_SECONDS:
                self._body = json.dumps(await self._compute(), separators=(",", ":")).encode()
                self._at = time.monotonic()
            return self._body

    async def _compute(self) -> dict[str, Any]:
        snap = Snapshot(now=time.time(), gateway_url=None)
        backend = self.gw.backend
        if isinstance(backend, ReplicaBackend):
            # every replica's slots (named NAME/ID), which also updates each one's busy count
            await backend.health()  # each replica's status, as the router will use it
            by_replica = await backend.all_slots(timeout=1.0)
            snap.slots = [s | {"id": f"{name}/{s.get('id')}"} for name, slots in by_replica.items() for s in slots]
            snap.replicas = backend.state()
        else:
            try:
                snap.slots = (await backend.info(timeout=1.0)).slots
            except EngineError as exc:
                snap.slots_error = api_error(exc).message
        snap.samples = samples_of(self.gw.metrics.registry)
        await anyio.to_thread.run_sync(self.reader.read, snap)
        self.history.update(snap)
        return assemble(snap, self.history)

    async def page(self, request: Request) -> Response:
        html = (resources.files(__package__) / "ui" / "index.html").read_text()
        return Response(
            html,
            media_type="text/html",
            headers={
                "Cache-Control": "no-cache",
                "X-Frame-Options": "DENY",
                "Referrer-Policy": "no-referrer",
                "Content-Security-Policy": "default-src 'self'; img-src 'self' blob:; style-src 'self'; "
                "script-src 'self'; connect-src 'self'; frame-ancestors 'none'",
            },
        )

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in _STATIC:
            return _error(APIError(404, f"no such file: /ui/static/{name[:100]}"))
        body = (resources.files(__package__) / "ui" / name).read_bytes()
        return Response(body, media_type=_STATIC[name], headers={"Cache-Control": "no-cache"})

    async def state(self, request: Request) -> Response:
        try:
            self.gw.authenticate(request)
        except APIError as exc:
            return _error(exc)
        return Response(await self.state_bytes(), media_type="application/json", headers={"Cache-Control": "no-store"})

    async def file(self, request: Request) -> Response:
        try:
            self.gw.authenticate(request)
        except APIError as exc:
            return _error(exc)
        path = self.reader.files.get(request.path_params["id"])
        if path is None:
            return _error(APIError(404, f"no such run file: {request.path_params['id'][:100]} (see /ui/state runs)"))
        try:
            body = await anyio.to_thread.run_sync(path.read_bytes)
        except OSError as exc:
            return _error(APIError(404, f"{path.name}: cannot read the run file: {exc.strerror}"))
        return Response(body, media_type="image/png", headers={"Cache-Control": "private, max-age=10"})


def _error(exc: APIError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def ui_routes(gw: Gateway) -> list[Route]:
    """The dashboard's routes for :func:`create_app`."""
    ui = Dashboard(gw)
    return [
        Route("/ui", ui.page, methods=["GET"]),
        Route("/ui/", ui.page, methods=["GET"]),
        Route("/ui/state", ui.state, methods=["GET"]),
        Route("/ui/static/{name}", ui.static, methods=["GET"]),
        Route("/ui/file/{id}", ui.file, methods=["GET"]),
    ]


__all__ = ["ClusterReader", "Dashboard", "find_root", "find_runs", "parse_ss", "samples_of", "ui_routes"]
