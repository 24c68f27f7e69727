"""Plans for a cluster spec, for ``plan -c`` and for ``up`` (refuse what will not fit, fill the split).

    spec_nodes(spec) -> [Node]                # devices in llama.cpp's order, memory from the spec
    plan_for_spec(spec, nodes=None) -> Plan
    preflight(spec) -> Plan | None            # None when the spec says no memory sizes
    require_fit(plan)                         # raises ClusterError naming the nodes and numbers
    split_for_up(spec) -> [float] | None      # both, for `up`: refuse, else the split to fill in

The spec's devices are the RPC workers in order (a worker with several ``devices`` gives one
node each), then the head's own devices.  Memory per device comes from ``memory_gib`` on a
worker or the head when the spec has that key (a number, or a list with one per device), or
from ``--node`` on the command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._errors import ClusterError, UsageError
from ..model import ModelInfo, inspect_model
from ._devices import GIB, Node
from ._plan import Plan, PlanOptions, make_plan
from ._serving import kv_unified_asked, speculation_refusal, speculation_support


def _memory_list(obj: Any, n: int, where: str) -> list[int] | None:
    value = getattr(obj, "memory_gib", None)
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise UsageError(f"{where}.memory_gib has {len(values)} entries for {n} devices")
    return [int(float(v) * GIB) for v in values]


def spec_nodes(spec: Any) -> list[Node]:
    """The spec's devices as planner nodes, in llama.cpp's order."""
    nodes: list[Node] = []
    missing: list[str] = []

    def bw_of(obj: Any) -> Any:
        return getattr(obj, "bandwidth_gbps", None)

    def dev_of(obj: Any) -> Any:
        return getattr(obj, "device_kind", None)

    for w in spec.workers:
        devs = list(w.devices) or [None]
        mem = _memory_list(w, len(devs), f"workers[{w.name}]")
        for i, d in enumerate(devs):
            name = w.name if d is None else f"{w.name}/{d}"
            if mem is None:
                missing.append(name)
                continue
            nodes.append(Node(name, mem[i], dev_of(w), bw_of(w)))
    head_devs = list(spec.head.devices)
    if head_devs:
        mem = _memory_list(spec.head, len(head_devs), "head")
        for i, d in enumerate(head_devs):
            if mem is None:
                missing.append(f"head/{d}")
                continue
            nodes.append(Node(f"head/{d}", mem[i], dev_of(spec.head), bw_of(spec.head)))
    if missing:
        raise UsageError(
            f"{getattr(spec, 'source_file', None) or 'the spec'}: no memory size for "
            f"{', '.join(missing)}; pass --node NAME=GIB for every device (in this order), "
            "or set memory_gib on each worker"
        )
    return nodes


def _host_node(spec: Any) -> int | None:
    """The node sharing memory with the head process: its first own device, else a worker on its host."""
    n_rpc = sum(len(w.devices) or 1 for w in spec.workers)
    if spec.head.devices:
        return n_rpc
    i = 0
    for w in spec.workers:
        if w.host == spec.head.host:
            return i
        i += len(w.devices) or 1
    return None


def spec_options(spec: Any) -> PlanOptions:
    """The planner options that the spec's ``[server]`` table implies (llama-server's defaults elsewhere)."""
    s = spec.server
    fa = (s.flash_attn or "auto") != "off"
    return PlanOptions(
        ctx=s.ctx_size or None,
        parallel=s.parallel,
        cache_type_k=s.cache_type_k or "f16",
        cache_type_v=s.cache_type_v or "f16",
        ubatch=s.ubatch or 512,
        flash_attn=fa,
        unified=kv_unified_asked(list(s.extra_args), dict(s.env)),
        tensor_split=tuple(s.tensor_split) if s.tensor_split else None,
        host_node=_host_node(spec),
        speculation=tuple(getattr(s, "speculation", ()) or ()),
    )


def draft_info(spec: Any) -> ModelInfo | None:
    """The headers of the spec's draft model when a draft-* type reads it (None otherwise, or when
    the file is not there: `up` says so first)."""
    s = spec.server
    path = getattr(s, "draft_model", None)
    if path is None or not any(t.startswith("draft-") for t in getattr(s, "speculation", ())):
        return None
    if not Path(path).is_file():
        return None
    return inspect_model(path)


def speculation_problem(spec: Any, model: ModelInfo | None = None) -> str | None:
    """Why `up` must refuse the spec's ``server.speculation`` for its model (None: it can run)."""
    types = list(getattr(spec.server, "speculation", ()) or ())
    if not types:
        return None
    info = model or inspect_model(spec.model)
    problem = speculation_refusal(types, info, draft_info(spec))
    if problem is None:
        return None
    where = getattr(spec, "source_file", None) or "<spec>"
    return f"{where}: server.speculation: {problem}"


