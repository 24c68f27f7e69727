"""Clusters: the spec, the launch plan, starting and stopping processes, their state and logs."""

from __future__ import annotations

from .._node import LocalNode, Node, ProcessRef, read_tail
from ._checks import LINK_RTT_MEANING, LINK_RTT_WARN_MS, link_rtt_status
from ._commands import LaunchPlan, cluster_state_dir, launch_plan
from ._down import Event, check_startable, down, require_state, resolve_engines
from ._execute import REAL_EDGES, Edges, Executor, gather_facts, up, workers_only
from ._fake import FakeNetwork, FakeNode, Program
from ._gateway_settings import GatewaySettings
from ._gpu import local_gpu_state
from ._launch import LaunchFacts, format_plan, plan_launch
from ._load_meter import parse_cache_log, read_worker_side, worker_loaded_bytes
from ._logparse import load_progress, load_warnings, parse_load_report
from ._nodes import node_for
from ._plan_report import PlanRequest, plan_report
from ._planning import draft_info, plan_for_spec, require_fit, spec_nodes, spec_options
from ._prefill import cached_tensors, layers_of_devices, model_layers, parse_layers, prefill_cache
from ._preflight import preflight
from ._rdma_node import worker_transports
from ._spec import ClusterSpec, GatewaySpec, ServerSpec, SshSpec, load_spec, parse_spec
from ._ssh import SshNode
from ._state import STATE_FILE, ClusterState, lock_holder, read_state, supervised_message
from ._status import STATUS_EXIT, cluster_status, find_state_root, serving_now
from ._supervise import Supervisor, read_supervisor_log, start_background, supervise
from ._systemd import systemd_units
from ._transport_log import parse_transport

__all__ = [
    "LINK_RTT_MEANING",
    "LINK_RTT_WARN_MS",
    "REAL_EDGES",
    "STATE_FILE",
    "STATUS_EXIT",
    "ClusterSpec",
    "ClusterState",
    "Edges",
    "Event",
    "Executor",
    "FakeNetwork",
    "FakeNode",
    "GatewaySettings",
    "GatewaySpec",
    "LaunchFacts",
    "LaunchPlan",
    "LocalNode",
    "Node",
    "PlanRequest",
    "ProcessRef",
    "Program",
    "ServerSpec",
    "SshNode",
    "SshSpec",
    "Supervisor",
    "cached_tensors",
    "check_startable",
    "cluster_state_dir",
    "cluster_status",
    "down",
    "draft_info",
    "find_state_root",
    "format_plan",
    "gather_facts",
    "launch_plan",
    "layers_of_devices",
    "link_rtt_status",
    "load_progress",
    "load_spec",
    "load_warnings",
    "local_gpu_state",
    "lock_holder",
    "model_layers",
    "node_for",
    "parse_cache_log",
    "parse_layers",
    "parse_load_report",
    "parse_spec",
    "parse_transport",
    "plan_for_spec",
    "plan_launch",
    "plan_report",
    "prefill_cache",
    "preflight",
    "read_state",
    "read_supervisor_log",
    "read_tail",
    "read_worker_side",
    "require_fit",
    "require_state",
    "resolve_engines",
    "serving_now",
    "spec_nodes",
    "spec_options",
    "start_background",
    "supervise",
    "supervised_message",
    "systemd_units",
    "up",
    "worker_loaded_bytes",
    "worker_transports",
    "workers_only",
]
