"""Supervision: keep a cluster serving (`up --foreground`, `splitserve run`).

llama.cpp cannot recover from a lost RPC worker (a dead worker aborts
llama-server), and a head that died leaves the workers holding tensors for
nobody. So when any process dies, the whole cluster is stopped and started
again in order (workers, then the head), waiting ``backoff_initial`` seconds
before the first restart and doubling the wait after each restart that follows
quickly, up to ``backoff_max``; a cluster that served ``stable_seconds``
resets it. A dead gateway alone is started again by itself (the engine keeps its
model); with replicas (llama.cpp, vLLM or SGLang), a dead replica alone is started
again by itself while the others and the gateway keep serving. Every death and
restart is an :class:`Event` and a JSON line in ``<state>/supervisor.log`` with the cause: which node, its exit status and the
last lines of its log; the root cause first (by who died first: a worker that
died of SIGPIPE after its head is named after the head, as dying because its
head went away). The supervisor holds the state folder's lock for its life
(:class:`~._state.SupervisorLock`): a second `up` is refused and `down` asks it
to stop (SIGTERM). While it runs it keeps ``<state>/supervisor.json`` (:data:`SUPERVISION_FILE`):
its phase (starting, serving, restarting), the attempt, the cause of the last death and the
restart count, for `status` to read while the cluster's own state is gone (between stopping
everything and starting it again).
"""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ClusterError, SplitserveError
from .._node import stop
from ..engine import Engine
from ._commands import cluster_state_dir
from ._down import SUPERVISOR_STOP_TIMEOUT, Event, OnEvent, death_message, down
from ._edges import REAL_EDGES, Edges
from ._execute import restart_gateway, restart_replica, up
from ._spec import ClusterSpec
from ._ssh import exit_status_from_log
from ._state import ClusterState, ProcessRecord, SupervisorLock

