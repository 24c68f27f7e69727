"""What a vLLM / SGLang deployment needs to know of its nodes, learnt through :class:`~splitserve._node.Node`.

:func:`gather_engine_facts` runs the commands of :func:`~._engines_plan.fact_commands` on every
node (one shell call per node, so one SSH round trip) and turns their outputs into
:class:`~._engines_plan.EngineFacts`; :func:`engine_preflight` turns those into the preflight
rows (ssh, engine, nic, gpus, ray, ports, and model on every node when the model is a path); :func:`ray_status` asks the head's Ray for the
cluster's state (`status`). Reads only; starts nothing.
"""

from __future__ import annotations

import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import PurePosixPath

from .._errors import ClusterError, NodeError
from ._checks import CheckRow
from ._edges import REAL_EDGES, Edges
from ._engines_plan import (
    EngineFacts,
    EngineNode,
    EnginePlan,
    fact_commands,
    node_facts,
)
from ._link_facts import EndFacts, parse_ip_addr
from ._model_rows import MODEL_FACT, engine_model_row, is_model_path, model_fact_command
from ._parallel_sizes import shape_to_size
from ._preflight_engines import backend_checks
from ._rdma_node import sysfs_script
from ._spec import ClusterSpec
from ._spec_engines import SglangSpec, VllmSpec, engine_table

FACT_MARK = "@@splitserve-fact "
RC_MARK = "@@splitserve-rc "
GDS_COMMAND = ["test", "-e", "/proc/driver/nvidia-fs"]
"""GPUDirect Storage is there when the nvidia-fs driver is loaded."""


def _table(spec: ClusterSpec) -> VllmSpec | SglangSpec:
    table = engine_table(spec)
    if table is None:
        raise ClusterError(f"{spec.source_file or '<spec>'}: backend = {spec.backend!r} is not vLLM or SGLang")
    return table


def node_python(spec: ClusterSpec, node: str) -> str:
    """The interpreter with the engine on ``node``: the spec's, else this one on the head and
    ``python3`` elsewhere."""
    return _table(spec).python_for(node, sys.executable if node == "head" else "python3")


def facts_script(commands: Mapping[str, list[str]]) -> str:
    """One ``sh`` script that runs every fact command and marks each output and exit status."""
    parts = []
    for key, argv in commands.items():
        program = shlex.join(argv)
        parts.append(
            f"printf '%s\\n' {shlex.quote(FACT_MARK + key)}; {program} 2>/dev/null; "
            f"rc=$?; printf '\\n%s%s\\n' {shlex.quote(RC_MARK)} \"$rc\""
        )
    return "\n".join(parts)


def parse_facts_output(text: str) -> dict[str, tuple[int, str]]:
    """(exit status, stdout) per fact from the output of :func:`facts_script`."""
    out: dict[str, tuple[int, str]] = {}
    key: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
        if line.startswith(FACT_MARK):
            key, lines = line[len(FACT_MARK) :].strip(), []
        elif line.startswith(RC_MARK) and key is not None:
            rc = line[len(RC_MARK) :].strip()
            out[key] = (int(rc) if rc.lstrip("-").isdigit() else 1, "\n".join(lines).strip("\n"))
            key = None
        elif key is not None:
            lines.append(line)
    return out


def _node_outputs(spec: ClusterSpec, name: str, host: str, edges: Edges) -> dict[str, tuple[int, str]]:
    commands = dict(fact_commands(spec, node_python(spec, name)))
    commands["gds"] = GDS_COMMAND
    commands["rdma"] = ["sh", "-c", sysfs_script()]  # verbs ports and GIDs: the Spark NCCL block
    model = _table(spec).model
    if is_model_path(model):  # every node loads the model itself: is it there, whole?
        commands[MODEL_FACT] = model_fact_command(model)
    node = edges.node(host, spec.ssh)
    res = node.run(facts_script(commands), timeout=120, check=False)
    return parse_facts_output(res.stdout.decode("utf-8", "replace"))


def _gds(outputs: Mapping[str, tuple[int, str]]) -> bool | None:
    if outputs.get("gpus", (1, ""))[0] != 0:
        return None  # no nvidia-smi: no GPU, GDS does not apply
    return outputs.get("gds", (1, ""))[0] == 0


def head_address(spec: ClusterSpec, head_nic_json: str | None) -> str:
    """The head's address on the private link: ``head_bind``, else the head's address on the
    subnet of the first worker's ``bind``, else loopback (one node)."""
    table = _table(spec)
    if table.head_bind:
        return table.head_bind
    if not spec.workers:
        return "127.0.0.1"
    first = spec.workers[0]
    if not first.remote:
        return first.bind
    found = EndFacts(interfaces=parse_ip_addr(head_nic_json)).on_subnet(first.bind) if head_nic_json else None
    if found is None:
        raise ClusterError(
            f"{spec.source_file or '<spec>'}: {spec.backend}.head_bind: no address of this machine is on the subnet "
            f"of workers[{first.name}].bind = {first.bind}; set {spec.backend}.head_bind to the head's private-link address"
        )
    return str(found[1].ip)


