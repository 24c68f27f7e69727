"""Replicas of a llama.cpp cluster: which nodes serve as one replica, and the processes of each.

    spec_boxes(spec) -> [SpecBox]                 # the nodes: the head's machine, then each worker's host
    spec_topology(spec, model=None) -> Topology   # the spec's ``topology`` resolved (the planner for ``auto``)
    replica_groups(spec, topology) -> [Replica]   # who serves, who is an RPC worker of whom
    replica_processes(spec, engines, replica, ...) -> (server, [rpc])

A *node* (a box) is a machine: the head's, and each worker's host (workers on one host are one
node).  With ``topology = "replicas"`` every group of ``k`` consecutive nodes runs its own
llama-server: on the head's machine the head's (``server.host`` / ``server.port``, as for a
split); on a group that the head is not in, on the group's first worker, which then runs
llama-server instead of its ggml-rpc-server, **on that worker's ``bind`` address and ``port``**
(the port it would have served RPC on: free, and already known to its firewall).  The other
workers of a group run ggml-rpc-server as usual, for their group's llama-server only.  The
gateway fronts every replica (``serve --engine NAME=URL,...``); a replica is named after the node
that runs its llama-server (``head``, ``w1``).

Pure: the model's headers are read only by :func:`spec_topology`, for ``auto`` and a check of
``replicas`` when the spec gives memory sizes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .._errors import SplitserveError, UsageError
from ..model import ModelInfo
from ..plan import GIB, Box, Node, Topology, choose_topology, layout_nodes
from ._spec import ClusterSpec, WorkerSpec, is_local_host


@dataclass(frozen=True)
class SpecBox:
    """One machine of the spec: its name (the head, or its first worker), host, and who runs on it."""

    name: str
    host: str
    members: tuple[str, ...]
    """``head`` and/or worker names, the head first."""


@dataclass
class Replica:
    """One llama-server of a replicas topology and the RPC workers it uses."""

    name: str
    boxes: list[str]
    leader: str
    """``head``, or the worker whose node runs this replica's llama-server."""
    workers: list[str] = field(default_factory=list)
    """The workers whose ggml-rpc-server this replica's llama-server uses."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "boxes": list(self.boxes), "leader": self.leader, "workers": list(self.workers)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Replica:
        return cls(str(data["name"]), list(data["boxes"]), str(data["leader"]), list(data.get("workers", [])))


def _host_key(host: str) -> str:
    return "local" if is_local_host(host) else host


def spec_boxes(spec: ClusterSpec) -> list[SpecBox]:
    """The head's machine, then each worker's host in the spec's order (one node per host)."""
    order = [_host_key(spec.head.host)]
    members: dict[str, list[str]] = {order[0]: ["head"]}
    for w in spec.workers:
        key = _host_key(w.host)
        if key not in members:
            order.append(key)
            members[key] = []
        members[key].append(w.name)
    return [SpecBox(members[h][0], h, tuple(members[h])) for h in order]


def _sized_boxes(spec: ClusterSpec) -> list[Box]:
    """The nodes with the memory each offers (:class:`UsageError` naming what has no size)."""
    from ._planning import plan_inputs

    facts = plan_inputs(spec)
    nodes = layout_nodes(facts)  # raises when a worker (or a head device) has no memory size
    owner = [w.name for w in spec.workers for _ in range(len(w.devices) or 1)] + ["head"] * len(spec.head.devices)
    by_member: dict[str, list[Node]] = {}
    for name, node in zip(owner, nodes, strict=True):
        by_member.setdefault(name, []).append(node)
    out = []
    for box in spec_boxes(spec):
        found = [n for m in box.members for n in by_member.get(m, [])]
        if "head" in box.members and not spec.head.devices:
            mem = spec.head.memory_gib
            if isinstance(mem, (int, float)):
                found.insert(0, Node("head", int(mem * GIB), spec.head.device_kind, spec.head.bandwidth_gbps))
            elif not found:
                raise UsageError(
                    f"{spec.source_file or 'the spec'}: no memory size for the head's machine; "
                    "set head.memory_gib (it is a node of the topology)"
                )
        out.append(Box(box.name, tuple(found)))
    return out


