"""``splitserve plan`` as one library call: a request (the model, the nodes or a spec, the options
given) in, a :class:`PlanReport` out (the plan, the spec's topology, llama.cpp's own figures with
``measure``, and the JSON ``plan --json`` prints).

    plan_report(PlanRequest(model=..., nodes=("a=24",), overrides={"ctx": 8192})) -> PlanReport

Without a spec the planner reads the model's headers and plans over the given nodes; with one
(``config``) the spec's devices and ``[server]`` options are the base and the request's
overrides win over them (as flags on the command line do).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ..model import inspect_model
from ..plan import Node, Plan, PlanOptions, Topology, make_plan, parse_node
from ._measure import measure_spec
from ._planning import measured_spec, plan_for_spec, spec_nodes, spec_options
from ._replicas import spec_boxes, spec_topology
from ._spec import load_spec


@dataclass(frozen=True)
class PlanRequest:
    """What ``splitserve plan`` is asked."""

    model: Path | None = None
    """A GGUF file (any shard); with ``config``, None plans the spec's model."""
    nodes: tuple[str, ...] = ()
    """``NAME=GIB[,device=KIND][,bw=GBPS]`` per device, in llama.cpp's order; with ``config``,
    empty takes the spec's devices."""
    config: Path | None = None
    """A cluster spec (TOML)."""
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """:class:`splitserve.plan.PlanOptions` fields given on the command line (``ctx``,
    ``parallel``, ``cache_type_k``, ``margin_bytes``, ...): they win over the spec's."""
    host_node: str | None = None
    """The node whose memory also holds the head's host-side bytes (a node's name, or ``"none"``);
    None: the first (or what the spec implies)."""
    measure: bool = False
    """With ``config`` and the workers up: run llama.cpp's fit pass and set its figures beside the plan."""


@dataclass(frozen=True)
class PlanReport:
    """What :func:`plan_report` found."""

    plan: Plan
    topology: Topology | None = None
    """The spec's topology (split or replicas, and why) for a spec of more than one node."""
    measured: list[dict[str, Any]] | None = None
    """``measure``: one row per node and kind of memory, planned beside measured."""

    @property
    def refused(self) -> bool:
        """The model does not fit and the cluster would split it (``plan`` exits 3)."""
        if self.measured is not None:
            return False
        return not self.plan.fits and (self.topology is None or self.topology.kind == "split")

    def as_dict(self) -> dict[str, Any]:
        """What ``plan --json`` prints: the plan (with the topology for a spec of several nodes),
        or ``{"plan": ..., "measured": [...]}`` with ``measure``."""
        if self.measured is not None:
            return {"plan": self.plan.to_dict(), "measured": self.measured}
        out = self.plan.to_dict()
        if self.topology is not None:
            out["topology"] = self.topology.to_dict()
        return out


def plan_report(request: PlanRequest) -> PlanReport:
    """Plan as ``splitserve plan`` does; user mistakes raise :class:`UsageError` (one line)."""
    overrides = dict(request.overrides)
    if request.config is None:
        return PlanReport(_plan_nodes(request, overrides))
    spec = load_spec(request.config)
    given = [parse_node(n) for n in request.nodes] if request.nodes else None
    nodes = given if given is not None else spec_nodes(spec)
    base = spec_options(spec)
    options = replace(base, host_node=_host_index(request.host_node, nodes, base.host_node), **overrides)
    plan = plan_for_spec(spec, nodes=given, model=request.model, options=options)
    topology = spec_topology(spec) if len(spec_boxes(spec)) >= 2 else None
    if not request.measure:
        return PlanReport(plan, topology)
    return PlanReport(plan, topology, measure_spec(measured_spec(spec, overrides, request.model), plan))


def _plan_nodes(request: PlanRequest, overrides: dict[str, Any]) -> Plan:
    if request.model is None:
        raise UsageError("give a MODEL (a GGUF file) or -c cluster.toml")
    if not request.nodes:
        raise UsageError("give at least one --node NAME=GIB (e.g. --node spark1=121,device=gb10)")
    if request.measure:
        raise UsageError("--measure needs -c cluster.toml with the workers up")
    nodes = [parse_node(n) for n in request.nodes]
    options = replace(PlanOptions(), host_node=_host_index(request.host_node, nodes, 0), **overrides)
    return make_plan(inspect_model(request.model), nodes, options)


def _host_index(host_node: str | None, nodes: list[Node], default: int | None) -> int | None:
    """``--host-node NAME|none`` as a node index (``default`` when not given)."""
    if host_node is None:
        return default
    if host_node.lower() == "none":
        return None
    names = [n.name for n in nodes]
    if host_node not in names:
        raise UsageError(f"--host-node {host_node!r} is not one of the nodes ({', '.join(names)})")
    return names.index(host_node)


__all__ = ["PlanReport", "PlanRequest", "plan_report"]