def gather_engine_facts(spec: ClusterSpec, edges: Edges = REAL_EDGES) -> EngineFacts:
    """Every node's facts, head first; a node that cannot be reached is a :class:`NodeError`."""
    outputs: dict[str, dict[str, tuple[int, str]]] = {}
    hosts = {"head": spec.head.host, **{w.name: w.host for w in spec.workers}}
    for name, host in hosts.items():
        try:
            outputs[name] = _node_outputs(spec, name, host, edges)
        except ClusterError as exc:
            raise NodeError(name, f"cannot gather its facts: {exc}") from None
    head_nic = outputs["head"].get("nic", (1, ""))
    address = head_address(spec, head_nic[1] if head_nic[0] == 0 else None)
    nodes = [node_facts("head", address, outputs["head"], node_python(spec, "head"), _gds(outputs["head"]))]
    for w in spec.workers:
        out = outputs[w.name]
        nodes.append(node_facts(w.name, w.bind, out, node_python(spec, w.name), _gds(out)))
    return EngineFacts(tuple(nodes), shape_to_size(spec))


def port_rows(plan: EnginePlan, edges: Edges = REAL_EDGES) -> list[CheckRow]:
    """One ``ports`` row per process that listens on a port of its own (free, or held)."""
    rows = []
    for p in plan.processes:
        if not p.port:
            continue
        try:
            busy = edges.net.port_busy(p.host, p.bind, p.port)
        except ClusterError as exc:
            rows.append(CheckRow("ports", p.node, "fail", str(exc), "check the address in the spec"))
            continue
        if busy:
            rows.append(
                CheckRow(
                    "ports",
                    p.node,
                    "fail",
                    f"port {p.port} on {p.bind} ({p.role}) is taken",
                    "stop what holds it (`ss -ltnp`) or give another port in the spec",
                )
            )
        else:
            rows.append(CheckRow("ports", p.node, "pass", f"port {p.port} on {p.bind} ({p.role}) is free"))
    return rows


def engine_preflight(spec: ClusterSpec, edges: Edges = REAL_EDGES) -> list[CheckRow]:
    """The preflight rows of a vLLM / SGLang spec: ``ssh`` per remote node, then
    :func:`~._preflight_engines.backend_checks` (engine, nic, gpus, ray) and the ``ports`` rows."""
    from ._engines_plan import engine_plan

    rows: list[CheckRow] = []
    outputs: dict[str, dict[str, tuple[int, str]]] = {}
    for name, host, remote in [("head", spec.head.host, False), *((w.name, w.host, w.remote) for w in spec.workers)]:
        t0 = time.perf_counter()
        try:
            outputs[name] = _node_outputs(spec, name, host, edges)
        except ClusterError as exc:
            rows.append(CheckRow("ssh", name, "fail", str(exc), f"make `ssh {host} true` work without a prompt"))
            continue
        if remote:
            rows.append(CheckRow("ssh", name, "pass", f"{host} answers ({(time.perf_counter() - t0) * 1000:.0f} ms)"))
    if "head" not in outputs:
        return rows
    head_nic = outputs["head"].get("nic", (1, ""))
    try:
        address = head_address(spec, head_nic[1] if head_nic[0] == 0 else None)
    except ClusterError as exc:
        rows.append(CheckRow("nic", "head", "fail", str(exc), f"set {spec.backend}.head_bind"))
        return rows
    nodes = []
    for name, addr in [("head", address), *((w.name, w.bind) for w in spec.workers)]:
        out = outputs.get(name, {})
        nodes.append(node_facts(name, addr, out, node_python(spec, name), _gds(out)))
    facts = EngineFacts(tuple(nodes), shape_to_size(spec))
    unreachable = {n for n in ("head", *(w.name for w in spec.workers)) if n not in outputs}
    rows += [r for r in backend_checks(spec, facts) if r.node not in unreachable]
    model = _table(spec).model
    if is_model_path(model):
        hosts = {"head": spec.head.host, **{w.name: w.host for w in spec.workers}}
        rows += [
            engine_model_row(model, name, hosts[name], out.get(MODEL_FACT))
            for name, out in outputs.items()
            if name not in unreachable
        ]
    rows += port_rows(engine_plan(spec, facts), edges)
    return rows


def ray_status(python: str, address: str, edges: Edges = REAL_EDGES, timeout: float = 20.0) -> str:
    """``ray status --address ADDRESS`` on the head (its output, or why there is none)."""
    ray = str(PurePosixPath(python).parent / "ray")
    res = edges.node("local", None).run(
        f"{shlex.quote(ray)} status --address {shlex.quote(address)} 2>&1", timeout=timeout, check=False
    )
    text = res.stdout.decode("utf-8", "replace").strip()
    return text if res.returncode == 0 else f"`ray status` failed (exit {res.returncode}): {text[-300:]}"


__all__ = [
    "EngineNode",
    "engine_preflight",
    "facts_script",
    "gather_engine_facts",
    "head_address",
    "node_python",
    "parse_facts_output",
    "port_rows",
    "ray_status",
]
