"""Carrying out a :class:`~._commands.LaunchPlan`: the one place that starts a cluster's processes,
llama.cpp's and vLLM / SGLang's alike (their own step kinds come from :class:`~._engines_run.EngineSteps`).

`up`, the supervisor's gateway restart, bench's workers-only mode and `plan --measure` each build
a plan (:mod:`._launch`, pure) and hand it to :class:`Executor`, which runs its steps through
the I/O edges in :class:`Edges` — nodes (:class:`~splitserve._node.Node`), the network (ports, RPC
HELLO), the engine's HTTP API, the gateway's ``/health`` and a clock. Tests give fake edges
(:class:`~._fake.FakeNetwork`, :class:`~splitserve.engine.FakeEngine`, a fake clock) and run
`up`, supervision and restarts in microseconds.

:func:`gather_facts` is the other half of `up`'s I/O: what the plan needs to know of the world
(engines, the model's architecture, the planner's split, ports held, a stale earlier run).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from .._errors import ClusterError, NodeError, SplitserveError
from ..engine import CompletionRequest, Engine, EngineHTTPError, EngineUnavailable
from ._checks import CheckRow
from ._commands import (
    LaunchPlan,
    cluster_state_dir,
    default_gateway_port,
    model_architecture,
    rpc_endpoint,
    spec_ports,
)
from ._down import (
    Event,
    OnEvent,
    check_serving,
    check_startable,
    resolve_engines,
    stop_recorded,
)
from ._edges import REAL_EDGES, Edges, EngineProbe, Network, RealNetwork
from ._engines_facts import gather_engine_facts
from ._engines_run import SERVING_ROLES, EngineSteps, FirstToken, first_token
from ._launch import LaunchFacts, RemoteBuild, Step, gateway_restart_plan, plan_launch, workers_plan
from ._logparse import load_progress, load_warnings, parse_load_report
from ._preflight import COPIED, run_checks
from ._replicas import replica_groups
from ._runner import GATEWAY_TIMEOUT, process_record
from ._spec import ClusterSpec
from ._spec_engines import engine_table
from ._state import ClusterState, clear_state, lock_holder, read_state, supervised_message, write_state

# -- facts --------------------------------------------------------------------------------------


def _remote_engine_facts(
    spec: ClusterSpec, engines: dict[str, Engine], edges: Edges, leaders: set[str] | None = None
) -> dict[str, RemoteBuild]:
    from ._distribute import check_node_engine

    out = {}
    for w in spec.workers:
        if not w.remote:
            continue
        try:
            server = w.name in (leaders or set())
            check = check_node_engine(spec, w, engines[w.name], edges.node(w.host, spec.ssh), server)
        except ClusterError:
            continue  # unreachable now: the preflight says so, and the plan checks it as a step
        own = engines[w.name].provenance.get("node_path")
        binary = check.detail.split()[0] if own and check.present else None
        out[w.name] = RemoteBuild(check.present, check.same, check.protocol, check.detail, binary)
    return out


def gather_facts(
    spec: ClusterSpec,
    engine: Engine | None = None,
    edges: Edges = REAL_EDGES,
    *,
    probe_remote: bool = True,
    plan_split: bool = True,
) -> LaunchFacts:
    """What `up` needs to know before it decides: engines, the model's architecture and the planner's
    split (its header), a stale earlier run, the gateway's port. Reads only; changes nothing.

    ``probe_remote=False`` skips asking remote workers about their engines (a dry-run that cannot
    reach them); the plan then checks them as a step. ``plan_split=False`` leaves out the planner
    (a dry-run where the model file is not there). A vLLM / SGLang spec's facts are every node's
    (:func:`~._engines_facts.gather_engine_facts`: one shell call per node)."""
    if engine_table(spec) is not None:
        facts = LaunchFacts(engines={}, nodes=gather_engine_facts(spec, edges))
        _stale(spec, facts, edges)
        return facts
    serving_warnings = check_serving(spec)  # a spec the model cannot serve is refused first
    engines = resolve_engines(spec, engine)
    facts = LaunchFacts(engines=engines, architecture=model_architecture(spec.model))
    facts.serving_warnings = serving_warnings
    facts.model_missing = not spec.model.is_file()
    if spec.server.tensor_split is None and plan_split:
        # The planner refuses a spec that will not fit (with the numbers per node) and, when the
        # spec gives memory sizes but no split, fills in --tensor-split.
        from ._planning import split_for_up

        try:
            facts.planned_split = split_for_up(spec)
        except SplitserveError as exc:
            facts.refusal = exc  # refused as a step, after the warnings (as `up` always did)
    _stale(spec, facts, edges)
    g = spec.gateway
    if g.enabled and g.port is None:
        first = default_gateway_port(spec)
        if edges.net.port_busy("local", g.host, first) and first not in facts.stale_ports:
            facts.busy_ports.add(first)
            facts.spare_port = edges.net.spare_port(g.host, spec_ports(spec))
    from ._replicas import spec_topology

    facts.topology = spec_topology(spec)
    leaders = {r.leader for r in replica_groups(spec, facts.topology)}
    if probe_remote:
        facts.remote_engines = _remote_engine_facts(spec, engines, edges, leaders)
    return facts


def _stale(spec: ClusterSpec, facts: LaunchFacts, edges: Edges) -> None:
    """The nodes (and ports) whose processes an earlier `up` of this cluster left running."""
    old = read_state(cluster_state_dir(spec))
    if old is None:
        return
    for rec in old.processes:
        try:
            running = edges.node(rec.host, old.ssh).alive(rec.ref)
        except ClusterError:
            running = True
        if running:
            facts.stale.append(rec.node)
            facts.stale_ports.add(rec.port)


def preflight_or_raise(
    spec: ClusterSpec, engines: dict[str, Engine], emit: OnEvent, rows: list[CheckRow] | None = None
) -> None:
    """Report the preflight's rows (``rows``: the plan's, from the facts gathered; default: run
    the checks now) and raise for the first that failed."""
    # Ports are checked by the plan's steps, after the stale processes are gone, with the historic message.
    rows = run_checks(spec, engines, skip=("ports",)) if rows is None else rows
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


# -- the executor -------------------------------------------------------------------------------


def _role_name(role: str) -> str:
    from ._spec_engines import ROLE_NAMES

    return {"server": "llama-server", "gateway": "the gateway", "rpc": "ggml-rpc-server", **ROLE_NAMES}.get(role, role)


class Executor(EngineSteps):
    """Runs a plan's steps (any backend's); remembers what it started so a failure stops it all.

    ``first_token`` is how a vLLM / SGLang engine's readiness is asked (a fake in tests)."""

    def __init__(
        self,
        spec: ClusterSpec,
        plan: LaunchPlan,
        state: ClusterState,
        edges: Edges = REAL_EDGES,
        on_event: OnEvent | None = None,
        should_stop: Callable[[], bool] | None = None,
        first_token: FirstToken = first_token,
    ) -> None:
        super().__init__(spec, state, edges, on_event, should_stop)
        self.plan = plan
        self.first_token = first_token
        self.record = True
        """Write each started process to the state file (not for bench's private workers)."""
        self.head_started: float | None = None

    # -- steps ----------------------------------------------------------------------------------
    def run(self) -> ClusterState:
        for step in self.plan.steps:
            getattr(self, "do_" + step.action)(step)
        return self.state

    def do_stop_stale(self, step: Step) -> None:
        root = cluster_state_dir(self.spec)
        old = read_state(root)
        if old is not None:
            dead = []
            for rec in old.processes:
                try:
                    if not self.edges.node(rec.host, old.ssh).alive(rec.ref):
                        dead.append(rec.node)
                except ClusterError:
                    pass
            what = {rec.node: f"{rec.node} ({_role_name(rec.role)}, pid {rec.pid})" for rec in old.processes}
            stopped = stop_recorded(old, edges=self.edges)
            if stopped:
                why = f"{', '.join(dead)} not running" if dead else "its endpoint did not answer /health"
                self.emit(
                    Event(
                        "stale",
                        "cluster",
                        f"an earlier `up` of {self.spec.name} was no longer healthy ({why}): stopped what was "
                        f"left of it: {', '.join(what.get(n, n) for n in stopped)}",
                    )
                )
            clear_state(root)

    def do_refuse(self, step: Step) -> None:
        raise step.args["error"]

    def do_warn(self, step: Step) -> None:
        self.emit(Event("gateway_port" if step.node == "gateway" else "warning", step.node, step.text))

    def do_note(self, step: Step) -> None:
        self.emit(Event("fix", step.node, step.text))

    def do_preflight(self, step: Step) -> None:
        if "rows" in step.args:  # vLLM / SGLang: the rows of the facts gathered for the plan
            rows = [CheckRow(**r) for r in step.args["rows"]]
            preflight_or_raise(self.spec, {}, self.emit, rows)
            return
        preflight_or_raise(self.spec, self.plan_engines(), self.emit)

    def plan_engines(self) -> dict[str, Engine]:
        return self.plan.engines or resolve_engines(self.spec)

    def do_engine(self, step: Step) -> None:
        mode = step.args.get("mode")
        if mode == "fail":
            raise NodeError(step.node, str(step.args["error"]))
        if mode in ("present", "own"):
            self.emit(Event("engine", step.node, step.text))
            return
        from ._distribute import check_node_engine, copy_engine

        worker = next(w for w in self.spec.workers if w.name == step.node)
        eng = self.plan_engines()[worker.name]
        node = self.node(worker.host)
        # Checked again: the preflight may have copied it meanwhile.
        server = bool(step.args.get("server"))
        check = check_node_engine(self.spec, worker, eng, node, server)
        own = eng.provenance.get("node_path")
        if own:
            head_proto = self.plan_engines()["head"].rpc_protocol
            if not check.present:
                raise NodeError(
                    worker.name,
                    f"{check.detail} on {worker.host}: build llama.cpp there with -DGGML_RPC=ON "
                    "or remove the worker's `engine` to copy the head's",
                )
            if check.protocol and head_proto and check.protocol != head_proto:
                raise NodeError(
                    worker.name,
                    f"RPC protocol {check.protocol} of the build in {own} differs from the head's {head_proto}: "
                    "build the same llama.cpp version on every node",
                )
            self.emit(Event("engine", step.node, f"own engine: {check.detail}"))
            return
        if check.same:
            self.emit(Event("engine", step.node, f"engine present on {worker.host}: {check.detail}"))
            return
        sent = copy_engine(worker, eng, node, server)
        self.emit(
            Event(
                "engine",
                step.node,
                f"engine copied to {worker.host}:{eng.bin_dir} ({sent / 1048576:.1f} MiB, sha256 verified)",
            )
        )

    def do_prefill(self, step: Step) -> None:
        from ._prefill_launch import run_prefill

        run_prefill(
            self.spec, step, self.node(next(w.host for w in self.spec.workers if w.name == step.node)), self.emit
        )

    def do_drop_caches(self, step: Step) -> None:
        res = self.node(step.node).run(str(step.args["script"]), check=False, timeout=120)
        msg = "page cache dropped" if res.returncode == 0 else "could not drop the page cache (needs root or sudo -n)"
        self.emit(Event("drop_caches", step.node, msg))

    def do_check_port(self, step: Step) -> None:
        proc = step.process
        assert proc is not None
        if self.edges.net.port_busy(proc.host, proc.bind, proc.port):
            raise NodeError(proc.node, f"port {proc.port} on {proc.bind} is already in use by another process")

    def do_start(self, step: Step) -> None:
        proc = step.process
        assert proc is not None
        ref = self.spawn(proc)
        if self.record:  # a restarted process's record takes the place of its old one
            rec = process_record(proc, ref)
            old = [i for i, p in enumerate(self.state.processes) if (p.node, p.role) == (proc.node, proc.role)]
            if old:
                self.state.processes[old[0]] = rec
            else:
                self.state.processes.append(rec)
            write_state(self.plan.state_dir, self.state)
        if proc.role == "server" or (proc.node == "head" and proc.role in SERVING_ROLES):
            self.head_started = self.clock.monotonic()
        kinds = {"gateway": "gateway_started", "rpc": "worker_started", "server": "head_started"}
        self.emit(Event(kinds.get(proc.role, "started"), proc.node, step.text.removeprefix("start ")))

    def do_wait_workers(self, step: Step) -> None:
        timeout = float(step.args.get("timeout", 60.0))
        deadline = self.clock.monotonic() + timeout
        waiting = [p for p, _n, _r in self.started if p.role == "rpc"]
        while waiting:
            self.check_alive("at start")
            for proc in list(waiting):
                if self.edges.net.port_answers(proc.bind, proc.port, timeout=0.2):
                    waiting.remove(proc)
                    self.emit(Event("worker_ready", proc.node, f"{proc.bind}:{proc.port} answers"))
            if waiting and self.clock.monotonic() > deadline:
                names = ", ".join(p.node for p in waiting)
                raise NodeError(
                    waiting[0].node,
                    f"port {waiting[0].port} on {waiting[0].bind} did not answer "
                    f"within {timeout:.0f} s (waiting for: {names})",
                )
            if waiting:
                self.clock.sleep(0.01)

    def do_rpc_hello(self, step: Step) -> None:
        proc = step.process
        assert proc is not None
        want = step.args.get("want")
        try:
            got = self.edges.net.rpc_hello(proc.bind, proc.port)
        except (OSError, ClusterError) as exc:
            raise NodeError(proc.node, f"no RPC HELLO answer from {proc.bind}:{proc.port}: {exc}") from None
        if want and got != want:
            raise NodeError(
                proc.node,
                f"its ggml-rpc-server speaks RPC protocol {got}, the head's engine "
                f"{want}: use the same llama.cpp build on every node",
            )
        self.emit(Event("protocol", proc.node, f"RPC protocol {got}"))

    def do_wait_ready(self, step: Step) -> None:
        head = step.process
        assert head is not None
        timeout = float(step.args.get("timeout", self.spec.load_timeout))
        node = self.node(head.host)
        deadline = self.clock.monotonic() + timeout
        url = step.args.get("url") or self.plan.engine_endpoint or self.plan.endpoint
        last_progress = ""
        with self.edges.engine(url, self.spec.server.api_key) as client:
            while True:
                self.check_alive("during load")
                if client.health().http_status == 200:  # (0: no answer yet)
                    break
                progress = load_progress(node.read_log(head.log, max_bytes=64 << 10))
                if progress and progress != last_progress:
                    last_progress = progress
                    self.emit(Event("loading", head.node, progress))
                if self.clock.monotonic() > deadline:
                    raise NodeError(
                        head.node,
                        f"llama-server was not ready within {timeout:.0f} s "
                        f"(last: {last_progress or 'no progress in its log'}; log: {head.log})",
                    )
                self.clock.sleep(0.02)
            try:
                client.complete(CompletionRequest("Hello", n_predict=1, cache_prompt=False))
            except (EngineHTTPError, EngineUnavailable) as exc:
                self.check_alive("during the first completion")
                raise NodeError(head.node, f"the first one-token completion failed: {exc}") from None
        started = self.head_started if self.head_started is not None else deadline - timeout
        self.state.load_seconds = round(self.clock.monotonic() - started, 3)

    def do_wait_gateway(self, step: Step) -> None:
        gw = step.process
        assert gw is not None
        restart = bool(step.args.get("restart"))
        self.wait_gateway(gw, self.plan.endpoint, "at restart" if restart else "at start")
        if not restart:
            self.emit(
                Event(
                    "gateway_ready",
                    "gateway",
                    f"{self.plan.endpoint}/v1 serves (tool calls and reasoning parsed by splitserve)",
                )
            )

    def do_report(self, step: Step) -> None:
        head = self.plan.head
        self.state.ready_at = self.clock.time()
        self.state.phase = "ready"
        if not step.args.get("load_report", True):  # vLLM / SGLang: no llama.cpp load report to read
            what = self.plan.endpoint or self.plan.record.get("probe_out")
            self.emit(Event("ready", "head", f"{what} ready in {self.state.load_seconds or 0:.1f} s"))
            return
        text = self.node(head.host).read_log(head.log, max_bytes=8 << 20)
        self.state.extra["memory"] = [d.as_dict() for d in parse_load_report(text).devices]
        found = load_warnings(text)
        self.state.extra["warnings"] = [w.as_dict() for w in found]
        for w in found:
            self.emit(Event("warning", "head", w.line()))
        via = f" (llama-server: {self.plan.engine_endpoint})" if self.plan.gateway is not None else ""
        self.emit(Event("ready", "head", f"{self.plan.endpoint} ready in {self.state.load_seconds or 0:.1f} s{via}"))