SUPERVISOR_LOG = "supervisor.log"
SUPERVISION_FILE = "supervisor.json"
"""What the supervisor is doing now (phase, attempt, cause, restarts); removed when it stops."""
DEAD_GRACE = 1.0
"""Seconds a process of a broken cluster gets between SIGTERM and SIGKILL."""


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff with a cap: ``initial * 2**n``, at most ``cap`` seconds."""

    initial: float = 1.0
    cap: float = 60.0

    def delay(self, attempt: int) -> float:
        """The wait before restart number ``attempt`` (0 for the first)."""
        return float(min(self.cap, self.initial * (2 ** max(0, attempt))))


@dataclass
class Death:
    """A process that was found dead."""

    node: str
    role: str
    cause: str
    tail: list[str]
    code: int | None = None
    """Its exit status as :class:`subprocess.Popen` gives it (negative: the signal), where known."""
    because: str | None = None
    """For a process that died after another (the root cause): why, e.g. its head went away."""
    others: list[Death] = field(default_factory=list)
    """On the root cause only: the processes that died after it, in order."""

    @property
    def message(self) -> str:
        return self.cause + (f"; {self.because}" if self.because else "")

    @property
    def short(self) -> str:
        """``w2 killed by signal 9`` (then who died after it): the cause in a few words."""
        code = self.code
        how = (
            f"killed by signal {-code}"
            if code is not None and code < 0
            else f"exited with code {code}"
            if code is not None
            else "died"
        )
        after = f" (then {', '.join(d.node for d in self.others)})" if self.others else ""
        return f"{self.node} {how}{after}"


SIGPIPE = 13
SETTLE_SECONDS = 0.2
"""After a first death is seen: how long the others get to die too (a head that dies takes the
workers it was writing to with it; a lost worker aborts the head), so all are ordered at once."""
_ROLE_RANK = {"rpc": 0, "server": 1, "gateway": 2}


def _death(rec: ProcessRecord, ssh: object, edges: Edges = REAL_EDGES) -> Death | None:
    """The death of one recorded process, or None while it runs."""
    transport = edges.node(rec.host, ssh)
    try:
        alive = transport.alive(rec.ref)
    except ClusterError as exc:
        return Death(rec.node, rec.role, f"cannot reach the node: {exc}", [])
    if alive:
        return None
    log = Path(rec.log)
    try:
        text = transport.read_log(log, max_bytes=32 << 10)
        cause = death_message(rec.role, transport, rec.ref, log, "while serving")
        code = transport.exit_code(rec.ref)
        if code is None:
            code = exit_status_from_log(text)
    except ClusterError as exc:
        text, cause, code = "", f"died (its log is unreadable: {exc})", None
    tail = [ln for ln in text.splitlines() if ln.strip()][-8:]
    return Death(rec.node, rec.role, cause, tail, code)


def find_dead(state: ClusterState, settle: float = SETTLE_SECONDS, edges: Edges = REAL_EDGES) -> Death | None:
    """The root cause among the dead processes of a running cluster, or None when all run.

    Deaths are ordered by who died first: those already dead at the first look before those
    that die in the next ``settle`` seconds; among the first, a worker killed by SIGPIPE while
    its head is dead died because the head went away (it wrote to the closed connection), so the
    head comes first; otherwise workers come first (a lost RPC worker aborts llama-server).
    The others are on the root's ``others``, each saying after whom it died."""
    ssh = state.ssh
    dead: list[tuple[int, Death]] = []
    for rec in state.processes:
        d = _death(rec, ssh, edges)
        if d is not None:
            dead.append((0, d))
    if not dead:
        return None
    gone = {d.node for _, d in dead}
    if settle > 0 and len(gone) < len(state.processes):
        edges.clock.sleep(settle)
        for rec in state.processes:
            if rec.node not in gone:
                d = _death(rec, ssh, edges)
                if d is not None:
                    dead.append((1, d))
    head_dead = any(d.role == "server" for _, d in dead)

    def after_head(d: Death) -> bool:
        return d.role == "rpc" and head_dead and d.code == -SIGPIPE

    ordered = [d for _, d in sorted(dead, key=lambda pd: (pd[0], after_head(pd[1]), _ROLE_RANK.get(pd[1].role, 3)))]
    root, rest = ordered[0], ordered[1:]
    for d in rest:
        if after_head(d):
            d.because = (
                "it died because its head went away (SIGPIPE: it wrote to the connection llama-server had dropped)"
            )
        elif d.role == "server" and root.role == "rpc":
            d.because = f"it died after {root.node} (llama-server cannot run without one of its RPC workers)"
        else:
            d.because = f"it died after {root.node}"
    root.others = rest
    return root