def _unsized(spec: ClusterSpec, asked: str, size: int | None, why: str) -> Topology:
    """The topology asked for when it cannot be weighed (no memory sizes, or no model file)."""
    names = [b.name for b in spec_boxes(spec)]
    n = len(names)
    if asked == "replicas":
        k = size or 1
        if k > n:
            raise UsageError(
                f"{spec.source_file or 'the spec'}: topology: replicas of {k} nodes, but the spec has {n} "
                f"({', '.join(names)}: the head's machine and each worker's host); give 1 to {n}"
            )
        groups = [tuple(names[i * k : (i + 1) * k]) for i in range(n // k)]
        return Topology(asked, "replicas", k, groups, names[len(groups) * k :], f"asked for in the spec ({why})", [])
    reason = 'asked for in the spec (topology = "split")' if asked == "split" else f"{why}: auto keeps one split"
    return Topology(asked, "split", n, [tuple(names)], [], reason, [])


def spec_topology(spec: ClusterSpec, model: ModelInfo | None = None) -> Topology:
    """The spec's ``topology`` resolved: the planner weighs every alternative when the spec gives
    memory sizes and the model's headers are there; otherwise ``auto`` is a split and ``replicas``
    is taken as asked (unchecked)."""
    asked, size = spec.topology_asked
    where = f"{spec.source_file or 'the spec'}: topology"
    if asked == "split" and len(spec_boxes(spec)) == 1:
        return _unsized(spec, asked, size, "")
    try:
        boxes = _sized_boxes(spec)
    except UsageError as exc:
        return _unsized(spec, asked, size, f"not weighed: {str(exc).split(': ', 1)[-1]}")
    if model is None:
        if not spec.model.is_file():
            return _unsized(spec, asked, size, f"not weighed: {spec.model.name} is not here")
        from ._planning import model_facts

        try:
            model = model_facts(spec)
        except SplitserveError as exc:
            return _unsized(spec, asked, size, f"not weighed: {exc}")
    from ._planning import spec_options

    return choose_topology(model, boxes, spec_options(spec), asked, size, where=where)


def replica_groups(spec: ClusterSpec, topology: Topology) -> list[Replica]:
    """Each replica of ``topology`` (empty for a split): its nodes, who runs its llama-server and
    which workers serve it over RPC."""
    if topology.kind != "replicas":
        return []
    boxes = {b.name: b for b in spec_boxes(spec)}
    out = []
    for group in topology.replicas:
        members = [m for name in group for m in boxes[name].members]
        leader = "head" if "head" in members else members[0]
        workers = [m for m in members if m not in ("head", leader)]
        out.append(Replica(leader, list(group), leader, workers))
    return out


def replica_status(state: Any, procs: list[dict[str, Any]], probe: bool = True) -> list[dict[str, Any]]:
    """Each replica of a running cluster for `status`: its name, nodes, URL, processes and health
    (``ready``: its llama-server answers /health 200; ``loading``: 503; ``down``: a process of it
    is dead or it does not answer)."""
    import httpx

    alive = {p["node"]: bool(p.get("alive")) for p in procs}
    out = []
    for row in state.extra.get("replicas", []):
        nodes = [str(row.get("server")), *(str(w) for w in row.get("workers", []))]
        health = "down"
        if all(alive.get(n, False) for n in nodes):
            health = "unknown"
            if probe:
                try:
                    code = httpx.get(f"{row.get('url')}/health", timeout=2.0).status_code
                    health = "ready" if code == 200 else "loading" if code == 503 else f"http {code}"
                except httpx.HTTPError:
                    health = "down"
        out.append(
            {
                "name": row.get("name"),
                "boxes": list(row.get("boxes", [])),
                "nodes": nodes,
                "url": row.get("url"),
                "health": health,
            }
        )
    return out


def worker_of(spec: ClusterSpec, name: str) -> WorkerSpec:
    return next(w for w in spec.workers if w.name == name)


__all__ = ["Replica", "SpecBox", "replica_groups", "replica_status", "spec_boxes", "spec_topology", "worker_of"]
