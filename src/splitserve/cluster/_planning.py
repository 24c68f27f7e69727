"""The planner for a cluster spec: read the model's headers, turn the spec into the pure planner's
inputs (:class:`splitserve.plan.ClusterFacts`), call the planner.  ``plan -c``, ``up``, preflight
and ``tune`` plan through here.

    plan_inputs(spec) -> ClusterFacts         # the spec as the planner reads it (no file opened)
    model_facts(spec, model=None) -> ModelInfo    # the headers of the spec's model (or ``model``)
    draft_info(spec) -> ModelInfo | None      # the draft model's headers when a draft-* type reads it
    spec_nodes(spec) -> [Node]                # devices in llama.cpp's order, memory from the spec
    spec_options(spec) -> PlanOptions
    plan_for_spec(spec, nodes=None, model=None, options=None) -> Plan
    plan_if_sized(spec) -> Plan | None        # None when the spec says no memory sizes
    require_fit(plan)                         # raises ClusterError naming the nodes and numbers
    split_for_up(spec) -> [float] | None      # both, for `up`: refuse, else the split to fill in
    speculation_problem(spec, model=None) -> str | None
    measured_spec(spec, overrides, model) -> spec   # for `plan -c --measure`: the spec with the plan's overrides
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import ClusterError, UsageError
from ..model import ModelInfo, inspect_model
from ..plan import (
    ClusterFacts,
    Machine,
    Node,
    Plan,
    PlanOptions,
    ServerFacts,
    fit_problem,
    layout_nodes,
    layout_options,
    layout_speculation_problem,
    plan_layout,
    split_to_fill,
)


def _memory(value: Any) -> float | tuple[float, ...] | None:
    if value is None:
        return None
    return tuple(value) if isinstance(value, (list, tuple)) else float(value)


def _machine(obj: Any, name: str) -> Machine:
    return Machine(
        name=name,
        host=getattr(obj, "host", "local"),
        devices=tuple(getattr(obj, "devices", ()) or ()),
        memory_gib=_memory(getattr(obj, "memory_gib", None)),
        device_kind=getattr(obj, "device_kind", None),
        bandwidth_gbps=getattr(obj, "bandwidth_gbps", None),
    )


def _seq(value: Sequence[Any] | None) -> tuple[Any, ...]:
    return tuple(value or ())


def plan_inputs(spec: Any) -> ClusterFacts:
    """The spec (a :class:`ClusterSpec`, or anything shaped like one) as the planner reads it."""
    s = spec.server
    server = ServerFacts(
        ctx_size=s.ctx_size,
        parallel=s.parallel,
        cache_type_k=s.cache_type_k,
        cache_type_v=s.cache_type_v,
        ubatch=s.ubatch,
        flash_attn=s.flash_attn,
        tensor_split=tuple(s.tensor_split) if s.tensor_split is not None else None,
        n_gpu_layers=s.n_gpu_layers,
        split_mode=s.split_mode,
        extra_args=_seq(s.extra_args),
        env=dict(s.env),
        speculation=_seq(getattr(s, "speculation", ())),
    )
    source = getattr(spec, "source_file", None)
    return ClusterFacts(
        workers=tuple(_machine(w, w.name) for w in spec.workers),
        head=_machine(spec.head, "head"),
        server=server,
        source=str(source) if source else None,
    )


def model_facts(spec: Any, model: str | Path | None = None) -> ModelInfo:
    """The headers of the spec's model (or of ``model`` when given)."""
    return inspect_model(model or spec.model)


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


def spec_nodes(spec: Any) -> list[Node]:
    """The spec's devices as planner nodes, in llama.cpp's order."""
    return layout_nodes(plan_inputs(spec))


def spec_options(spec: Any) -> PlanOptions:
    """The planner options that the spec's ``[server]`` table implies (llama-server's defaults elsewhere)."""
    return layout_options(plan_inputs(spec))