def up(
    spec: ClusterSpec,
    *,
    engine: Engine | None = None,
    on_event: OnEvent | None = None,
    tensor_split: list[float] | None = None,
    worker_timeout: float = 60.0,
    preflight: bool = True,
    should_stop: Callable[[], bool] | None = None,
    edges: Edges = REAL_EDGES,
    first_token: FirstToken = first_token,
) -> ClusterState:
    """Start the cluster (any backend) and wait until it serves; returns its recorded state.

    ``preflight=False`` skips the checks of :func:`~splitserve.cluster.preflight` (`--skip-preflight`).
    A cluster whose supervisor (`up --foreground` / `run`, another process) holds its state
    folder is refused, with nothing touched. ``should_stop`` (the supervisor's) is asked while
    the cluster starts: when it says yes, what was started is stopped and ClusterError raised.
    """
    t0 = edges.clock.monotonic()
    check_startable(spec)
    root = cluster_state_dir(spec)
    holder = lock_holder(root)
    if holder is not None and holder.pid != os.getpid():
        raise ClusterError(supervised_message(spec.name, holder))
    facts = gather_facts(spec, engine, edges)
    plan = plan_launch(spec, facts, preflight=preflight, tensor_split=tensor_split, worker_timeout=worker_timeout)
    state = ClusterState(
        name=spec.name,
        spec_file=str(spec.source_file) if spec.source_file else None,
        model=plan.model,
        endpoint=plan.endpoint,
        engine=plan.engine_name,
        started_at=edges.clock.time(),
        engine_endpoint=plan.engine_endpoint or None,
    )
    state.ssh = spec.ssh
    state.extra.update(plan.record)
    ex = Executor(spec, plan, state, edges, on_event, should_stop, first_token)
    try:
        ex.run()
    except BaseException as exc:
        leftovers = ex.stop_all()
        state.phase = "failed"
        clear_state(root)
        if leftovers and isinstance(exc, SplitserveError):
            raise ClusterError(f"{exc}; could not stop: {', '.join(leftovers)}") from None
        raise
    state.up_seconds = round(edges.clock.monotonic() - t0, 3)
    write_state(root, state)
    return state


