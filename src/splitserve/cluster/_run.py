"""Bringing a cluster up and down: executes a :class:`LaunchPlan`.

`up` refuses a cluster whose supervisor (`up --foreground` / `run`) holds its
state folder's lock (`down` asks that supervisor to stop instead); otherwise it
stops what an earlier `up` of the same cluster left running (from its
state folder only), runs the preflight checks, copies the engine to remote
workers that lack it, starts the RPC workers, waits for their ports, asks each
for its RPC protocol version, starts llama-server and waits for real readiness
(``/health`` 200 and a one-token completion). Any failure stops everything it started and raises a
:class:`NodeError` naming the node and the cause.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .._errors import ClusterError, NodeError, NotRunningError, SpecError, SplitserveError
from ..engine import Engine, EngineClient, EngineHTTPError, EngineUnavailable, get_engine
from ._commands import (
    LaunchPlan,
    ProcessPlan,
    cluster_state_dir,
    default_gateway_port,
    gateway_plan,
    kv_unified_asked,
    launch_plan,
    model_architecture,
    process_env,
    spec_ports,
)
from ._distribute import is_engine_path, node_engine, prepare_engines, rpc_hello
from ._logparse import load_progress, load_warnings, parse_load_report
from ._spec import ClusterSpec, WorkerSpec, check_binds, check_files, check_server_auth, is_local_host
from ._ssh import exit_status_from_log
from ._state import (
    ClusterState,
    LockHolder,
    ProcessRecord,
    clear_state,
    lock_holder,
    read_state,
    supervised_message,
    write_state,
)
from ._transport import ProcessRef, Transport, stop, transport_for, wait_reaped


@dataclass
class Event:
    """Something `up` did or saw, for progress displays and tests."""

    kind: str
    """``stale``, ``preflight``, ``engine``, ``smoke``, ``gateway_port``, ``gateway_started``, ``worker_started``,
    ``worker_ready``, ``protocol``, ``head_started``, ``loading``, ``gateway_ready``, ``ready``, ``warning``
    (a setting or a load-log line that costs speed or quality, with the fix); from
    supervision also ``died``, ``restarting``, ``restarted`` / ``restart_failed`` (the gateway
    alone), ``gave_up`` and ``stopping``."""
    node: str
    message: str


OnEvent = Callable[[Event], None]


def resolve_engines(spec: ClusterSpec, engine: Engine | None = None) -> dict[str, Engine]:
    """The engine of every node: a per-node override, else the cluster's."""
    cache: dict[str, Engine] = {}

    def pick(name: str | None) -> Engine:
        key = name if name and name != "default" else None
        if key is None and engine is not None:
            return engine
        if key not in cache:
            cache[key or ""] = get_engine(key)
        return cache[key or ""]

    engines = {"head": pick(spec.head.engine or spec.engine)}
    for w in spec.workers:
        if w.remote:
            # Paths on the worker's own node: its own build, or where the head's copy goes.
            own = w.engine if w.engine and is_engine_path(w.engine) else None
            engines[w.name] = node_engine(w, None if own else pick(w.engine or spec.engine), own)
        else:
            engines[w.name] = pick(w.engine or spec.engine)
    return engines


def worker_transport(spec: ClusterSpec, worker: WorkerSpec) -> Transport:
    return transport_for(worker.host, spec.ssh)


_ERROR_LINE = re.compile(
    r"\berror\b|\bfailed\b|\bfailure\b|cannot|unable|abort|terminate|exception|"
    r"requires|not supported|invalid|out of memory",
    re.IGNORECASE,
)
# llama.cpp's wrappers around the real cause ("failed to create context", "exiting due to model
# loading error"): named only when nothing more specific was logged.
_GENERIC = re.compile(
    r"exiting due to|failed to (create|load|init)|common_init_|load_model:|"
    r"encountered an error while trying to fit",
    re.IGNORECASE,
)


def _log_cause(text: str) -> str:
    """The most telling line at the end of a process's log: the last specific error, else the
    last error of any kind, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("# splitserve:")]
    tail = lines[-40:]
    hits = [ln for ln in tail if _ERROR_LINE.search(ln)]
    specific = [ln for ln in hits if not _GENERIC.search(ln)]
    if specific or hits:
        return (specific or hits)[-1][:300]
    return tail[-1][:300] if tail else "no output"


def port_in_use(bind: str, port: int) -> bool:
    """Whether a local TCP port cannot be bound (someone listens there)."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((bind, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            if exc.errno == errno.EADDRNOTAVAIL:
                raise ClusterError(f"{bind} is not an address of this machine") from None
            raise
    return False


