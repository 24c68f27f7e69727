"""`up` as a value: :func:`plan_launch` turns a spec and what was learnt of the machines
(:class:`LaunchFacts`) into a :class:`~._commands.LaunchPlan` whose :attr:`steps` are every
action `up` takes, in order; :func:`format_plan` is what `up --dry-run` prints. One plan for every
backend: llama.cpp's RPC workers and llama-server, and vLLM / SGLang deployments (their processes
from :func:`~._engines_plan.engine_plan`: ``ray start``, ``vllm serve``, SGLang's ranks, the Ray
probe), all carried out by the one executor.

Pure: no process, socket or file. Every decision is made here — the tensor split (from the
planner's answer in the facts), the gateway's port, which engines are copied to which worker,
whether page caches are dropped, the ports checked, the start order and the waits — so the
dry-run shows exactly what `up` runs (the executor in :mod:`._execute` only carries it out).
In pyinfra's manner, tests give specs and facts and compare the steps with JSON fixtures.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..engine import Engine
from ..plan import Topology
from ._commands import (
    LaunchPlan,
    ProcessPlan,
    ReplicaPlan,
    Step,
    base_url,
    cluster_state_dir,
    default_gateway_port,
    gateway_plan,
    launch_plan,
)
from ._engines_plan import EngineFacts, EnginePlan, engine_plan, host_port
from ._prefill_launch import prefill_steps
from ._preflight_engines import backend_checks
from ._replicas import replica_groups
from ._spec import ClusterSpec
from ._spec_engines import ROLE_NAMES, VllmSpec, engine_table

DROP_CACHES_SCRIPT = (
    'sync; if [ "$(id -u)" = 0 ]; then echo 3 > /proc/sys/vm/drop_caches; '
    "else echo 3 | sudo -n tee /proc/sys/vm/drop_caches > /dev/null; fi"
)


@dataclass(frozen=True)
class RemoteBuild:
    """What was found of a remote llama.cpp worker's engine build before `up` (see
    ``_distribute.check_node_engine``); a vLLM / SGLang node's interpreter and versions are its
    :class:`~._engines_plan.EngineNode` instead."""

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
    """llama.cpp, per node (``head`` or a worker's name): its engine; a remote worker's paths are on
    that worker. Empty for vLLM / SGLang."""
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
    remote_engines: dict[str, RemoteBuild] = field(default_factory=dict)
    """Per remote worker: its engine as found there."""
    refusal: Exception | None = None
    """The planner's refusal (the spec does not fit), raised as a step."""
    topology: Topology | None = None
    """The spec's ``topology`` resolved (``_replicas.spec_topology``); None: one split, unprinted."""
    nodes: EngineFacts | None = None
    """vLLM / SGLang: every node's facts (interpreter, versions, link, GPUs); None for llama.cpp."""
    model_missing: bool = False
    """llama.cpp: the spec's model file is not on this machine (`up` refuses; a dry-run says so)."""


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
    if facts.nodes is not None:  # vLLM / SGLang
        return _engine_launch(spec, facts, facts.nodes, preflight)
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
    plan.engine_name = facts.engines["head"].key
    plan.model = str(spec.model)
    if plan.replicas:  # who serves as which replica: status shows them, the supervisor restarts one alone
        groups = {r.name: r for r in replicas}
        plan.record["replicas"] = [
            {**groups[r.name].to_dict(), **r.to_dict()} if r.name in groups else r.to_dict() for r in plan.replicas
        ]
    steps: list[Step] = []
    if facts.stale:
        steps.append(_stop_stale(spec, facts))
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


def _stop_stale(spec: ClusterSpec, facts: LaunchFacts) -> Step:
    return Step(
        "stop_stale", "cluster", f"stop what an earlier `up` of {spec.name} left running: {', '.join(facts.stale)}"
    )


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
    workers, then its llama-server, waiting until it serves (vLLM / SGLang: the full plan's own steps
    of the replica, its ranks' starts and its first token); the others and the gateway keep running."""
    r = next(x for x in plan.replicas if x.name == name)
    one = LaunchPlan(
        workers=[] if plan.ranks else list(r.workers),
        head=r.server,
        state_dir=plan.state_dir,
        endpoint=plan.endpoint,
        engine_endpoint=r.url,
        engines=plan.engines,
        replicas=[r],
        ranks=[r.server, *r.workers] if plan.ranks else [],
    )
    if plan.ranks:
        mine = one.ranks
        one.steps = [
            s
            for s in plan.steps
            if s.action in ("check_port", "start", "wait_token") and any(s.process is p for p in mine)
        ]
        return one
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
        Step("wait_gateway", "gateway", f"wait for {endpoint}/health 200", gw, {"restart": True}),
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


RAY_GCS_TIMEOUT = 60.0
"""Seconds ``ray start --head`` gets to open its GCS port."""


def engine_kind_url(backend: str, url: str) -> str:
    """The engine URL the gateway takes for this backend: ``vllm+http://...`` (see
    :func:`splitserve.engine.backend_for`); llama.cpp's stays plain."""
    return url if backend == "llama.cpp" else f"{backend}+{url}"


def _engine_gateway(spec: ClusterSpec, plan: EnginePlan) -> ProcessPlan | None:
    if not spec.gateway.enabled or not plan.endpoint:
        return None
    log = cluster_state_dir(spec) / "logs" / "gateway.log"
    if len(plan.replicas) > 1:  # every server, named after its node: the gateway routes between them
        urls = ",".join(f"{r.name}={engine_kind_url(spec.backend, r.url)}" for r in plan.replicas)
        return gateway_plan(spec, urls, log)
    return gateway_plan(spec, engine_kind_url(spec.backend, plan.endpoint), log)  # the table's key goes along


def _engine_replicas(ep: EnginePlan) -> list[ReplicaPlan]:
    """Each replica's server (its rank 0, which serves HTTP) and its other ranks."""
    out = []
    for r in ep.replicas:
        ranks = [p for p in ep.processes if p.node in r.nodes]
        server = next(p for p in ranks if p.node == r.name and p.port)
        out.append(ReplicaPlan(r.name, list(r.nodes), server, [p for p in ranks if p is not server], r.url))
    return out


def _engine_launch(spec: ClusterSpec, facts: LaunchFacts, nodes: EngineFacts, preflight: bool) -> LaunchPlan:
    """A vLLM / SGLang deployment's steps: its processes in :func:`~._engines_plan.engine_plan`'s
    order, the waits between them, real readiness (a streamed token, or the Ray probe's report),
    then the gateway."""
    table = engine_table(spec)
    assert table is not None
    ep = engine_plan(spec, nodes)
    gw = _engine_gateway(spec, ep)
    replicas = _engine_replicas(ep)
    head_node = nodes.node("head")
    serving = [p for p in ep.processes if p.node == "head" and p.role in ("vllm", "sglang", "ray_probe")]
    head = serving[0] if serving else ep.processes[-1]
    probe = isinstance(table, VllmSpec) and table.ray_probe
    version = head_node.ray_version if probe else head_node.engine_version
    plan = LaunchPlan(
        workers=[],
        head=head,
        state_dir=cluster_state_dir(spec),
        endpoint=base_url(gw.bind, gw.port) if gw is not None else ep.endpoint,
        engine_endpoint=engine_kind_url(spec.backend, ep.endpoint) if ep.endpoint else "",
        gateway=gw,
        notes=list(ep.notes),
        replicas=replicas,
        ranks=list(ep.processes),
        engine_name=f"{'ray' if probe else spec.backend} {version or '?'}",
        model=table.model,
    )
    record: dict[str, Any] = {"backend": spec.backend, "notes": list(ep.notes), "head_python": head_node.python}
    if replicas:  # `status` shows each one; the supervisor restarts a dead one alone
        record["replicas"] = [r.to_dict() for r in replicas]
    if isinstance(table, VllmSpec):
        record["launcher"] = table.launcher
        if table.launcher == "ray":
            record["ray_address"] = host_port(head_node.address, table.ray.port)
        if ep.probe_out is not None:
            record["probe_out"] = str(ep.probe_out)
    plan.record = record
    steps: list[Step] = []
    if facts.stale:
        steps.append(_stop_stale(spec, facts))
    steps += [Step("note", "cluster", n) for n in ep.notes]
    if preflight:
        rows = backend_checks(spec, nodes)
        counts = ", ".join(f"{sum(r.status == s for r in rows)} {s}" for s in ("pass", "warn", "fail", "skip"))
        steps.append(
            Step(
                "preflight",
                "cluster",
                f"the preflight checks of every node's facts (engine, nic, gpus, ray): {counts}",
                args={"rows": [r.as_dict() for r in rows]},
            )
        )
    for p in [*ep.processes, *([gw] if gw is not None else [])]:
        if p.port:
            steps.append(Step("check_port", p.node, f"port {p.port} on {p.bind} is free", p))
    for p in ep.processes:
        if p.role == "ray_probe" and ep.probe_out is not None:
            steps.append(
                Step(
                    "clear_report",
                    p.node,
                    f"remove an earlier probe report {ep.probe_out}",
                    args={"path": str(ep.probe_out)},
                )
            )
        steps.append(Step("start", p.node, f"start {ROLE_NAMES.get(p.role, p.role)} on {p.host}", p))
        if p.role == "ray_head":
            steps.append(
                Step(
                    "wait_port",
                    p.node,
                    f"wait until Ray's GCS port {p.bind}:{p.port} answers (at most {RAY_GCS_TIMEOUT:.0f} s)",
                    p,
                    {"timeout": RAY_GCS_TIMEOUT},
                )
            )
    timeout = spec.load_timeout
    at_most = f"at most {timeout:.0f} s"
    if ep.probe_out is not None:
        n = len(nodes.nodes)
        steps.append(
            Step(
                "wait_probe",
                "head",
                f"ready when {ep.probe_out} says every node ({n}) joined ({at_most})",
                head,
                {"path": str(ep.probe_out), "expected": n, "timeout": timeout},
            )
        )
    else:
        model = table.served_model_name or table.model
        for r in replicas:
            steps.append(
                Step(
                    "wait_token",
                    r.name,
                    f"replica {r.name} ({', '.join(r.boxes)}) ready when {r.url}/v1/completions streams a token "
                    f"({at_most})",
                    r.server,
                    {"url": r.url, "model": model, "timeout": timeout, "replica": True},
                )
            )
        if not replicas:
            steps.append(
                Step(
                    "wait_token",
                    "head",
                    f"ready when {ep.endpoint}/v1/completions streams a token (not /health), {at_most}",
                    head,
                    {"url": ep.endpoint, "model": model, "timeout": timeout},
                )
            )
    if gw is not None:
        steps.append(Step("start", "gateway", f"start splitserve gateway on {plan.endpoint}", gw))
        steps.append(Step("wait_gateway", "gateway", f"wait for {plan.endpoint}/health 200", gw))
    steps.append(Step("report", "head", "record the cluster as ready", args={"load_report": False}))
    plan.steps = steps
    return plan


def format_plan(plan: LaunchPlan) -> str:
    """What `up --dry-run` prints: the topology's choice and the notes (vLLM / SGLang: the fixes
    written), then each step, with the full command line of every process it starts."""
    lines = [f"# {t}" for t in plan.topology]
    lines += [f"# {s.text}" for s in plan.steps if s.action == "note"]
    for i, step in enumerate((s for s in plan.steps if s.action != "note"), 1):
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
    "RAY_GCS_TIMEOUT",
    "LaunchFacts",
    "RemoteBuild",
    "Step",
    "engine_kind_url",
    "format_plan",
    "gateway_restart_plan",
    "plan_launch",
    "replica_restart_plan",
    "started_argv",
    "workers_plan",
]
