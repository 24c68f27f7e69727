"""Memory per node, layer ranges and ``--tensor-split``, max context, decode upper bound.

Pure functions of a model's headers (:class:`splitserve.model.ModelInfo`) and a list of nodes (or
a :class:`ClusterFacts`); no I/O.  Reading a cluster spec's model and turning the spec into these
inputs is the cluster layer's (``splitserve.cluster``: ``plan_for_spec``, ``split_for_up``, ...).
"""

from ._devices import GIB, Node, parse_node

# measure_spec (it starts llama-server) lives in the cluster layer; the pure half is here.
from ._measure import MEASURE_MARKERS, compare_breakdown
from ._memory import CACHE_TYPES, layer_devices
from ._parallel import ModelShape, ParallelChoice, choose_parallel
from ._plan import Plan, PlanOptions, make_plan
from ._serving import (
    DRAFT_MODEL_TYPES,
    DRAFT_TYPES,
    MSA_ARCHS,
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
    layout_nodes,
    layout_options,
    layout_speculation_problem,
    plan_layout,
    split_to_fill,
    tensor_override_warning,
)
from ._topology import Box, Topology, choose_topology

__all__ = [
    "CACHE_TYPES",
    "DRAFT_MODEL_TYPES",
    "DRAFT_TYPES",
    "GIB",
    "MEASURE_MARKERS",
    "MSA_ARCHS",
    "Box",
    "ClusterFacts",
    "Machine",
    "ModelShape",
    "Node",
    "ParallelChoice",
    "Plan",
    "PlanOptions",
    "ServerFacts",
    "Topology",
    "choose_parallel",
    "choose_topology",
    "compare_breakdown",
    "fit_problem",
    "kv_unified_asked",
    "layer_devices",
    "layout_nodes",
    "layout_options",
    "layout_speculation_problem",
    "make_plan",
    "msa_warnings",
    "parse_node",
    "parse_types",
    "plan_layout",
    "speculation_refusal",
    "speculation_summary",
    "speculation_support",
    "split_to_fill",
    "tensor_override_warning",
]