def plan_for_spec(
    spec: Any, nodes: list[Node] | None = None, model: str | Path | None = None, options: PlanOptions | None = None
) -> Plan:
    """Plan the spec's model over its devices with its server options (or ``options``, e.g. with
    command-line overrides on top of :func:`spec_options`)."""
    nodes = nodes if nodes is not None else spec_nodes(spec)
    expected = sum(len(w.devices) or 1 for w in spec.workers) + len(spec.head.devices)
    if len(nodes) != expected:
        raise UsageError(f"{len(nodes)} --node given but the spec has {expected} devices; give one per device")
    info = inspect_model(model or spec.model)
    plan = make_plan(info, nodes, options or spec_options(spec))
    draft = draft_info(spec)
    if draft is not None:
        plan.speculation = speculation_support(info, draft)
        plan.estimated.append(
            f"the draft model {draft.path.name} ({draft.weights_bytes / GIB:.2f} GiB) and its KV "
            "cache are not in the per-node figures"
        )
    problem = speculation_refusal(list(plan.options.speculation), info, draft)
    if problem:
        plan.warnings.append(f"server.speculation: {problem} (`up` refuses this spec)")
    s = spec.server
    if s.n_gpu_layers < info.n_layer + 1:
        plan.estimated.append(
            f"server.n_gpu_layers = {s.n_gpu_layers} leaves layers on the head's CPU; the plan "
            "assumes every layer offloaded"
        )
    overrides = {"-ot", "--override-tensor", "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe"}
    if overrides & set(s.extra_args):
        plan.estimated.append(
            "tensor overrides in server.extra_args (-ot / --cpu-moe) move tensors the plan does not move"
        )
    if s.split_mode != "layer":
        plan.estimated.append(f"split_mode = {s.split_mode!r}: the plan models --split-mode layer")
    return plan


def preflight(spec: Any) -> Plan | None:
    """The plan ``up`` should check, or None when the spec gives no memory sizes to plan against."""
    try:
        nodes = spec_nodes(spec)
    except UsageError:
        return None
    return plan_for_spec(spec, nodes)


def require_fit(plan: Plan) -> None:
    """Raise :class:`ClusterError` with the numbers when ``plan`` does not fit its nodes."""
    if plan.fits:
        return
    short = [
        f"{n.name} needs {n.total_bytes / GIB:.1f} GiB (weights {n.weights_bytes / GIB:.1f} + KV "
        f"{n.kv_bytes / GIB:.1f} + compute {n.compute_bytes / GIB:.1f}"
        + (f" + host {n.host_bytes / GIB:.1f}" if n.host_bytes else "")
        + f") of {n.memory_bytes / GIB:.1f} GiB"
        for n in plan.nodes
        if n.headroom_bytes < 0
    ]
    raise ClusterError(
        f"the model will not fit: {'; '.join(short)}; lower ctx_size, use q8_0/q4_0 KV "
        "(cache_type_k/v), or add a worker (see `splitserve plan -c SPEC`)"
    )


def split_for_up(spec: Any) -> list[float] | None:
    """What ``up`` needs in one call: raise :class:`ClusterError` when the spec will not fit, else the
    ``--tensor-split`` to pass when the spec leaves it out (None: keep the spec's, or nothing to plan with).
    """
    plan = preflight(spec)
    if plan is None:
        return None
    require_fit(plan)
    return None if spec.server.tensor_split is not None else list(plan.tensor_split)