def port_answers(bind: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((bind, port), timeout=timeout):
            return True
    except OSError:
        return False


class _Launch:
    """One `up`: the processes started so far, so a failure can stop them all."""

    def __init__(self, spec: ClusterSpec, plan: LaunchPlan, engine_key: str, on_event: OnEvent) -> None:
        self.spec = spec
        self.plan = plan
        self.on_event = on_event
        self.started: list[tuple[ProcessPlan, Transport, ProcessRef]] = []
        self.plan_engine_protocol: str | None = None
        self.should_stop: Callable[[], bool] | None = None
        self.state = ClusterState(
            name=spec.name,
            spec_file=str(spec.source_file) if spec.source_file else None,
            model=str(spec.model),
            endpoint=plan.endpoint,
            engine=engine_key,
            started_at=time.time(),
            engine_endpoint=plan.engine_endpoint,
        )
        self.state.extra["ssh"] = spec.ssh.model_dump(mode="json")

    def spawn(self, proc: ProcessPlan) -> ProcessRef:
        transport = transport_for(proc.host, self.spec.ssh)
        transport.new_log(proc.log, f"# splitserve: {proc.shell()}")
        env = process_env(proc) if is_local_host(proc.host) else dict(proc.env)
        ref = transport.spawn(proc.argv, env, proc.log)
        self.started.append((proc, transport, ref))
        self.state.processes.append(_record(proc, ref))
        write_state(self.plan.state_dir, self.state)
        return ref

    def died(self, proc: ProcessPlan, transport: Transport, ref: ProcessRef, during: str) -> NodeError:
        return NodeError(proc.node, death_message(proc.role, transport, ref, proc.log, during))

    def check_alive(self, during: str) -> None:
        if self.should_stop is not None and self.should_stop():
            raise ClusterError(f"cluster {self.spec.name}: stopped {during} (asked to stop)")
        # Workers first: a dead worker is the root cause of a head that then fails.
        for proc, transport, ref in sorted(self.started, key=lambda t: t[0].role != "rpc"):
            if not transport.alive(ref):
                raise self.died(proc, transport, ref, during)

    def stop_all(self) -> list[str]:
        leftovers = []
        for proc, transport, ref in reversed(self.started):
            if not stop(transport, ref):
                leftovers.append(f"{proc.node} (pid {ref.pid})")
        wait_reaped([(t, r) for _p, t, r in self.started])
        return leftovers


def _record(proc: ProcessPlan, ref: ProcessRef) -> ProcessRecord:
    return ProcessRecord(
        node=proc.node,
        role=proc.role,
        host=proc.host,
        pid=ref.pid,
        start_ticks=ref.start_ticks,
        bind=proc.bind,
        port=proc.port,
        log=str(proc.log),
        argv=proc.argv,
    )


def death_message(role: str, transport: Transport, ref: ProcessRef, log: Path, during: str) -> str:
    """``ggml-rpc-server was killed by signal 9 during load: <last telling log line> (log: ...)``."""
    text = transport.read_log(log, max_bytes=64 << 10)
    code = transport.exit_code(ref)
    if code is None:
        code = exit_status_from_log(text)
    what = {"server": "llama-server", "gateway": "the splitserve gateway"}.get(role, "ggml-rpc-server")
    how = (
        f"exited with code {code}"
        if code is not None and code >= 0
        else (f"was killed by signal {-code}" if code is not None else "died")
    )
    where = f"{transport.host}:{log}" if transport.host != "local" else str(log)
    return f"{what} {how} {during}: {_log_cause(text)} (log: {where})"


def stop_recorded(state: ClusterState, grace: float = 10.0) -> list[str]:
    """Stop every recorded process that is still ours (SIGTERM, SIGKILL after ``grace`` seconds);
    returns the nodes stopped."""
    stopped = []
    # The gateway first (clients get a refused connection, not a half-dead engine), then the head.
    rank = {"gateway": 0, "server": 1}
    order = sorted(state.processes, key=lambda p: rank.get(p.role, 2))
    done: list[tuple[Transport, ProcessRef]] = []
    for rec in order:
        transport = transport_for(rec.host, state.extra.get("ssh"))
        if transport.alive(rec.ref):
            if not stop(transport, rec.ref, grace=grace):
                raise ClusterError(f"{rec.node}: pid {rec.pid} did not stop after SIGKILL")
            stopped.append(rec.node)
        done.append((transport, rec.ref))
    wait_reaped(done)
    return stopped


def up(
    spec: ClusterSpec,
    *,
    engine: Engine | None = None,
    on_event: OnEvent | None = None,
    tensor_split: list[float] | None = None,
    worker_timeout: float = 60.0,
    preflight: bool = True,
    should_stop: Callable[[], bool] | None = None,
) -> ClusterState:
    """Start the cluster and wait until it serves; returns its recorded state.

    ``preflight=False`` skips the checks of :func:`~splitserve.cluster.preflight` (`--skip-preflight`).
    A cluster whose supervisor (`up --foreground` / `run`, another process) holds its state
    folder is refused, with nothing touched. ``should_stop`` (the supervisor's) is asked while
    the cluster starts: when it says yes, what was started is stopped and ClusterError raised.
    """
    t0 = time.monotonic()
    emit = on_event or (lambda _e: None)
    check_binds(spec)
    check_server_auth(spec)
    check_files(spec)
    _check_gateway_auth(spec)
    serving_warnings = check_serving(spec)
    root = cluster_state_dir(spec)
    holder = lock_holder(root)
    if holder is not None and holder.pid != os.getpid():
        raise ClusterError(supervised_message(spec.name, holder))
    engines = resolve_engines(spec, engine)

    old = read_state(root)
    if old is not None:
        stopped = stop_recorded(old)
        if stopped:
            emit(Event("stale", "cluster", f"stopped stale processes of {spec.name}: {', '.join(stopped)}"))
        clear_state(root)

    for warning in serving_warnings:
        emit(Event("warning", "head", warning))
    if preflight:
        _preflight_or_raise(spec, engines, emit)
    engines = prepare_engines(
        spec, engines, lambda w: worker_transport(spec, w), lambda node, msg: emit(Event("engine", node, msg))
    )
    if spec.drop_caches:
        from ._preflight import drop_page_caches

        for node, msg in drop_page_caches(spec):
            emit(Event("drop_caches", node, msg))
    if tensor_split is None:
        # The planner refuses a spec that will not fit (with the numbers per node) and, when the
        # spec gives memory sizes but no split, fills in --tensor-split.
        from ..plan import split_for_up

        tensor_split = split_for_up(spec)
    plan = launch_plan(spec, engines, tensor_split, gateway_port=_gateway_port(spec, emit))

    for proc in plan.processes:
        if is_local_host(proc.host):
            busy = port_in_use(proc.bind, proc.port)
        else:
            from ._preflight import probe_port

            busy = probe_port(proc.bind, proc.port) != "closed"
        if busy:
            raise NodeError(proc.node, f"port {proc.port} on {proc.bind} is already in use by another process")

    launch = _Launch(spec, plan, engines["head"].key, emit)
    launch.should_stop = should_stop
    launch.plan_engine_protocol = engines["head"].rpc_protocol
    try:
        _start(launch, spec, plan, emit, worker_timeout)
    except BaseException as exc:
        leftovers = launch.stop_all()
        launch.state.phase = "failed"
        clear_state(root)
        if leftovers and isinstance(exc, SplitserveError):
            raise ClusterError(f"{exc}; could not stop: {', '.join(leftovers)}") from None
        raise
    launch.state.up_seconds = round(time.monotonic() - t0, 3)
    write_state(root, launch.state)
    return launch.state


def _start(launch: _Launch, spec: ClusterSpec, plan: LaunchPlan, emit: OnEvent, worker_timeout: float) -> None:
    if plan.gateway is not None:
        # First: it needs nothing from the engine until a request comes, and its start-up (Python
        # imports, ~1-2 s) then overlaps the workers' and the model's load instead of adding to it.
        launch.spawn(plan.gateway)
        emit(Event("gateway_started", "gateway", f"splitserve gateway on {plan.endpoint}"))
    for proc in plan.workers:
        launch.spawn(proc)
        emit(Event("worker_started", proc.node, f"ggml-rpc-server on {proc.bind}:{proc.port}"))
    deadline = time.monotonic() + worker_timeout
    waiting = list(plan.workers)
    while waiting:
        launch.check_alive("at start")
        for proc in list(waiting):
            if port_answers(proc.bind, proc.port, timeout=0.2):
                waiting.remove(proc)
                emit(Event("worker_ready", proc.node, f"{proc.bind}:{proc.port} answers"))
        if waiting and time.monotonic() > deadline:
            names = ", ".join(p.node for p in waiting)
            raise NodeError(
                waiting[0].node,
                f"port {waiting[0].port} on {waiting[0].bind} did not answer "
                f"within {worker_timeout:.0f} s (waiting for: {names})",
            )
        if waiting:
            time.sleep(0.01)
    _check_protocols(launch, plan, emit)

    head = plan.head
    head_started = time.monotonic()
    launch.spawn(head)
    emit(Event("head_started", "head", f"llama-server loading {spec.model.name}"))
    _wait_ready(launch, spec, head, emit)
    launch.state.load_seconds = round(time.monotonic() - head_started, 3)
    if plan.gateway is not None:
        wait_gateway(plan.endpoint, plan.gateway, lambda: launch.check_alive("at start"))
        emit(
            Event(
                "gateway_ready", "gateway", f"{plan.endpoint}/v1 serves (tool calls and reasoning parsed by splitserve)"
            )
        )
    launch.state.ready_at = time.time()
    launch.state.phase = "ready"
    text = transport_for(head.host, spec.ssh).read_log(head.log, max_bytes=8 << 20)
    launch.state.extra["memory"] = [d.as_dict() for d in parse_load_report(text).devices]
    found = load_warnings(text)
    launch.state.extra["warnings"] = [w.as_dict() for w in found]
    for w in found:
        emit(Event("warning", "head", w.line()))
    via = f" (llama-server: {plan.engine_endpoint})" if plan.gateway is not None else ""
    emit(Event("ready", "head", f"{plan.endpoint} ready in {launch.state.load_seconds:.1f} s{via}"))


def _wait_ready(launch: _Launch, spec: ClusterSpec, head: ProcessPlan, emit: OnEvent) -> None:
    transport = transport_for(head.host, spec.ssh)
    deadline = time.monotonic() + spec.load_timeout
    url = launch.plan.engine_endpoint or launch.plan.endpoint
    last_progress = ""
    with EngineClient(url, api_key=spec.server.api_key, timeout=60.0) as client:
        while True:
            launch.check_alive("during load")
            try:
                status = client.health_status()
            except EngineUnavailable:
                status = 0
            if status == 200:
                break
            progress = load_progress(transport.read_log(head.log, max_bytes=64 << 10))
            if progress and progress != last_progress:
                last_progress = progress
                emit(Event("loading", "head", progress))
            if time.monotonic() > deadline:
                raise NodeError(
                    "head",
                    f"llama-server was not ready within {spec.load_timeout:.0f} s "
                    f"(last: {last_progress or 'no progress in its log'}; log: {head.log})",
                )
            time.sleep(0.02)
        try:
            client.complete("Hello", n_predict=1, cache_prompt=False)
        except (EngineHTTPError, EngineUnavailable) as exc:
            launch.check_alive("during the first completion")
            raise NodeError("head", f"the first one-token completion failed: {exc}") from None


GATEWAY_TIMEOUT = 60.0
"""Seconds the gateway gets, once llama-server is ready, to answer ``/health`` with 200."""


def wait_gateway(endpoint: str, gw: ProcessPlan, check_alive: Callable[[], None]) -> None:
    """The gateway answers ``/health`` 200: it is up and reaches llama-server."""
    import httpx

    deadline = time.monotonic() + GATEWAY_TIMEOUT
    url = endpoint + "/health"
    last = "no answer"
    while True:
        check_alive()
        try:
            r = httpx.get(url, timeout=2.0)
            if r.status_code == 200:
                break
            last = f"HTTP {r.status_code}: {r.text[:200]}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        if time.monotonic() > deadline:
            raise NodeError(
                "gateway",
                f"the gateway on {gw.bind}:{gw.port} was not ready within "
                f"{GATEWAY_TIMEOUT:.0f} s (last: {last}; log: {gw.log})",
            )
        time.sleep(0.05)


def restart_gateway(spec: ClusterSpec, state: ClusterState) -> ClusterState:
    """Start the gateway of a running cluster again (it died; the engine still serves)."""
    old = state.gateway
    if old is None:
        raise ClusterError(f"cluster {spec.name} runs no gateway")
    proc = gateway_plan(spec, state.engine_url, Path(old.log), port=old.port)
    transport = transport_for("local", spec.ssh)
    transport.new_log(proc.log, f"# splitserve: {proc.shell()}")
    ref = transport.spawn(proc.argv, process_env(proc), proc.log)
    state.processes = [p for p in state.processes if p.role != "gateway"] + [_record(proc, ref)]
    write_state(cluster_state_dir(spec), state)

    def alive() -> None:
        if not transport.alive(ref):
            raise NodeError("gateway", death_message("gateway", transport, ref, proc.log, "at restart"))

    try:
        wait_gateway(state.endpoint, proc, alive)
    except BaseException:
        stop(transport, ref)
        raise
    return state


def _gateway_port(spec: ClusterSpec, emit: OnEvent) -> int | None:
    """The spec's gateway port; without one, 8000 unless that is taken, then a free port."""
    g = spec.gateway
    if not g.enabled or g.port is not None:
        return None
    ours = spec_ports(spec)
    first = default_gateway_port(spec)
    if not port_in_use(g.host, first):
        return first
    family = socket.AF_INET6 if ":" in g.host else socket.AF_INET
    while True:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((g.host, 0))
            port = int(s.getsockname()[1])
        if port not in ours:
            break
    emit(
        Event(
            "gateway_port",
            "gateway",
            f"port {first} is taken; the gateway listens on {port} (set gateway.port to choose)",
        )
    )
    return port


def check_serving(spec: ClusterSpec) -> list[str]:
    """What the model allows, before anything starts: a speculation type it cannot use is a
    :class:`SpecError` (one line, naming the key, the reason and the types it can use); settings
    that make MiniMax-M3 run dense attention, and synthetic acceptance, come back as warnings."""
    from ..plan import msa_warnings, speculation_problem

    s = spec.server
    problem = speculation_problem(spec) if s.speculation else None
    if problem:
        raise SpecError(problem)
    warnings: list[str] = []
    arch = model_architecture(spec.model)
    if arch:
        # flash_attn unset: the command line says `--flash-attn on` for these architectures
        fa = None if s.flash_attn == "auto" else s.flash_attn != "off"
        warnings += msa_warnings(arch, flash_attn=fa, kv_unified=kv_unified_asked(s), parallel=s.parallel)
    if s.speculation and (s.spec_synth_len is not None or s.spec_synth_rates is not None):
        warnings.append(
            "server.spec_synth_len / spec_synth_rates: synthetic acceptance, for benchmarking only: "
            "the text served is NOT the model's output; remove them to serve"
        )
    return warnings


def _check_gateway_auth(spec: ClusterSpec) -> None:
    """A gateway beyond loopback needs a key: refused before anything starts."""
    import os

    from .._net import is_loopback

    g = spec.gateway
    if not g.enabled or g.api_key or g.keys_file or os.environ.get("SPLITSERVE_API_KEY"):
        return
    if not is_loopback(g.host):
        where = str(spec.source_file or "<spec>")
        raise SpecError(
            f"{where}: gateway.host = {g.host!r} is beyond loopback: set gateway.api_key or "
            "gateway.keys_file (or SPLITSERVE_API_KEY); the gateway serves other machines only "
            "with auth"
        )


def _preflight_or_raise(spec: ClusterSpec, engines: dict[str, Engine], emit: OnEvent) -> None:
    from ._preflight import COPIED, run_checks

    # Ports are checked below, after the stale processes are gone, with the historic message.
    rows = run_checks(spec, engines, skip=("ports",))
    for row in rows:
        if row.status != "pass":
            emit(Event("preflight", row.node, f"{row.status}: {row.check}: {row.message}"))
        elif (row.check == "smoke" or (row.check == "engine" and COPIED in row.message)) and row.node != "head":
            emit(Event(row.check, row.node, row.message))  # what preflight did there: copied, tested
    failed = [r for r in rows if r.status == "fail"]
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more; see `splitserve preflight`)" if len(failed) > 1 else ""
        raise NodeError(first.node, f"preflight {first.check}: {first.message}; fix: {first.fix}{more}")
    emit(
        Event(
            "preflight",
            "cluster",
            f"{len(rows)} checks passed"
            if not any(r.status == "warn" for r in rows)
            else f"{len(rows)} checks, warnings above",
        )
    )


