"""Speed measurements against any OpenAI-compatible endpoint or a splitserve cluster:
prefill/decode speed, latency, concurrency, long context with needle retrieval,
server-parameter sweeps (speculation types among them), workloads shaped like a coding
agent's traffic (copy, edit, json, a replayed tool loop) with draft acceptance and agreement
with a non-speculative reference, llama-bench, and reports of one or several runs."""

from __future__ import annotations

from ._client import BenchClient, Target
from ._context import CONTROL, ContextOptions, grade, parse_depths, parse_lengths
from ._llamabench import EngineBenchOptions, bench_test_label, llama_bench_argv
from ._records import BenchRun, RequestRecord, RunWriter, SweepPoint, load_run
from ._run import parse_set, run_context, run_engine_bench, run_speed, run_sweep
from ._speed import SpeedOptions
from ._stats import percentile, request_metrics, summarize
from ._stream import SSEDecoder, StreamTimer
from ._workloads import WORKLOADS, agreement, build_plan, parse_workloads

__all__ = [
    "CONTROL",
    "WORKLOADS",
    "BenchClient",
    "BenchRun",
    "ContextOptions",
    "EngineBenchOptions",
    "RequestRecord",
    "RunWriter",
    "SSEDecoder",
    "SpeedOptions",
    "StreamTimer",
    "SweepPoint",
    "Target",
    "agreement",
    "bench_test_label",
    "build_plan",
    "grade",
    "llama_bench_argv",
    "load_run",
    "parse_depths",
    "parse_lengths",
    "parse_set",
    "parse_workloads",
    "percentile",
    "request_metrics",
    "run_context",
    "run_engine_bench",
    "run_speed",
    "run_sweep",
    "summarize",
]