class Supervisor:
    """Runs a cluster until :meth:`stop` is called (from a signal handler or another thread)."""

    def __init__(
        self,
        spec: ClusterSpec,
        *,
        engine: Engine | None = None,
        on_event: OnEvent | None = None,
        preflight: bool = True,
        log_file: Path | None = None,
        edges: Edges = REAL_EDGES,
    ) -> None:
        self.spec = spec
        self.edges = edges
        self.clock = edges.clock
        self.engine = engine
        self.emit_user = on_event or (lambda _e: None)
        self.preflight = preflight
        self.log_file = log_file or cluster_state_dir(spec) / SUPERVISOR_LOG
        self.backoff = Backoff(spec.supervise.backoff_initial, spec.supervise.backoff_max)
        self._stop = threading.Event()
        self.restarts = 0
        self.state: ClusterState | None = None
        self.lock = SupervisorLock(cluster_state_dir(spec), spec.name)
        self.replica_attempts: dict[str, int] = {}
        """Restarts of each replica alone (its backoff)."""
        self.replica_since: dict[str, float] = {}
        """When each replica restarted alone last (it resets its backoff after ``stable_seconds``)."""

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def emit(self, kind: str, node: str, message: str, quiet: bool = False, **extra: object) -> None:
        """Log the event (``supervisor.log``) and, unless ``quiet``, pass it to the caller."""
        event = Event(kind, node, message)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "a") as fh:
            fh.write(
                json.dumps({"time": self.clock.time(), "kind": kind, "node": node, "message": message, **extra}) + "\n"
            )
        if not quiet:
            self.emit_user(event)

    def record(self, phase: str, attempt: int = 0, cause: str | None = None, detail: str | None = None) -> None:
        """Write :data:`SUPERVISION_FILE` (atomically: `status` may read it at any moment)."""
        import os

        path = self.log_file.parent / SUPERVISION_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {
            "pid": os.getpid(),
            "phase": phase,
            "attempt": attempt,
            "restarts": self.restarts,
            "cause": cause,
            "detail": detail,
            "since": self.clock.time(),
        }
        tmp = path.with_name(SUPERVISION_FILE + ".tmp")
        tmp.write_text(json.dumps(data) + "\n")
        tmp.replace(path)

    def _pass(self, event: Event) -> None:
        if event.kind in ("ready", "preflight", "engine", "stale") or event.kind.startswith("restart"):
            self.emit(event.kind, event.node, event.message)
        else:
            self.emit_user(event)

    def run(self, on_ready: Callable[[ClusterState], None] | None = None) -> None:
        """Start the cluster and keep it serving until stopped; stops it on the way out.

        Raises :class:`ClusterError` after ``supervise.max_restarts`` restarts in a row."""
        sup = self.spec.supervise
        attempt = 0
        first = True
        cause: tuple[str, str] | None = None  # (short, detail) of the death being restarted from
        # Held for the supervisor's life: a second `up` (or supervisor) of this cluster is refused
        # instead of taking its processes for stale ones, and `down` asks this one to stop.
        self.lock.acquire()
        try:
            self.record("starting")
            while not self.stopping:
                started = self.clock.monotonic()
                try:
                    self.state = up(
                        self.spec,
                        engine=self.engine,
                        on_event=self._pass,
                        preflight=self.preflight and first,
                        should_stop=lambda: self.stopping,
                        edges=self.edges,
                    )
                except SplitserveError as exc:
                    if self.stopping:
                        break  # asked to stop while it started: up stopped what it had started
                    if first and not self.restarts:
                        raise  # a cluster that never came up is a configuration problem: say so at once
                    self.emit("start_failed", getattr(exc, "node", "cluster"), str(exc))
                    death = None
                    failed_on = getattr(exc, "node", "cluster")
                    cause = (f"{failed_on} did not start again", str(exc))
                else:
                    first = False
                    self.record("serving")
                    if on_ready is not None:
                        on_ready(self.state)
                    death = self._watch(sup.poll_seconds)
                    if death is None:
                        break  # stop() was called
                    if self.clock.monotonic() - started >= sup.stable_seconds:
                        attempt = 0  # it had served long enough: a first restart again
                    cause = (death.short, death.message)
                    self.record("restarting", attempt + 1, *cause)
                    self._report(death)
                if self.clock.monotonic() - started >= sup.stable_seconds:
                    attempt = 0
                if sup.max_restarts is not None and attempt >= sup.max_restarts:
                    msg = f"gave up after {attempt} restarts in a row (supervise.max_restarts)"
                    self.emit("gave_up", "cluster", msg)
                    raise ClusterError(f"cluster {self.spec.name}: {msg}; see {self.log_file}")
                delay = self.backoff.delay(attempt)
                attempt += 1
                self.restarts += 1
                self.record("restarting", attempt, *(cause or (None, None)))
                # A head whose worker died cannot shut down cleanly (it waits on the lost RPC
                # connection): a short grace, then SIGKILL.
                self._down_quietly(grace=DEAD_GRACE)
                self.emit(
                    "restarting",
                    "cluster",
                    f"restart {self.restarts} in {delay:.1f} s (stops everything, then workers, then the head)",
                    delay=delay,
                )
                if self.clock.wait(self._stop, delay):
                    break
        finally:
            try:
                self._down_quietly()
                # a first start that failed stopped what it started itself: its error says enough
                self.emit("stopping", "cluster", "stopped every process", quiet=first and not self.restarts)
            finally:
                (self.log_file.parent / SUPERVISION_FILE).unlink(missing_ok=True)
                self.lock.release()

    def _report(self, death: Death) -> None:
        """One ``died`` line per dead process, the root cause first, each later one saying why."""
        self.emit("died", death.node, death.message, tail=death.tail, root_cause=True)
        for other in death.others:
            self.emit("died", other.node, other.message, tail=other.tail, root_cause=False, after=death.node)

    def _watch(self, poll: float) -> Death | None:
        assert self.state is not None
        while not self.clock.wait(self._stop, poll):
            death = find_dead(self.state, edges=self.edges)
            if death is not None and death.role == "gateway" and not death.others and self._gateway_back(death):
                continue
            if death is not None and self._replica_back(death):
                continue
            if death is not None:
                return death
        return None

    def _gateway_back(self, death: Death) -> bool:
        """Restart a dead gateway alone; False (restart everything) when that fails."""
        assert self.state is not None
        self.emit("died", death.node, death.cause, tail=death.tail)
        self.record("restarting", 1, death.short, death.message)
        try:
            self.state = restart_gateway(self.spec, self.state, edges=self.edges)
        except SplitserveError as exc:
            self.emit("restart_failed", "gateway", str(exc))
            return False
        self.restarts += 1
        self.record("serving")
        self.emit("restarted", "gateway", f"gateway serving {self.state.endpoint} again")
        return True

    def _replica_back(self, death: Death) -> bool:
        """With replicas: when the dead processes all belong to one replica, stop what is left of it
        and start that replica alone (the others and the gateway keep serving); False (restart
        everything) when they span replicas or the restart fails."""
        assert self.state is not None
        state = self.state
        dead = {death.node, *(d.node for d in death.others)}
        replica = replica_of(state, dead)
        if replica is None:
            return False
        name = str(replica["name"])
        nodes = {str(replica["server"]), *(str(w) for w in replica.get("workers", []))}
        self._report(death)
        since = self.replica_since.get(name)
        if since is not None and self.clock.monotonic() - since >= self.spec.supervise.stable_seconds:
            self.replica_attempts[name] = 0  # it had served long enough: the first backoff again
        attempt = self.replica_attempts.get(name, 0)
        self.record("restarting", attempt + 1, death.short, death.message)
        ssh = state.ssh
        for rec in state.processes:
            if rec.node in nodes and rec.node not in dead:
                try:
                    stop(self.edges.node(rec.host, ssh), rec.ref, grace=DEAD_GRACE, clock=self.clock)
                except ClusterError:
                    pass
        delay = self.backoff.delay(attempt)
        self.replica_attempts[name] = attempt + 1
        self.emit(
            "restarting",
            name,
            f"restart of replica {name} ({', '.join(sorted(nodes))}) in {delay:.1f} s; the other replicas keep serving",
            delay=delay,
        )
        if self.clock.wait(self._stop, delay):
            return True  # asked to stop: the loop ends and everything is stopped
        try:
            self.state = restart_replica(self.spec, state, name, edges=self.edges)
        except SplitserveError as exc:
            self.emit("restart_failed", name, str(exc))
            return False
        self.restarts += 1
        self.replica_since[name] = self.clock.monotonic()
        self.record("serving")
        self.emit("restarted", name, f"replica {name} serves again at {replica.get('url', '')}")
        return True

    def _down_quietly(self, grace: float = 10.0) -> None:
        try:
            down(self.spec, grace=grace, edges=self.edges)
        except SplitserveError as exc:
            self.emit("stop_failed", "cluster", str(exc))


