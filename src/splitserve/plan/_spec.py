"""Plans for a cluster's layout, for ``plan -c`` and for ``up``: pure functions of data.

    ClusterFacts(workers, head, server, source)   # what the planner needs of a cluster spec
    layout_nodes(facts) -> [Node]                 # devices in llama.cpp's order, memory from the facts
    layout_options(facts) -> PlanOptions          # the planner options the [server] table implies
    plan_layout(facts, model, nodes=None, options=None, draft=None) -> Plan
    layout_speculation_problem(facts, model, draft) -> str | None
    fit_problem(plan) -> str | None               # why the plan does not fit, naming nodes and numbers

The devices are the RPC workers in order (a worker with several ``devices`` gives one node each),
then the head's own devices.  Memory per device comes from ``memory_gib`` on a worker or the
head (a number, or a list with one per device), or from ``--node`` on the command line.

Reading the model's headers and turning a :class:`splitserve.cluster.ClusterSpec` into these facts
is the cluster layer's (``splitserve.cluster`` ``_planning``): this module opens no file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .._errors import UsageError
from ..model import ModelInfo
from ._devices import GIB, Node
from ._plan import BANDWIDTH_HINT_CLI, BANDWIDTH_HINT_SPEC, Plan, PlanOptions, make_plan
from ._serving import kv_unified_asked, speculation_refusal, speculation_support


@dataclass(frozen=True)
class Machine:
    """One process's machine as the planner sees it: a worker (``name``) or the head."""

    name: str
    host: str = "local"
    devices: tuple[str, ...] = ()
    memory_gib: float | tuple[float, ...] | None = None  #: one for every device, or one per device
    device_kind: str | None = None
    bandwidth_gbps: float | None = None


@dataclass(frozen=True)
class ServerFacts:
    """The ``[server]`` settings the planner reads (llama-server's defaults where they are None)."""

    ctx_size: int = 4096  #: 0: the model's training context
    parallel: int = 1
    cache_type_k: str | None = None
    cache_type_v: str | None = None
    ubatch: int | None = None
    flash_attn: str | None = None  #: "on", "off", "auto"
    tensor_split: tuple[float, ...] | None = None
    n_gpu_layers: int = 999
    split_mode: str = "layer"
    extra_args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    speculation: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClusterFacts:
    """What the planner needs of a cluster spec: its machines in order, its server settings, and
    the file it came from (named in messages)."""

    workers: tuple[Machine, ...]
    head: Machine
    server: ServerFacts = field(default_factory=ServerFacts)
    source: str | None = None

    @property
    def n_devices(self) -> int:
        return sum(len(w.devices) or 1 for w in self.workers) + len(self.head.devices)


def _memory_list(m: Machine, n: int, where: str) -> list[int] | None:
    value = m.memory_gib
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise UsageError(f"{where}.memory_gib has {len(values)} entries for {n} devices")
    return [int(float(v) * GIB) for v in values]


def layout_nodes(facts: ClusterFacts) -> list[Node]:
    """The devices as planner nodes, in llama.cpp's order (:class:`UsageError` when one has no memory size)."""
    nodes: list[Node] = []
    missing: list[str] = []
    for w in facts.workers:
        devs: list[str | None] = list(w.devices) or [None]
        mem = _memory_list(w, len(devs), f"workers[{w.name}]")
        for i, d in enumerate(devs):
            name = w.name if d is None else f"{w.name}/{d}"
            if mem is None:
                missing.append(name)
                continue
            nodes.append(Node(name, mem[i], w.device_kind, w.bandwidth_gbps))
    head = facts.head
    if head.devices:
        mem = _memory_list(head, len(head.devices), "head")
        for i, d in enumerate(head.devices):
            if mem is None:
                missing.append(f"head/{d}")
                continue
            nodes.append(Node(f"head/{d}", mem[i], head.device_kind, head.bandwidth_gbps))
    if missing:
        raise UsageError(
            f"{facts.source or 'the spec'}: no memory size for "
            f"{', '.join(missing)}; pass --node NAME=GIB for every device (in this order), "
            "or set memory_gib on each worker"
        )
    return nodes


def host_node(facts: ClusterFacts) -> int | None:
    """The node sharing memory with the head process: its first own device, else a worker on its host."""
    n_rpc = sum(len(w.devices) or 1 for w in facts.workers)
    if facts.head.devices:
        return n_rpc
    i = 0
    for w in facts.workers:
        if w.host == facts.head.host:
            return i
        i += len(w.devices) or 1
    return None


def layout_options(facts: ClusterFacts) -> PlanOptions:
    """The planner options that the ``[server]`` settings imply (llama-server's defaults elsewhere)."""
    s = facts.server
    return PlanOptions(
        ctx=s.ctx_size or None,
        parallel=s.parallel,
        cache_type_k=s.cache_type_k or "f16",
        cache_type_v=s.cache_type_v or "f16",
        ubatch=s.ubatch or 512,
        flash_attn=(s.flash_attn or "auto") != "off",
        unified=kv_unified_asked(list(s.extra_args), dict(s.env)),
        tensor_split=tuple(s.tensor_split) if s.tensor_split else None,
        host_node=host_node(facts),
        speculation=tuple(s.speculation),
    )


