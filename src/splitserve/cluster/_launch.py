"""`up` as a value: :func:`plan_launch` turns a spec and what was learnt of the machines
(:class:`LaunchFacts`) into a :class:`~._commands.LaunchPlan` whose :attr:`steps` are every
action `up` takes, in order; :func:`format_plan` is what `up --dry-run` prints.

Pure: no process, socket or file. Every decision is made here — the tensor split (from the
planner's answer in the facts), the gateway's port, which engines are copied to which worker,
whether page caches are dropped, the ports checked, the start order and the waits — so the
dry-run shows exactly what `up` runs (the executor in :mod:`._execute` only carries it out).
In pyinfra's manner, tests give specs and facts and compare the steps with JSON fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from ..engine import Engine
from ..plan import Topology
from ._commands import (
    LaunchPlan,
    ProcessPlan,
    Step,
    cluster_state_dir,
    default_gateway_port,
    gateway_plan,
    launch_plan,
)
from ._prefill_launch import prefill_steps
from ._replicas import replica_groups
from ._spec import ClusterSpec

DROP_CACHES_SCRIPT = (
    'sync; if [ "$(id -u)" = 0 ]; then echo 3 > /proc/sys/vm/drop_caches; '
    "else echo 3 | sudo -n tee /proc/sys/vm/drop_caches > /dev/null; fi"
)


@dataclass(frozen=True)
class EngineFact:
    """What was found of a remote worker's engine before `up` (see ``_distribute.check_node_engine``)."""

    present: bool
    same: bool | None
    """Every file matches the head's build (None for the worker's own build)."""
    protocol: str | None = None
    detail: str = ""
    binary: str | None = None
    """For the worker's own build: the RPC server's file name found there."""


@dataclass
class LaunchFacts:
    """What `up` learnt of the world before deciding anything (gathered by ``_execute.gather_facts``)."""

    engines: dict[str, Engine]
    """Per node (``head`` or a worker's name): its engine; a remote worker's paths are on that worker."""
    architecture: str | None = None
    """The model's ``general.architecture`` (from its header), when the file is here."""
    planned_split: list[float] | None = None
    """The planner's ``--tensor-split`` for a spec that gives memory sizes but no split."""
    serving_warnings: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    """Nodes whose processes an earlier `up` of this cluster left running (stopped first)."""
    stale_ports: set[int] = field(default_factory=set)
    """Ports those stale processes hold (free once they are stopped)."""
    busy_ports: set[int] = field(default_factory=set)
    """Ports on the gateway's address that another program holds now."""
    spare_port: int | None = None
    """A free port on the gateway's address, for when the default is taken."""
    remote_engines: dict[str, EngineFact] = field(default_factory=dict)
    """Per remote worker: its engine as found there."""
    refusal: Exception | None = None
    """The planner's refusal (the spec does not fit), raised as a step."""
    topology: Topology | None = None
    """The spec's ``topology`` resolved (``_replicas.spec_topology``); None: one split, unprinted."""


def _gateway_port(spec: ClusterSpec, facts: LaunchFacts, notes: list[str]) -> int | None:
    """The spec's gateway port; without one 8000 (or the next port the spec's own processes do not
    use) unless another program holds it, then the spare port the facts found."""
    g = spec.gateway
    if not g.enabled or g.port is not None:
        return None
    first = default_gateway_port(spec)
    if first not in facts.busy_ports or first in facts.stale_ports:
        return first
    if facts.spare_port is None:
        return first  # the port check step then says it is taken
    notes.append(f"port {first} is taken; the gateway listens on {facts.spare_port} (set gateway.port to choose)")
    return facts.spare_port


def _engine_steps(spec: ClusterSpec, facts: LaunchFacts) -> list[Step]:
    steps = []
    head_proto = facts.engines["head"].rpc_protocol
    leaders = {r.leader for r in replica_groups(spec, facts.topology)} if facts.topology is not None else set()
    for w in spec.workers:
        if not w.remote:
            continue
        eng = facts.engines[w.name]
        found = facts.remote_engines.get(w.name)
        own = eng.provenance.get("node_path")
        if found is None:
            steps.append(Step("engine", w.name, f"check the engine on {w.host}: {eng.bin_dir}", args={"mode": "check"}))
        elif own:
            if not found.present:
                msg = (
                    f"{found.detail} on {w.host}: build llama.cpp there with -DGGML_RPC=ON "
                    "or remove the worker's `engine` to copy the head's"
                )
                steps.append(Step("engine", w.name, msg, args={"mode": "fail", "error": msg}))
            elif found.protocol and head_proto and found.protocol != head_proto:
                msg = (
                    f"RPC protocol {found.protocol} of the build in {own} differs from the head's {head_proto}: "
                    "build the same llama.cpp version on every node"
                )
                steps.append(Step("engine", w.name, msg, args={"mode": "fail", "error": msg}))
            else:
                steps.append(Step("engine", w.name, f"own engine: {found.detail}", args={"mode": "own"}))
        elif found.same:
            steps.append(
                Step("engine", w.name, f"engine present on {w.host}: {found.detail}", args={"mode": "present"})
            )
        else:
            src = eng.provenance.get("copied_from")
            steps.append(
                Step(
                    "engine",
                    w.name,
                    f"copy the engine {src} to {w.host}:{eng.bin_dir} ({found.detail}), then verify sha256",
                    args={"mode": "copy"},
                )
            )
    if leaders:  # a worker that runs a replica's llama-server gets llama-server's files too
        steps = [replace(s, args={**s.args, "server": True}) if s.node in leaders else s for s in steps]
    return steps