def replica_of(state: ClusterState, nodes: set[str]) -> dict[str, Any] | None:
    """The replica (its row in the state) that every one of ``nodes`` belongs to, or None (no
    replicas, a node of none, e.g. the gateway, or nodes of several replicas). llama.cpp's rows
    name their ``leader``; a vLLM / SGLang replica is its server process(es) on its nodes."""
    engines = state.extra.get("backend") in ("vllm", "sglang")
    for row in state.extra.get("replicas", []):
        own = {str(row.get("server")), *(str(w) for w in row.get("workers", []))}
        if nodes <= own and ("leader" in row or engines):
            return dict(row)
    return None


def supervise(
    spec: ClusterSpec, *, engine: Engine | None = None, on_event: OnEvent | None = None, preflight: bool = True
) -> Supervisor:
    """A :class:`Supervisor` for ``spec``; call ``.run()`` (blocks) and ``.stop()``."""
    return Supervisor(spec, engine=engine, on_event=on_event, preflight=preflight)


def read_supervisor_log(spec: ClusterSpec) -> list[dict[str, object]]:
    path = cluster_state_dir(spec) / SUPERVISOR_LOG
    try:
        return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
    except FileNotFoundError:
        return []


SUPERVISOR_OUT = "supervisor.out"
"""The background supervisor's own output (its events, as `up --foreground` prints them)."""


