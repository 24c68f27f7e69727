"""Clusters: the spec, the launch plan, starting and stopping processes, their state and logs."""

from __future__ import annotations

from .._node import LocalNode, Node, ProcessRef, read_tail
from ._checks import LINK_RTT_MEANING, LINK_RTT_WARN_MS, link_rtt_status
from ._commands import LaunchPlan, ProcessPlan, cluster_state_dir, launch_plan
from ._down import Event, check_startable, down, require_state, resolve_engines
from ._engines_facts import engine_preflight, gather_engine_facts
from ._engines_plan import EngineFacts, EngineNode, engine_plan
from ._execute import REAL_EDGES, Edges, Executor, gather_facts, restart_gateway, restart_replica, up, workers_only
from ._fake import FakeNetwork, FakeNode, Program
from ._gateway_settings import GatewaySettings
from ._gpu import local_gpu_state
from ._launch import LaunchFacts, Step, format_plan, plan_launch
from ._load_meter import CacheLog, parse_cache_log, parse_proc_io, read_worker_side, worker_loaded_bytes
from ._logparse import load_progress, load_warnings, parse_load_report
from ._nodes import node_for
from ._plan_report import PlanReport, PlanRequest, plan_report
from ._planning import draft_info, plan_for_spec, require_fit, spec_nodes, spec_options
from ._prefill import cached_tensors, layers_of_devices, model_layers, parse_layers, prefill_cache
from ._preflight import preflight
from ._rdma_node import worker_transports
from ._replicas import replica_status, spec_boxes, spec_topology
from ._spec import (
    ClusterSpec,
    GatewaySpec,
    HeadSpec,
    ServerSpec,
    SshSpec,
    SuperviseSpec,
    WorkerSpec,
    load_spec,
    parse_spec,
)
from ._spec_engines import RaySpec, SglangSpec, VllmSpec
from ._ssh import SshNode
from ._state import STATE_FILE, ClusterState, ProcessRecord, lock_holder, read_state, supervised_message
from ._status import STATUS_EXIT, cluster_status, find_state_root, serving_now
from ._supervise import (
    BackgroundSupervisor,
    Supervisor,
    read_supervision,
    read_supervisor_log,
    start_background,
    supervise,
)
from ._systemd import systemd_units
from ._transport_log import parse_transport

__all__ = [
    "LINK_RTT_MEANING",
    "LINK_RTT_WARN_MS",
    "REAL_EDGES",
    "STATE_FILE",
    "STATUS_EXIT",
    "BackgroundSupervisor",
    "CacheLog",
    "ClusterSpec",
    "ClusterState",
    "Edges",
    "EngineFacts",
    "EngineNode",
    "Event",
    "Executor",
    "FakeNetwork",
    "FakeNode",
    "GatewaySettings",
    "GatewaySpec",
    "HeadSpec",
    "LaunchFacts",
    "LaunchPlan",
    "LocalNode",
    "Node",
    "PlanReport",
    "PlanRequest",
    "ProcessPlan",
    "ProcessRecord",
    "ProcessRef",
    "Program",
    "RaySpec",
    "ServerSpec",
    "SglangSpec",
    "SshNode",
    "SshSpec",
    "Step",
    "SuperviseSpec",
    "Supervisor",
    "VllmSpec",
    "WorkerSpec",
    "cached_tensors",
    "check_startable",
    "cluster_state_dir",
    "cluster_status",
    "down",
    "draft_info",
    "engine_plan",
    "engine_preflight",
    "find_state_root",
    "format_plan",
    "gather_engine_facts",
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
    "parse_proc_io",
    "parse_spec",
    "parse_transport",
    "plan_for_spec",
    "plan_launch",
    "plan_report",
    "prefill_cache",
    "preflight",
    "read_state",
    "read_supervision",
    "read_supervisor_log",
    "read_tail",
    "read_worker_side",
    "replica_status",
    "require_fit",
    "require_state",
    "resolve_engines",
    "restart_gateway",
    "restart_replica",
    "serving_now",
    "spec_boxes",
    "spec_nodes",
    "spec_options",
    "spec_topology",
    "start_background",
    "supervise",
    "supervised_message",
    "systemd_units",
    "up",
    "worker_loaded_bytes",
    "worker_transports",
    "workers_only",
]