def _own_engines(spec: ClusterSpec, facts: LaunchFacts) -> dict[str, Engine]:
    """The engines with each own-build worker's RPC binary as found there."""
    out = dict(facts.engines)
    for w in spec.workers:
        found = facts.remote_engines.get(w.name)
        eng = out.get(w.name)
        if eng is None or found is None or not eng.provenance.get("node_path") or not found.present:
            continue
        prov = dict(eng.provenance)
        if found.binary:  # llama-server keeps its name (a worker that serves a replica runs it)
            prov["binaries"] = {**prov.get("binaries", {}), "rpc_server": found.binary}
        if found.protocol:
            prov["rpc_protocol"] = found.protocol
        out[w.name] = Engine(root=eng.root, bin_dir=eng.bin_dir, provenance=prov)
    return out


def _start_workers(workers: list[ProcessPlan], timeout: float) -> list[Step]:
    """Start each worker's ggml-rpc-server, then wait until every one answers."""
    steps = [Step("start", p.node, f"start ggml-rpc-server on {p.bind}:{p.port}", p) for p in workers]
    if workers:
        steps.append(
            Step(
                "wait_workers",
                "cluster",
                f"wait until every worker's port answers (at most {timeout:.0f} s)",
                args={"timeout": timeout},
            )
        )
    return steps


def plan_launch(
    spec: ClusterSpec,
    facts: LaunchFacts,
    *,
    preflight: bool = True,
    tensor_split: list[float] | None = None,
    worker_timeout: float = 60.0,
) -> LaunchPlan:
    """Every step of `up` for ``spec`` given ``facts``; ``tensor_split`` overrides the planner's."""
    notes: list[str] = []
    port = _gateway_port(spec, facts, notes)
    split = tensor_split if tensor_split is not None else facts.planned_split
    engines = _own_engines(spec, facts)
    topo = facts.topology
    replicas = replica_groups(spec, topo) if topo is not None else []
    if replicas:
        split = None  # each replica's llama-server splits over its own group
    plan = launch_plan(spec, engines, split, gateway_port=port, architecture=facts.architecture, replicas=replicas)
    plan.notes = notes
    if topo is not None and (topo.kind == "replicas" or len(topo.replicas[0]) > 1):
        plan.topology = topo.lines()  # one node: nothing to choose
    plan.tensor_split = split if spec.server.tensor_split is None else list(spec.server.tensor_split)
    steps: list[Step] = []
    if facts.stale:
        steps.append(
            Step(
                "stop_stale",
                "cluster",
                f"stop what an earlier `up` of {spec.name} left running: {', '.join(facts.stale)}",
            )
        )
    steps += [Step("warn", "head", w) for w in facts.serving_warnings]
    steps += [Step("warn", "gateway", n) for n in notes]
    if preflight:
        steps.append(Step("preflight", "cluster", "run the preflight checks (`splitserve preflight`)"))
    steps += _engine_steps(spec, facts)
    if spec.drop_caches:
        hosts = list(dict.fromkeys(["local"] + [w.host for w in spec.workers if w.remote]))
        steps += [
            Step("drop_caches", host, f"drop the page cache on {host}", args={"script": DROP_CACHES_SCRIPT})
            for host in hosts
        ]
    if facts.refusal is not None:
        steps.append(Step("refuse", "cluster", f"refused: {facts.refusal}", args={"error": facts.refusal}))
    if plan.replicas:  # only the replicas' RPC workers have a -c cache (a worker that serves runs none)
        rpc = {p.node for p in plan.workers}
        steps += prefill_steps(spec.model_copy(update={"workers": [w for w in spec.workers if w.name in rpc]}), None)
    else:
        steps += prefill_steps(spec, plan.tensor_split)  # each cached worker's -c cache from its own copy
    for proc in plan.processes:
        steps.append(Step("check_port", proc.node, f"port {proc.port} on {proc.bind} is free", proc))
    if plan.gateway is not None:
        steps.append(Step("start", "gateway", f"start splitserve gateway on {plan.endpoint}", plan.gateway))
    steps += _start_workers(plan.workers, worker_timeout)
    want = engines["head"].rpc_protocol
    for proc in plan.workers:
        steps.append(
            Step(
                "rpc_hello",
                proc.node,
                f"ask {proc.bind}:{proc.port} for its RPC protocol (the head's: {want or 'unknown'})",
                proc,
                {"want": want},
            )
        )
    if plan.replicas:
        steps += replica_server_steps(plan, spec.model.name, spec.load_timeout)
    else:
        steps.append(Step("start", "head", f"start llama-server loading {spec.model.name}", plan.head))
        steps.append(
            Step(
                "wait_ready",
                "head",
                f"wait for /health 200 and a one-token completion (at most {spec.load_timeout:.0f} s)",
                plan.head,
                {"timeout": spec.load_timeout},
            )
        )
    if plan.gateway is not None:
        steps.append(Step("wait_gateway", "gateway", f"wait for {plan.endpoint}/health 200", plan.gateway))
    steps.append(Step("report", "head", "read the load report (memory per device, warnings) from the head's log"))
    plan.steps = steps
    return plan