def _check_protocols(launch: _Launch, plan: LaunchPlan, emit: OnEvent) -> None:
    """Every worker answers HELLO with the head's protocol version, before the head starts."""
    want = launch.plan_engine_protocol
    for proc in plan.workers:
        try:
            got = rpc_hello(proc.bind, proc.port)
        except (OSError, ClusterError) as exc:
            raise NodeError(proc.node, f"no RPC HELLO answer from {proc.bind}:{proc.port}: {exc}") from None
        if want and got != want:
            raise NodeError(
                proc.node,
                f"its ggml-rpc-server speaks RPC protocol {got}, the head's engine "
                f"{want}: use the same llama.cpp build on every node",
            )
        emit(Event("protocol", proc.node, f"RPC protocol {got}"))


SUPERVISOR_STOP_TIMEOUT = 120.0
"""Seconds `down` waits for a supervisor it asked to stop (it stops every process first)."""


def down(
    spec_or_root: ClusterSpec | Path, grace: float = 10.0, supervisor_timeout: float = SUPERVISOR_STOP_TIMEOUT
) -> list[str]:
    """Stop exactly the processes `up` recorded; returns the nodes stopped. Each gets SIGTERM,
    then SIGKILL after ``grace`` seconds. A cluster held by a supervisor (another process) is
    stopped by the supervisor: `down` sends it SIGTERM and waits until it has exited."""
    root = cluster_state_dir(spec_or_root) if isinstance(spec_or_root, ClusterSpec) else spec_or_root
    holder = lock_holder(root)
    if holder is not None and holder.pid != os.getpid():
        return _stop_supervisor(root, holder, supervisor_timeout)
    state = read_state(root)
    if state is None:
        return []
    stopped = stop_recorded(state, grace=grace)
    clear_state(root)
    return stopped