def restart_gateway(spec: ClusterSpec, state: ClusterState, edges: Edges = REAL_EDGES) -> ClusterState:
    """Start the gateway of a running cluster again (it died; the engine still serves)."""
    old = state.gateway
    if old is None:
        raise ClusterError(f"cluster {spec.name} runs no gateway")
    # the engines it fronted, as it was started (every replica's URL with replicas)
    engines = old.argv[old.argv.index("--engine") + 1] if "--engine" in old.argv[:-1] else state.engine_url
    plan = gateway_restart_plan(spec, engines, Path(old.log), old.port, state.endpoint)
    _run_or_stop(Executor(spec, plan, state, edges))
    return state


@contextmanager
def workers_only(
    spec: ClusterSpec, engine: Engine | None = None, edges: Edges = REAL_EDGES
) -> Iterator[tuple[list[str], Engine]]:
    """The cluster's RPC workers without its head: yields (``host:port`` list, head engine).

    A running cluster is stopped first and brought back afterwards."""
    from ._down import down

    was_running = read_state(cluster_state_dir(spec)) is not None
    if was_running:
        down(spec, edges=edges)
    engines = resolve_engines(spec, engine)
    plan = workers_plan(spec, engines)
    ex = Executor(
        spec,
        plan,
        ClusterState(name=spec.name, spec_file=None, model=str(spec.model), endpoint="", engine=engines["head"].key),
        edges,
    )
    ex.record = False
    try:
        ex.run()
        yield [rpc_endpoint(w) for w in spec.workers], engines["head"]
    finally:
        ex.stop_all()
        if was_running:
            up(spec, engine=engine, edges=edges)