def speculation_problem(spec: Any, model: ModelInfo | None = None) -> str | None:
    """Why `up` must refuse the spec's ``server.speculation`` for its model (None: it can run)."""
    if not getattr(spec.server, "speculation", None):
        return None
    return layout_speculation_problem(plan_inputs(spec), model or model_facts(spec), draft_info(spec))


def plan_for_spec(
    spec: Any, nodes: list[Node] | None = None, model: str | Path | None = None, options: PlanOptions | None = None
) -> Plan:
    """Plan the spec's model over its devices with its server options (or ``options``, e.g. with
    command-line overrides on top of :func:`spec_options`)."""
    facts = plan_inputs(spec)
    given = nodes  # None: the spec's own nodes (then the plan's notes speak in spec keys)
    nodes = nodes if nodes is not None else layout_nodes(facts)
    if len(nodes) != facts.n_devices:  # before the headers are read, as before
        raise UsageError(f"{len(nodes)} --node given but the spec has {facts.n_devices} devices; give one per device")
    return plan_layout(facts, model_facts(spec, model), given, options, draft_info(spec))


def plan_if_sized(spec: Any) -> Plan | None:
    """The plan ``up`` should check, or None when the spec gives no memory sizes to plan against."""
    try:
        nodes = spec_nodes(spec)
    except UsageError:
        return None
    return plan_for_spec(spec, nodes)


def require_fit(plan: Plan) -> None:
    """Raise :class:`ClusterError` with the numbers when ``plan`` does not fit its nodes."""
    problem = fit_problem(plan)
    if problem is not None:
        raise ClusterError(problem)


def split_for_up(spec: Any) -> list[float] | None:
    """What ``up`` needs in one call: raise :class:`ClusterError` when the spec will not fit, else the
    ``--tensor-split`` to pass when the spec leaves it out (None: keep the spec's, or nothing to plan with).
    """
    plan = plan_if_sized(spec)
    if plan is None:
        return None
    require_fit(plan)
    return split_to_fill(plan_inputs(spec), plan)


#: planner option -> the spec's [server] key, for ``--measure`` with flags that override the spec
_SERVER_KEYS = {
    "ctx": "ctx_size",
    "parallel": "parallel",
    "cache_type_k": "cache_type_k",
    "cache_type_v": "cache_type_v",
    "ubatch": "ubatch",
    "flash_attn": "flash_attn",
    "tensor_split": "tensor_split",
}


def measured_spec(spec: Any, overrides: dict[str, Any], model: Path | None) -> Any:
    """The spec llama.cpp is asked about (``plan -c --measure``): the file's, with the same overrides
    (planner option names) the plan got."""
    if model is not None and Path(model).resolve() != Path(spec.model).resolve():
        raise UsageError("--measure loads the spec's model; leave out MODEL or put it in the spec")
    if overrides.get("unified"):
        raise UsageError("--measure with --kv-unified: add --kv-unified to server.extra_args in the spec instead")
    server = {_SERVER_KEYS[k]: v for k, v in overrides.items() if k in _SERVER_KEYS}
    if not server:
        return spec
    if "flash_attn" in server:
        server["flash_attn"] = "on" if server["flash_attn"] else "off"
    if "tensor_split" in server:
        server["tensor_split"] = list(server["tensor_split"])
    from pydantic import ValidationError

    from ._spec import ServerSpec

    out = spec.model_copy(deep=True)
    try:
        out.server = ServerSpec.model_validate(spec.server.model_dump() | server)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ()))
        raise UsageError(f"--measure: server.{where}: {first.get('msg')}") from None
    out.source_file = getattr(spec, "source_file", None)
    return out


__all__ = [
    "draft_info",
    "measured_spec",
    "model_facts",
    "plan_for_spec",
    "plan_if_sized",
    "plan_inputs",
    "require_fit",
    "spec_nodes",
    "spec_options",
    "speculation_problem",
    "split_for_up",
]