def _stop_supervisor(root: Path, holder: LockHolder, timeout: float) -> list[str]:
    """SIGTERM the supervisor holding ``root`` and wait for its lock to go; the nodes that ran."""
    import signal

    from ._transport import start_ticks

    state = read_state(root)
    running = []
    if state is not None:
        for rec in state.processes:
            try:
                if transport_for(rec.host, state.extra.get("ssh")).alive(rec.ref):
                    running.append(rec.node)
            except ClusterError:
                running.append(rec.node)
    if holder.pid <= 0 or (holder.start_ticks is not None and start_ticks(holder.pid) != holder.start_ticks):
        raise ClusterError(
            f"{root}: the supervisor lock is held, but not by the process it names "
            f"({holder.describe()}); stop that supervisor yourself"
        )
    try:
        os.kill(holder.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while lock_holder(root) is not None:
        if time.monotonic() > deadline:
            raise ClusterError(
                f"the supervisor {holder.describe()} did not stop within {timeout:.0f} s of "
                f"SIGTERM; stop it with: kill {holder.pid}"
            )
        time.sleep(0.1)
    # The supervisor stops every process before it lets go of the lock; anything it could not
    # stop is still recorded.
    left = read_state(root)
    if left is not None:
        stop_recorded(left)
        clear_state(root)
    return running


def require_state(spec: ClusterSpec) -> ClusterState:
    state = read_state(cluster_state_dir(spec))
    if state is None:
        raise NotRunningError(
            f"cluster {spec.name} is not running (no state in {cluster_state_dir(spec)}); start it with `splitserve up`"
        )
    return state


__all__ = [
    "Event",
    "check_serving",
    "death_message",
    "down",
    "port_in_use",
    "require_state",
    "resolve_engines",
    "restart_gateway",
    "stop_recorded",
    "up",
    "wait_gateway",
    "worker_transport",
]