def replica_server_steps(plan: LaunchPlan, model: str, timeout: float) -> list[Step]:
    """Start every replica's llama-server (they load at once), then wait for each."""
    steps = []
    for r in plan.replicas:
        p = r.server
        rpc = f" over {', '.join(w.node for w in r.workers)}" if r.workers else ""
        steps.append(Step("start", p.node, f"start llama-server of replica {r.name} loading {model}{rpc}", p))
    for r in plan.replicas:
        steps.append(
            Step(
                "wait_ready",
                r.server.node,
                f"wait for replica {r.name}'s /health 200 and a one-token completion at {r.url} "
                f"(at most {timeout:.0f} s)",
                r.server,
                {"timeout": timeout, "url": r.url},
            )
        )
    return steps


def replica_restart_plan(spec: ClusterSpec, plan: LaunchPlan, name: str, worker_timeout: float = 60.0) -> LaunchPlan:
    """One replica of a running cluster started again alone (its processes were stopped): its RPC
    workers, then its llama-server, waiting until it serves; the others and the gateway keep running."""
    r = next(x for x in plan.replicas if x.name == name)
    one = LaunchPlan(
        workers=list(r.workers),
        head=r.server,
        state_dir=plan.state_dir,
        endpoint=plan.endpoint,
        engine_endpoint=r.url,
        engines=plan.engines,
        replicas=[r],
    )
    steps = [Step("check_port", p.node, f"port {p.port} on {p.bind} is free", p) for p in [*r.workers, r.server]]
    steps += _start_workers(r.workers, worker_timeout)
    steps += replica_server_steps(one, spec.model.name, spec.load_timeout)
    one.steps = steps
    return one


def gateway_restart_plan(spec: ClusterSpec, engine_url: str, log: Path, port: int, endpoint: str) -> LaunchPlan:
    """Start the gateway of a running cluster again on its old port (the engine still serves)."""
    gw = gateway_plan(spec, engine_url, log, port=port)
    head = ProcessPlan("head", "server", spec.head.host, [], {}, spec.server.host, spec.server.port, log)
    plan = LaunchPlan(
        workers=[],
        head=head,
        state_dir=cluster_state_dir(spec),
        endpoint=endpoint,
        engine_endpoint=engine_url,
        gateway=gw,
    )
    plan.steps = [
        Step("start", "gateway", f"start splitserve gateway on {endpoint}", gw),
        Step("wait_gateway", "gateway", f"wait for {endpoint}/health 200", gw),
    ]
    return plan


def workers_plan(spec: ClusterSpec, engines: dict[str, Engine], worker_timeout: float = 60.0) -> LaunchPlan:
    """The cluster's RPC workers alone (bench's workers-only mode): each logs to ``NAME-bench.log``."""
    plan = launch_plan(spec, engines)
    for proc in plan.workers:
        proc.log = proc.log.with_name(proc.node + "-bench.log")
    steps = [Step("check_port", p.node, f"port {p.port} on {p.bind} is free", p) for p in plan.workers]
    steps += _start_workers(plan.workers, worker_timeout)
    plan.steps = steps
    plan.gateway = None
    return plan


def format_plan(plan: LaunchPlan) -> str:
    """What `up --dry-run` prints: each step, with the full command line of every process it starts."""
    lines = [f"# {t}" for t in plan.topology]
    for i, step in enumerate(plan.steps, 1):
        lines.append(f"# {i}. {step.node}: {step.text}")
        if step.action == "start" and step.process is not None:
            p = step.process
            lines.append(f"#    on {p.host}, log {p.log}")
            lines.append(p.shell())
    return "\n".join(lines)


def started_argv(plan: LaunchPlan) -> list[list[str]]:
    """The argv of every process the plan starts, in start order."""
    return [list(s.process.argv) for s in plan.steps if s.action == "start" and s.process is not None]


__all__ = [
    "DROP_CACHES_SCRIPT",
    "EngineFact",
    "LaunchFacts",
    "Step",
    "format_plan",
    "gateway_restart_plan",
    "plan_launch",
    "replica_restart_plan",
    "started_argv",
    "workers_plan",
]