@dataclass
class BackgroundSupervisor:
    """A supervisor started in the background by plain `up` (`splitserve run`, its own session,
    its output in ``<state>/supervisor.out``); :meth:`follow` relays that output until the cluster
    serves or the supervisor exits."""

    process: subprocess.Popen[bytes]
    root: Path
    out: Path
    offset: int
    started: float

    def new_output(self) -> str:
        try:
            with open(self.out, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except OSError:
            return ""
        cut = data.rfind(b"\n") + 1  # whole lines only
        self.offset += cut
        return data[:cut].decode("utf-8", "replace")

    def serving(self) -> ClusterState | None:
        """The cluster's state once this supervisor holds it and it is ready, else None."""
        from ._state import lock_holder, read_state

        holder = lock_holder(self.root)
        if holder is None or holder.pid != self.process.pid:
            return None
        try:
            state = read_state(self.root)
        except ClusterError:
            return None
        if state is None or state.phase != "ready" or (state.ready_at or 0) < self.started:
            return None
        doing = read_supervision(self.root)
        return state if doing is not None and doing.get("phase") == "serving" else None

    def follow(self, on_line: Callable[[str], None], poll: float = 0.1) -> ClusterState | None:
        """Relay the supervisor's output until the cluster serves (its state) or the supervisor
        exits (None: its last line says why)."""
        import time

        while True:
            for line in self.new_output().splitlines():
                on_line(line)
            state = self.serving()
            if state is not None:
                return state
            if self.process.poll() is not None:
                rest = self.new_output()
                try:
                    rest += self.out.read_bytes()[self.offset :].decode("utf-8", "replace")
                except OSError:
                    pass
                for line in rest.splitlines():
                    on_line(line)
                return None
            time.sleep(poll)

    def stop(self, timeout: float = SUPERVISOR_STOP_TIMEOUT) -> int:
        """SIGTERM the supervisor (it stops what it started) and wait for it."""
        import signal

        try:
            self.process.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def start_background(spec_file: Path, root: Path, *, preflight: bool = True) -> BackgroundSupervisor:
    """Start `splitserve run -c SPEC` detached (a new session: it outlives the terminal and its
    Ctrl-C), writing to ``<root>/supervisor.out``; it launches the cluster and supervises it."""
    import os
    import sys
    import time

    root.mkdir(parents=True, exist_ok=True)
    out = root / SUPERVISOR_OUT
    with open(out, "ab") as fh:
        fh.write(f"# splitserve: background supervisor started {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
        offset = fh.tell()
        argv = [sys.executable, "-m", "splitserve", "run", "-c", str(spec_file.resolve()), "--background"]
        if not preflight:
            argv.append("--skip-preflight")
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "COLUMNS": "200"},
        )
    return BackgroundSupervisor(proc, root, out, offset, time.time() - 1.0)


def read_supervision(root: Path) -> dict[str, object] | None:
    """What the supervisor of the cluster in ``root`` says it is doing (None: no file, or torn)."""
    try:
        data = json.loads((root / SUPERVISION_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


__all__ = [
    "SUPERVISION_FILE",
    "SUPERVISOR_OUT",
    "BackgroundSupervisor",
    "Backoff",
    "Death",
    "Supervisor",
    "find_dead",
    "read_supervision",
    "read_supervisor_log",
    "start_background",
    "supervise",
]