def _run_or_stop(ex: Executor) -> None:
    """Run a restart's plan; on any failure stop what it started, then re-raise."""
    try:
        ex.run()
    except BaseException:
        ex.stop_all()
        raise


def restart_replica(
    spec: ClusterSpec,
    state: ClusterState,
    name: str,
    edges: Edges = REAL_EDGES,
    *,
    first_token: FirstToken = first_token,
) -> ClusterState:
    """Start one replica of a running cluster again alone (its processes are gone): its RPC workers,
    then its llama-server, until it serves (vLLM / SGLang: its server process(es), as `up` planned
    them, until it streams a token); the other replicas and the gateway are not touched. Its records
    in the state take the place of the dead ones."""
    from ._commands import launch_plan
    from ._launch import replica_restart_plan
    from ._replicas import Replica

    rows = [r for r in state.extra.get("replicas", []) if r.get("name") == name]
    if not rows or ("leader" not in rows[0] and spec.backend == "llama.cpp"):
        raise ClusterError(f"cluster {spec.name} has no replica {name}")
    if spec.backend == "llama.cpp":  # the replica as it was grouped at `up` (no facts to gather)
        full = launch_plan(
            spec,
            resolve_engines(spec),
            replicas=[Replica.from_dict(rows[0])],
            architecture=model_architecture(spec.model),
        )
    else:
        full = plan_launch(spec, gather_facts(spec, edges=edges), preflight=False)
        if not any(r.name == name for r in full.replicas):
            raise ClusterError(f"cluster {spec.name}: the spec no longer plans replica {name}")
    plan = replica_restart_plan(spec, full, name)
    _run_or_stop(Executor(spec, plan, state, edges, first_token=first_token))
    write_state(cluster_state_dir(spec), state)
    return state


__all__ = [
    "GATEWAY_TIMEOUT",
    "REAL_EDGES",
    "Edges",
    "EngineProbe",
    "Executor",
    "Network",
    "RealNetwork",
    "gather_facts",
    "restart_gateway",
    "restart_replica",
    "up",
    "workers_only",
]
