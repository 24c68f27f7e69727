"""Memory per node, layer ranges and ``--tensor-split``, max context, decode upper bound.

Pure functions of a model's headers (:class:`splitserve.model.ModelInfo`) and a list of nodes (or
a :class:`ClusterFacts`); no I/O.  Reading a cluster spec's model and turning the spec into these
inputs is the cluster layer's (``splitserve.cluster``: ``plan_for_spec``, ``split_for_up``, ...).
"""

from ._compute import ComputeEstimate, estimate_compute
from ._devices import BANDWIDTH_GBPS, GIB, Node, device_key, parse_gib, parse_node

# measure_spec (it starts llama-server) lives in the cluster layer; the pure half is here.
from ._measure import MEASURE_MARKERS, compare_breakdown, parse_breakdown
from ._memory import (
    CACHE_TYPES,
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
from ._serving import summary as speculation_summary
from ._spec import (
    ClusterFacts,
    Machine,
    ServerFacts,
    fit_problem,
    host_node,
    layout_nodes,
    layout_options,
    layout_speculation_problem,
    plan_layout,
    split_to_fill,
    tensor_override_flags,
    tensor_override_warning,
)
from ._topology import TOPOLOGIES, Alternative, Box, Topology, boxes_of, choose_topology

__all__ = [
    "BANDWIDTH_GBPS",
    "CACHE_TYPES",
    "DRAFTLESS_TYPES",
    "DRAFT_MODEL_TYPES",
    "DRAFT_TYPES",
    "GIB",
    "MEASURE_MARKERS",
    "MSA_ARCHS",
    "SPEC_TYPES",
    "TOPOLOGIES",
    "Alternative",
    "Box",
    "ClusterFacts",
    "ComputeEstimate",
    "KVSettings",
    "Machine",
    "Node",
    "NodePlan",
    "Plan",
    "PlanOptions",
    "ServerFacts",
    "SpecSupport",
    "Topology",
    "boxes_of",
    "choose_split",
    "choose_topology",
    "compare_breakdown",
    "device_key",
    "estimate_compute",
    "fit_problem",
    "host_node",
    "kv_bytes_per_token",
    "kv_unified_asked",
    "layer_devices",
    "layer_kv_bytes",
    "layout_nodes",
    "layout_options",
    "layout_speculation_problem",
    "make_plan",
    "msa_warnings",
    "parse_breakdown",
    "parse_gib",
    "parse_node",
    "parse_types",
    "plan_layout",
    "row_size",
    "speculation_refusal",
    "speculation_summary",
    "speculation_support",
    "split_to_fill",
    "tensor_override_flags",
    "tensor_override_warning",
    "weights_per_device",
]
