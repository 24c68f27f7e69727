"""Clusters: the spec, the launch plan, starting and stopping processes, their state and logs."""

from __future__ import annotations

from ._checks import LINK_RTT_MEANING, LINK_RTT_WARN_MS, link_rtt_status
from ._commands import (
    LaunchPlan,
    ProcessPlan,
    cluster_state_dir,
    gateway_plan,
    launch_plan,
    rpc_argv,
    server_argv,
    speculation_argv,
)
from ._engines_facts import engine_preflight, gather_engine_facts
from ._engines_plan import EngineFacts, EngineNode, EnginePlan, engine_plan
from ._engines_run import dry_run_lines as engine_dry_run_lines
from ._engines_run import engine_status, engine_up, first_token
from ._execute import REAL_EDGES, Edges, Executor, gather_facts, restart_gateway, up, workers_only
from ._fake import FakeNetwork, FakeNode, Program
from ._launch import LaunchFacts, Step, format_plan, plan_launch, started_argv
from ._logparse import DeviceMemory, LoadReport, LoadWarning, load_progress, load_warnings, parse_load_report
from ._measure import measure_spec
from ._nodes import node_for, transport_for
from ._planning import (
    draft_info,
    measured_spec,
    model_facts,
    plan_for_spec,
    plan_if_sized,
    plan_inputs,
    require_fit,
    spec_nodes,
    spec_options,
    speculation_problem,
    split_for_up,
)
from ._preflight import CheckRow, preflight
from ._run import Event, check_serving, down, port_in_use, require_state, resolve_engines
from ._spec import (
    ClusterSpec,
    GatewaySpec,
    HeadSpec,
    ServerSpec,
    SshSpec,
    SuperviseSpec,
    WorkerSpec,
    check_binds,
    check_files,
    load_spec,
    parse_spec,
)
from ._spec_engines import RaySpec, SglangSpec, VllmSpec
from ._ssh import SshNode, SshTransport
from ._state import STATE_FILE, ClusterState, ProcessRecord, read_state
from ._status import cluster_status, find_state_root, parse_spec_metrics
from ._supervise import Backoff, Supervisor, read_supervisor_log, supervise
from ._systemd import systemd_units
from ._transport import LocalNode, LocalTransport, Node, PortForward, ProcessRef, Transport, read_tail

__all__ = [
    "LINK_RTT_MEANING",
    "LINK_RTT_WARN_MS",
    "REAL_EDGES",
    "STATE_FILE",
    "Backoff",
    "CheckRow",
    "ClusterSpec",
    "ClusterState",
    "DeviceMemory",
    "Edges",
    "EngineFacts",
    "EngineNode",
    "EnginePlan",
    "Event",
    "Executor",
    "FakeNetwork",
    "FakeNode",
    "GatewaySpec",
    "HeadSpec",
    "LaunchFacts",
    "LaunchPlan",
    "LoadReport",
    "LoadWarning",
    "LocalNode",
    "LocalTransport",
    "Node",
    "PortForward",
    "ProcessPlan",
    "ProcessRecord",
    "ProcessRef",
    "Program",
    "RaySpec",
    "ServerSpec",
    "SglangSpec",
    "SshNode",
    "SshSpec",
    "SshTransport",
    "Step",
    "SuperviseSpec",
    "Supervisor",
    "Transport",
    "VllmSpec",
    "WorkerSpec",
    "check_binds",
    "check_files",
    "check_serving",
    "cluster_state_dir",
    "cluster_status",
    "down",
    "draft_info",
    "engine_dry_run_lines",
    "engine_plan",
    "engine_preflight",
    "engine_status",
    "engine_up",
    "find_state_root",
    "first_token",
    "format_plan",
    "gateway_plan",
    "gather_engine_facts",
    "gather_facts",
    "launch_plan",
    "link_rtt_status",
    "load_progress",
    "load_spec",
    "load_warnings",
    "measure_spec",
    "measured_spec",
    "model_facts",
    "node_for",
    "parse_load_report",
    "parse_spec",
    "parse_spec_metrics",
    "plan_for_spec",
    "plan_if_sized",
    "plan_inputs",
    "plan_launch",
    "port_in_use",
    "preflight",
    "read_state",
    "read_supervisor_log",
    "read_tail",
    "require_fit",
    "require_state",
    "resolve_engines",
    "restart_gateway",
    "rpc_argv",
    "server_argv",
    "spec_nodes",
    "spec_options",
    "speculation_argv",
    "speculation_problem",
    "split_for_up",
    "started_argv",
    "supervise",
    "systemd_units",
    "transport_for",
    "up",
    "workers_only",
]
