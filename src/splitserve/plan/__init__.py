"""Memory per node, layer ranges and ``--tensor-split``, max context, decode upper bound.

Pure functions of a model's headers and a list of nodes; no I/O.
"""

from ._compute import ComputeEstimate, estimate_compute
from ._devices import BANDWIDTH_GBPS, GIB, Node, device_key, parse_gib, parse_node
from ._measure import measure_spec, parse_breakdown
from ._memory import (
    KVSettings,
    kv_bytes_per_token,
    layer_devices,
    layer_kv_bytes,
    row_size,
    weights_per_device,
)
from ._plan import NodePlan, Plan, PlanOptions, choose_split, make_plan
from ._serving import (
    DRAFT_MODEL_TYPES,
    DRAFT_TYPES,
    DRAFTLESS_TYPES,
    MSA_ARCHS,
    SPEC_TYPES,
    SpecSupport,
    kv_unified_asked,
    msa_warnings,
    parse_types,
    speculation_refusal,
    speculation_support,
)
from ._spec import (
    draft_info,
    plan_for_spec,
    preflight,
    require_fit,
    spec_nodes,
    spec_options,
    speculation_problem,
    split_for_up,
)

__all__ = [
    "BANDWIDTH_GBPS",
    "DRAFTLESS_TYPES",
    "DRAFT_MODEL_TYPES",
    "DRAFT_TYPES",
    "GIB",
    "MSA_ARCHS",
    "SPEC_TYPES",
    "ComputeEstimate",
    "KVSettings",
    "Node",
    "NodePlan",
    "Plan",
    "PlanOptions",
    "SpecSupport",
    "choose_split",
    "device_key",
    "draft_info",
    "estimate_compute",
    "kv_bytes_per_token",
    "kv_unified_asked",
    "layer_devices",
    "layer_kv_bytes",
    "make_plan",
    "measure_spec",
    "msa_warnings",
    "parse_breakdown",
    "parse_gib",
    "parse_node",
    "parse_types",
    "plan_for_spec",
    "preflight",
    "require_fit",
    "row_size",
    "spec_nodes",
    "spec_options",
    "speculation_problem",
    "speculation_refusal",
    "speculation_support",
    "split_for_up",
    "weights_per_device",
]