def layout_speculation_problem(facts: ClusterFacts, model: ModelInfo, draft: ModelInfo | None) -> str | None:
    """Why `up` must refuse ``server.speculation`` for ``model`` (None: it can run)."""
    types = list(facts.server.speculation)
    if not types:
        return None
    problem = speculation_refusal(types, model, draft)
    if problem is None:
        return None
    return f"{facts.source or '<spec>'}: server.speculation: {problem}"


def plan_layout(
    facts: ClusterFacts,
    model: ModelInfo,
    nodes: list[Node] | None = None,
    options: PlanOptions | None = None,
    draft: ModelInfo | None = None,
) -> Plan:
    """Plan ``model`` over the devices with the server settings (or ``options``, e.g. with
    command-line overrides on top of :func:`layout_options`); ``draft``: the draft model's headers
    when a draft-* speculation type reads one."""
    from_spec = nodes is None
    nodes = nodes if nodes is not None else layout_nodes(facts)
    expected = facts.n_devices
    if len(nodes) != expected:
        raise UsageError(f"{len(nodes)} --node given but the spec has {expected} devices; give one per device")
    plan = make_plan(model, nodes, options or layout_options(facts))
    if from_spec:  # the nodes came from the spec's keys: ask for keys, not --node fields
        plan.estimated = [n.replace(BANDWIDTH_HINT_CLI, BANDWIDTH_HINT_SPEC) for n in plan.estimated]
    if draft is not None:
        plan.speculation = speculation_support(model, draft)
        plan.estimated.append(
            f"the draft model {draft.path.name} ({draft.weights_bytes / GIB:.2f} GiB) and its KV "
            "cache are not in the per-node figures"
        )
    problem = speculation_refusal(list(plan.options.speculation), model, draft)
    if problem:
        plan.warnings.append(f"server.speculation: {problem} (`up` refuses this spec)")
    s = facts.server
    if s.n_gpu_layers < model.n_layer + 1:
        plan.estimated.append(
            f"server.n_gpu_layers = {s.n_gpu_layers} leaves layers on the head's CPU; the plan "
            "assumes every layer offloaded"
        )
    if tensor_override_flags(s.extra_args):
        plan.estimated.append(
            "tensor overrides in server.extra_args (-ot / --cpu-moe) move tensors the plan does not move"
        )
        if facts.n_devices > 1:
            warning = tensor_override_warning(s.extra_args)
            if warning:
                plan.warnings.append(warning)
    if s.split_mode != "layer":
        plan.estimated.append(f"split_mode = {s.split_mode!r}: the plan models --split-mode layer")
    return plan


#: llama-server flags that set tensor overrides (``common/arg.cpp`` of the pin); the draft
#: model's own (``--spec-draft-cpu-moe``, ...) are not among them.
TENSOR_OVERRIDE_FLAGS = ("-ot", "--override-tensor", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe")


def tensor_override_flags(extra_args: Sequence[str]) -> list[str]:
    """The tensor-override flags in ``extra_args`` (``-ot X`` or ``--override-tensor=X`` alike)."""
    found: list[str] = []
    for a in extra_args:
        flag = a.split("=", 1)[0] if a.startswith("--") else a
        if flag in TENSOR_OVERRIDE_FLAGS and flag not in found:
            found.append(flag)
    return found


def tensor_override_warning(extra_args: Sequence[str]) -> str | None:
    """The warning for tensor overrides on a split model (None: there are none).

    The pinned llama.cpp enables pipeline parallelism only when the model has no tensor
    overrides (``src/llama-context.cpp``: ``!model.has_tensor_overrides()``), and says nothing
    when it turns it off: the RPC devices then run one after another on each ubatch instead
    of overlapping (no "pipeline parallelism enabled" line in the head's log)."""
    flags = tensor_override_flags(extra_args)
    if not flags:
        return None
    return (
        f"server.extra_args has {' / '.join(flags)}: any tensor override turns llama.cpp's pipeline "
        "parallelism over RPC off (silently), so the workers compute one after another and prefill and "
        "concurrent requests get slower; remove it and fit the model with tensor_split (more workers, "
        "or a smaller quant / ctx_size) unless it only fits with experts in host memory"
    )


def fit_problem(plan: Plan) -> str | None:
    """Why ``plan`` does not fit its nodes, with the numbers and what to do (None: it fits)."""
    if plan.fits:
        return None
    short = [
        f"{n.name} needs {n.total_bytes / GIB:.1f} GiB (weights {n.weights_bytes / GIB:.1f} + KV "
        f"{n.kv_bytes / GIB:.1f} + compute {n.compute_bytes / GIB:.1f}"
        + (f" + host {n.host_bytes / GIB:.1f}" if n.host_bytes else "")
        + f") of {n.memory_bytes / GIB:.1f} GiB"
        for n in plan.nodes
        if n.headroom_bytes < 0
    ]
    return (
        f"the model will not fit: {'; '.join(short)}; lower ctx_size, use q8_0/q4_0 KV "
        "(cache_type_k/v), or add a worker (see `splitserve plan -c SPEC`)"
    )


def split_to_fill(facts: ClusterFacts, plan: Plan) -> list[float] | None:
    """The ``--tensor-split`` `up` fills in from ``plan`` (None: the spec gives its own)."""
    return None if facts.server.tensor_split is not None else list(plan.tensor_split)
