"""Topology: one split over every box, or replicas (each a box, or a group of k boxes) behind the gateway.

    boxes_of(facts) -> [Box]                       # the spec's devices grouped by the host they sit on
    choose_topology(model, boxes, options, asked="auto", group_size=None) -> Topology

A model that fits one box gains nothing in speed from a split (decode is bounded by one box's
memory bandwidth either way, plus the hops); a second box buys concurrency.  So ``auto`` takes the
smallest group size ``k`` for which at least two groups of ``k`` boxes each hold the model with the
requested context x parallel: one box -> one replica per box; ``k`` boxes -> ``N // k`` replicas of
``k``; no such ``k`` -> one split over all boxes.  Every alternative is planned and kept, so
``plan`` and ``up --dry-run`` can show the memory per box for each and say why one was chosen.

Groups are consecutive boxes in the spec's order (the first box of a group runs that replica's
llama-server); with boxes of different sizes a group that does not fit is left out and named.
Pure: no file, no process.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from .._errors import UsageError
from ..model import ModelInfo
from ._devices import GIB, Node
from ._plan import Plan, PlanOptions, make_plan
from ._spec import ClusterFacts, layout_nodes

TOPOLOGIES = ("auto", "split", "replicas")
Kind = Literal["split", "replicas"]


@dataclass(frozen=True)
class Box:
    """One machine (a host): the devices on it, in llama.cpp's order."""

    name: str
    nodes: tuple[Node, ...]

    @property
    def memory_bytes(self) -> int:
        return sum(n.memory_bytes for n in self.nodes)


@dataclass
class Alternative:
    """One way to lay the model over the boxes: groups of ``group_size`` boxes, each planned."""

    group_size: int
    n_boxes: int
    groups: list[tuple[str, ...]]  #: every group of boxes tried, in order
    plans: list[Plan]  #: one per group
    fitting: list[int] = field(default_factory=list)  #: indexes of the groups whose plan fits

    @property
    def kind(self) -> Kind:
        """A group of every box is the split (one box alone: one server, also called a split)."""
        return "split" if self.group_size == self.n_boxes else "replicas"

    @property
    def replicas(self) -> int:
        return len(self.fitting)

    def describe(self) -> str:
        label = "split over all" if self.kind == "split" else f"replicas of {self.group_size}"
        per = []
        for g, p in zip(self.groups, self.plans, strict=True):
            for n in p.nodes:
                per.append(f"{n.name} {n.total_bytes / GIB:.1f}/{n.memory_bytes / GIB:.1f} GiB")
            if not p.fits:
                per[-1] += f" ({'+'.join(g)} does not fit)"
        return f"{label}: " + ", ".join(per)

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "group_size": self.group_size,
            "replicas": self.replicas,
            "groups": [
                {
                    "boxes": list(g),
                    "fits": p.fits,
                    "nodes": [
                        {
                            "name": n.name,
                            "total_bytes": n.total_bytes,
                            "memory_bytes": n.memory_bytes,
                            "headroom_bytes": n.headroom_bytes,
                        }
                        for n in p.nodes
                    ],
                    "tensor_split": p.tensor_split,
                }
                for g, p in zip(self.groups, self.plans, strict=True)
            ],
        }


@dataclass
class Topology:
    """The chosen topology, why, and every alternative that was weighed."""

    asked: str
    kind: Kind
    group_size: int
    replicas: list[tuple[str, ...]]  #: the boxes of each replica (one entry for a split)
    unused: list[str]  #: boxes that no replica uses
    reason: str
    alternatives: list[Alternative]

    def to_dict(self) -> dict[str, Any]:
        return {
            "asked": self.asked,
            "kind": self.kind,
            "group_size": self.group_size,
            "replicas": [list(r) for r in self.replicas],
            "unused": self.unused,
            "reason": self.reason,
            "alternatives": [a.to_dict() for a in self.alternatives],
        }

    def lines(self) -> list[str]:
        """What ``plan`` and ``up --dry-run`` print: the choice, the reason, the alternatives."""
        if self.kind == "split":
            head = f"topology: split over {len(self.replicas[0])} boxes ({', '.join(self.replicas[0])})"
        else:
            groups = ", ".join("+".join(r) for r in self.replicas)
            head = f"topology: {len(self.replicas)} replicas of {self.group_size} ({groups})"
        out = [head, f"  why: {self.reason}"]
        if self.unused:
            out.append(f"  unused: {', '.join(self.unused)}")
        out += [f"  {a.describe()}" for a in self.alternatives]
        return out


