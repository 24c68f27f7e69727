"""Clusters: the spec, the launch plan, starting and stopping processes, their state and logs."""

from __future__ import annotations

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
from ._logparse import DeviceMemory, LoadReport, LoadWarning, load_progress, load_warnings, parse_load_report
from ._preflight import CheckRow, preflight
from ._run import Event, check_serving, down, port_in_use, require_state, resolve_engines, up
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
from ._ssh import SshTransport
from ._state import STATE_FILE, ClusterState, ProcessRecord, read_state
from ._status import cluster_status, find_state_root, parse_spec_metrics
from ._supervise import Backoff, Supervisor, read_supervisor_log, supervise
from ._systemd import systemd_units
from ._transport import LocalTransport, ProcessRef, Transport, read_tail, transport_for

__all__ = [
    "STATE_FILE",
    "Backoff",
    "CheckRow",
    "ClusterSpec",
    "ClusterState",
    "DeviceMemory",
    "Event",
    "GatewaySpec",
    "HeadSpec",
    "LaunchPlan",
    "LoadReport",
    "LoadWarning",
    "LocalTransport",
    "ProcessPlan",
    "ProcessRecord",
    "ProcessRef",
    "ServerSpec",
    "SshSpec",
    "SshTransport",
    "SuperviseSpec",
    "Supervisor",
    "Transport",
    "WorkerSpec",
    "check_binds",
    "check_files",
    "check_serving",
    "cluster_state_dir",
    "cluster_status",
    "down",
    "find_state_root",
    "gateway_plan",
    "launch_plan",
    "load_progress",
    "load_spec",
    "load_warnings",
    "parse_load_report",
    "parse_spec",
    "parse_spec_metrics",
    "port_in_use",
    "preflight",
    "read_state",
    "read_supervisor_log",
    "read_tail",
    "require_state",
    "resolve_engines",
    "rpc_argv",
    "server_argv",
    "speculation_argv",
    "supervise",
    "systemd_units",
    "transport_for",
    "up",
]
