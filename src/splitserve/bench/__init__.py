"""Speed measurements against any OpenAI-compatible endpoint or a splitserve cluster:
prefill/decode speed, latency, concurrency, long context with needle retrieval,
server-parameter sweeps (speculation types among them), workloads shaped like a coding
agent's traffic (copy, edit, json, a replayed tool loop) with draft acceptance and agreement
with a non-speculative reference, llama-bench, and reports of one or several runs."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._client import Target
from ._context import ContextOptions, parse_depths, parse_lengths
from ._llamabench import EngineBenchOptions
from ._records import load_run, run_path
from ._run import parse_set, plan_for, run_context, run_engine_bench, run_speed, run_sweep
from ._speed import SpeedOptions
from ._workloads import parse_workloads, with_baseline

if TYPE_CHECKING:  # imported on first use (below): clusters and tune pull in the cluster layer, reports rich
    from ._cluster import ClusterRestarter, cluster_facts, cluster_target, engine_provenance, with_server, workers_only
    from ._describe import caption
    from ._report import write_report
    from ._summary import summary_tables
    from ._tune import point_label
    from ._tune_job import (
        BestFound,
        BestSpecWritten,
        NodeNote,
        PointFailed,
        PointMeasured,
        PointRuledOut,
        PointStarted,
        ReportWritten,
        TuneEvent,
        TunePlan,
        TuneRequest,
        TuneStarted,
        TuneWarning,
        prepare_tune,
        rewrite_tune_report,
        tune,
        tune_request,
    )

#: name -> the module that defines it, imported on first use
_LAZY = {
    **dict.fromkeys(
        ["ClusterRestarter", "cluster_facts", "cluster_target", "engine_provenance", "with_server", "workers_only"],
        "_cluster",
    ),
    "caption": "_describe",
    "write_report": "_report",
    "summary_tables": "_summary",
    "point_label": "_tune",
    **dict.fromkeys(
        [
            "BestFound",
            "BestSpecWritten",
            "NodeNote",
            "PointFailed",
            "PointMeasured",
            "PointRuledOut",
            "PointStarted",
            "ReportWritten",
            "TuneEvent",
            "TunePlan",
            "TuneRequest",
            "TuneStarted",
            "TuneWarning",
            "prepare_tune",
            "rewrite_tune_report",
            "tune",
            "tune_request",
        ],
        "_tune_job",
    ),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "BestFound",
    "BestSpecWritten",
    "ClusterRestarter",
    "ContextOptions",
    "EngineBenchOptions",
    "NodeNote",
    "PointFailed",
    "PointMeasured",
    "PointRuledOut",
    "PointStarted",
    "ReportWritten",
    "SpeedOptions",
    "Target",
    "TuneEvent",
    "TunePlan",
    "TuneRequest",
    "TuneStarted",
    "TuneWarning",
    "caption",
    "cluster_facts",
    "cluster_target",
    "engine_provenance",
    "load_run",
    "parse_depths",
    "parse_lengths",
    "parse_set",
    "parse_workloads",
    "plan_for",
    "point_label",
    "prepare_tune",
    "rewrite_tune_report",
    "run_context",
    "run_engine_bench",
    "run_path",
    "run_speed",
    "run_sweep",
    "summary_tables",
    "tune",
    "tune_request",
    "with_baseline",
    "with_server",
    "workers_only",
    "write_report",
]