def boxes_of(facts: ClusterFacts) -> list[Box]:
    """The spec's devices grouped by host, in the order each host first appears (workers, then the head)."""
    nodes = layout_nodes(facts)
    hosts: list[str] = []
    for w in facts.workers:
        hosts += [w.host] * (len(w.devices) or 1)
    hosts += [facts.head.host] * len(facts.head.devices)
    order: list[str] = []
    by_host: dict[str, list[Node]] = {}
    for host, node in zip(hosts, nodes, strict=True):
        if host not in by_host:
            order.append(host)
            by_host[host] = []
        by_host[host].append(node)
    return [Box(h, tuple(by_host[h])) for h in order]


def _alternative(model: ModelInfo, boxes: list[Box], k: int, options: PlanOptions) -> Alternative:
    groups = [boxes[i * k : (i + 1) * k] for i in range(len(boxes) // k)]
    # each group is its own llama-server: its first box holds the host side, and its split is its own
    o = replace(options, host_node=0, tensor_split=None)
    plans = [make_plan(model, [n for b in g for n in b.nodes], o) for g in groups]
    alt = Alternative(k, len(boxes), [tuple(b.name for b in g) for g in groups], plans)
    alt.fitting = [i for i, p in enumerate(plans) if p.fits]
    return alt


def _need(plan: Plan) -> str:
    worst = max(plan.nodes, key=lambda n: n.total_bytes - n.memory_bytes)
    return f"{worst.name} needs {worst.total_bytes / GIB:.1f} of {worst.memory_bytes / GIB:.1f} GiB"


def choose_topology(
    model: ModelInfo,
    boxes: list[Box],
    options: PlanOptions,
    asked: str = "auto",
    group_size: int | None = None,
    *,
    where: str = "topology",
) -> Topology:
    """Choose between a split over every box and replicas of ``k`` boxes (see the module docstring).

    ``asked``: ``auto`` (the planner decides), ``split`` (always one split) or ``replicas`` (groups
    of ``group_size`` boxes, or the smallest size that fits).  A :class:`UsageError` names ``where``
    when the request cannot be met."""
    if asked not in TOPOLOGIES:
        raise UsageError(f"{where} = {asked!r}: choose one of {', '.join(TOPOLOGIES)}")
    if not boxes:
        raise UsageError(f"{where}: no boxes to place the model on")
    n = len(boxes)
    if group_size is not None and not 1 <= group_size <= n:
        raise UsageError(f"{where}: a replica of {group_size} boxes, but the spec has {n}; give 1 to {n}")
    alts = [_alternative(model, boxes, k, options) for k in range(1, n + 1)]
    split = alts[-1]
    ctx = split.plans[0].ctx
    wants = f"ctx {ctx:,} x parallel {options.parallel}"

    def replicas_of(a: Alternative, reason: str) -> Topology:
        used = [a.groups[i] for i in a.fitting]
        unused = [b for i, g in enumerate(a.groups) if i not in a.fitting for b in g]
        unused += [b.name for b in boxes[len(a.groups) * a.group_size :]]
        return Topology(asked, "replicas", a.group_size, used, unused, reason, alts)

    def split_all(reason: str) -> Topology:
        return Topology(asked, "split", n, [split.groups[0]], [], reason, alts)

    if asked == "split":
        return split_all('asked for in the spec (topology = "split")')
    if asked == "replicas":
        if group_size is not None:
            a = alts[group_size - 1]
            if not a.fitting:
                raise UsageError(
                    f"{where}: replicas of {group_size}: the model with {wants} fits no group "
                    f"({_need(a.plans[0])}); lower ctx_size or parallel, or give a larger group size"
                )
            return replicas_of(a, f"asked for in the spec: replicas of {group_size}")
        for a in alts:
            if a.fitting:
                return replicas_of(a, f"asked for in the spec; {a.group_size} box(es) hold the model with {wants}")
        raise UsageError(f'{where} = "replicas": the model with {wants} does not fit even on all {n} boxes')
    for a in alts[:-1]:
        if len(a.fitting) >= 2:
            sizes = "one box" if a.group_size == 1 else f"{a.group_size} boxes"
            p = a.plans[a.fitting[0]]
            most = max(p.nodes, key=lambda x: x.total_bytes / max(1, x.memory_bytes))
            return replicas_of(
                a,
                f"the model with {wants} fits on {sizes} ({most.name} {most.total_bytes / GIB:.1f} of "
                f"{most.memory_bytes / GIB:.1f} GiB): {len(a.fitting)} replicas serve more at once, "
                "and a split would not decode faster",
            )
    if n == 1:
        return split_all("one box")
    smaller = alts[0].plans[0]
    return split_all(f"the model with {wants} fits on no smaller group ({_need(smaller)})")
