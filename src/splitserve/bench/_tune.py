"""``splitserve tune``: find the server settings that serve one workload fastest, in few restarts.

The search space is a grid of server options (``ubatch``, ``batch``, ``threads``,
``speculation``, the KV cache type ``kv``, or any ``--set`` axes).  Every point the planner
says will not fit (or that llama.cpp cannot run) is ruled out before anything starts.
Each point measured is one restart of the cluster through `up`
(:class:`~splitserve.bench._cluster.ClusterRestarter`) and the same measurement as
``bench sweep``: the speed bench's workload cells, ``repeat`` requests, the figure of the
chosen metric per request.

Coordinate search (:func:`coordinate_search`): from the spec's own settings, one axis at a
time in an order that puts the biggest effects first (speculation, threads, KV type, ubatch,
batch for decode; ubatch first for prefill); a categorical axis tries each value, an ordered
one walks from the current value while each step wins and stops at the first that does not
(early stopping); passes repeat until one changes nothing.  A point wins only when it beats
the incumbent by more than the run-to-run spread of either (max - min over its requests) and
by at least ``min_gain`` of the incumbent, so noise does not move the search; ties keep the
spec's own settings.  :func:`grid_search` measures every allowed point (``tune --grid``), to
check the search against.

The pure parts (axes, the search, the comparison, the spec writer) take plain data; the
driver :func:`run_tune` writes a ``sweep`` run file (every point's records, as ``bench
sweep`` writes them) with the search's trace in ``settings["tune"]`` / ``summary["tune"]``.

The parts live in their own modules and are all importable from here: the metrics and a point's
measurement in :mod:`._tune_metrics`, the axes, points and the planner's exclusion in
:mod:`._tune_space`, the search and its noise rule in :mod:`._tune_search`, the best spec's writer
in :mod:`._tune_spec`, the comparison with a grid and the report in :mod:`._tune_report`; this
module holds the driver (:class:`PointRunner`, :func:`run_tune`).
"""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .._errors import AuthError, SplitserveError
from ._client import BenchClient
from ._machine import machine_info
from ._records import BenchRun, RequestRecord, RunWriter, SweepPoint, new_run_id
from ._speed import Session, SpeedOptions, speed_notes, workload_cells
from ._tune_metrics import (
    METRICS,
    Measurement,
    Metric,
    exchangeable,
    keyed_samples,
    metric_for,
    record_kind,
    samples_of,
)
from ._tune_report import compare, plot_tune, scores_of_run, tune_markdown, write_tune_report
from ._tune_search import (
    Feasible,
    Measure,
    OnStep,
    SearchResult,
    Step,
    beats,
    better_score,
    coordinate_search,
    first_pass_points,
    grid_search,
    margin,
)
from ._tune_space import (
    DEFAULT_BATCH,
    DEFAULT_KV,
    DEFAULT_SPECULATION,
    DEFAULT_UBATCH,
    INT_FIELDS,
    KV,
    LLAMA_DEFAULTS,
    ORDERS,
    UNSET,
    Axis,
    PlannerCheck,
    axis_name,
    default_axes,
    default_budget,
    default_threads,
    grid_points,
    grid_size,
    norm_value,
    order_axes,
    parse_axes,
    point_key,
    point_label,
    server_values,
    spec_value,
    start_point,
)
from ._tune_spec import (
    PATH_KEYS,
    dump_toml,
    set_key,
    spec_changes,
    toml_value,
    tuned_spec_text,
    write_best_spec,
)
from ._workloads import WorkloadPlan, apply_baselines

__all__ = [  # every public name, as before the split
    "DEFAULT_BATCH",
    "DEFAULT_KV",
    "DEFAULT_SPECULATION",
    "DEFAULT_UBATCH",
    "INT_FIELDS",
    "KV",
    "LLAMA_DEFAULTS",
    "METRICS",
    "ORDERS",
    "PATH_KEYS",
    "UNSET",
    "Axis",
    "Feasible",
    "Measure",
    "Measurement",
    "Metric",
    "OnStep",
    "PlannerCheck",
    "PointRunner",
    "SearchResult",
    "Step",
    "TuneOptions",
    "axis_name",
    "beats",
    "better_score",
    "compare",
    "coordinate_search",
    "default_axes",
    "default_budget",
    "default_threads",
    "dump_toml",
    "exchangeable",
    "first_pass_points",
    "grid_points",
    "grid_search",
    "grid_size",
    "keyed_samples",
    "margin",
    "metric_for",
    "norm_value",
    "order_axes",
    "parse_axes",
    "plot_tune",
    "point_key",
    "point_label",
    "record_kind",
    "run_tune",
    "samples_of",
    "scores_of_run",
    "server_values",
    "set_key",
    "spec_changes",
    "spec_value",
    "start_point",
    "toml_value",
    "tune_markdown",
    "tune_out_path",
    "tuned_spec_text",
    "write_best_spec",
    "write_tune_report",
]


# -- the driver ------------------------------------------------------------------------------


@dataclass
class TuneOptions:
    metric: str = "decode"
    workload: str = "chat"
    budget: int | None = None
    grid: bool = False
    min_gain: float = 0.02
    max_passes: int = 4
    confirm: bool = True

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tune_out_path(out: Path | None) -> Path:
    """The run file: ``out`` when it ends in .json, else ``out/tune-<stamp>.json`` (default
    ``./tune-runs``)."""
    if out is not None and out.suffix == ".json":
        return out
    return (out or Path("tune-runs")) / f"{new_run_id('tune')}.json"


def _run_id(path: Path) -> str:
    stem = path.stem
    return stem if re.fullmatch(r"tune-\d{8}T\d{6}Z-[0-9a-f]{4}", stem) else new_run_id("tune")


class PointRunner:
    """Measures one point as ``bench sweep`` does: restart through ``restarter``, probe, calibrate,
    the workload cells; the records go into ``run`` (one :class:`SweepPoint` per point)."""

    def __init__(
        self,
        restarter: Any,
        opts: SpeedOptions,
        plan: WorkloadPlan,
        writer: RunWriter,
        metric: Metric,
        workload: str,
        progress: Callable[[RequestRecord], None] | None = None,
        on_point: Callable[[dict[str, Any]], None] | None = None,
        transport: Any = None,
    ) -> None:
        self.restarter = restarter
        self.opts = opts
        self.plan = plan
        self.writer = writer
        self.metric = metric
        self.workload = workload
        self.progress = progress
        self.on_point = on_point
        self.transport = transport
        self.nonce = secrets.token_hex(3)

    def __call__(self, point: dict[str, Any]) -> Measurement:
        from ._run import check_workload_target
        from ._tables import spec_figures

        run = self.writer.run
        values = server_values(point)
        if self.on_point:
            self.on_point(point)
        sp = SweepPoint(values=values)
        run.points.append(sp)
        try:
            target, facts = self.restarter.start(values)
        except KeyboardInterrupt:
            raise
        except Exception as exc:  # noqa: BLE001 - a point that does not start is a result, not the end
            sp.error = str(exc)
            self.writer.flush()
            return Measurement(error=f"did not start: {exc}")
        check_workload_target(target, self.opts)
        run.target = target.describe()
        opts, plan = self.opts, self.plan

        def emit(rec: RequestRecord) -> None:
            self.writer.add(rec, sp)
            if self.progress:
                self.progress(rec)

        async def main() -> None:
            async with BenchClient(
                target, transport=self.transport, max_connections=max(opts.concurrency) + 2
            ) as client:
                sp.server = (await client.probe()) | {"cluster": facts}
                self.writer.flush()
                session = Session(client, emit, nonce=self.nonce)
                await session.calibrate()
                try:
                    await workload_cells(session, opts, plan, extra_cell=dict(values))
                finally:
                    run.notes.extend(f"{values}: {n}" for n in speed_notes(session, sp.records, sp.server, opts))

        try:
            asyncio.run(main())
        except AuthError:
            raise  # every point would be refused the same way
        except SplitserveError as exc:  # every probe failed, ...: this point has no figures
            sp.error = str(exc)
            self.writer.flush()
            return Measurement(error=str(exc))
        apply_baselines(run)
        self.writer.flush()
        kind = record_kind(self.workload)
        recs = [r for r in sp.records if r.kind == kind]
        keyed = keyed_samples(sp.records, self.metric, self.workload)
        samples = [v for _, v in keyed]
        figs = spec_figures(recs)
        extra = {k: figs[k] for k in ("acceptance", "agreement") if figs.get(k) is not None}
        failed = [r for r in recs if not r.ok]
        if failed:
            extra["failed_requests"] = len(failed)
        if not samples:
            why = failed[0].error if failed else "no requests of the workload"
            return Measurement(error=f"no {self.metric.label} figures: {why}", extra=extra)
        return Measurement(
            samples=samples, extra=extra, ids=[i for i, _ in keyed], alike=exchangeable(self.workload, self.metric)
        )


def _new_tune_run(
    path: Path,
    spec: Any,
    axes: Sequence[Axis],
    start: dict[str, Any],
    opts: SpeedOptions,
    topts: TuneOptions,
    plan: WorkloadPlan,
    label: str,
) -> BenchRun:
    """The run a tune writes: a sweep whose settings hold the tune's own (mode, spec, axes, start)."""
    metric = metric_for(topts.metric)
    mode = "grid" if topts.grid else "tune"
    return BenchRun(
        kind="sweep",
        id=_run_id(path),
        label=label or f"{mode} {spec.name} ({topts.workload}, {metric.name})",
        machine=machine_info(),
        settings=opts.as_dict()
        | {
            "workload_items": plan.describe(),
            "tune": topts.as_dict()
            | {
                "mode": mode,
                "spec_file": str(spec.source_file) if spec.source_file else None,
                "axes": [{"name": a.name, "values": list(a.values)} for a in axes],
                "start": start,
            },
        },
    )


def _search(
    axes: Sequence[Axis],
    start: dict[str, Any],
    runner: PointRunner,
    metric: Metric,
    feasible: Feasible,
    topts: TuneOptions,
    on_step: OnStep | None,
) -> SearchResult:
    """The grid (``topts.grid``) or the coordinate search, measuring through ``runner``."""
    if topts.grid:
        return grid_search(axes, start, runner, metric, feasible, topts.budget, on_step)
    return coordinate_search(
        axes,
        start,
        runner,
        metric,
        feasible,
        topts.budget,
        topts.min_gain,
        topts.max_passes,
        on_step,
        topts.confirm,
    )


def run_tune(
    restarter: Any,
    spec: Any,
    axes: Sequence[Axis],
    start: dict[str, Any],
    opts: SpeedOptions,
    topts: TuneOptions,
    feasible: Feasible,
    out: Path | None = None,
    label: str = "",
    plan: WorkloadPlan | None = None,
    engine: dict[str, Any] | None = None,
    progress: Callable[[RequestRecord], None] | None = None,
    on_point: Callable[[dict[str, Any]], None] | None = None,
    on_step: OnStep | None = None,
    transport: Any = None,
    notes: Sequence[str] = (),
) -> tuple[BenchRun, Path, SearchResult]:
    """Search (or, with ``topts.grid``, measure the whole grid), writing the run file as it goes;
    the cluster is brought back as it was (``restarter.finish()``) however it ends."""
    from ._run import plan_for, summarize_run

    metric = metric_for(topts.metric)
    plan = plan or plan_for(opts)
    path = tune_out_path(out)
    run = _new_tune_run(path, spec, axes, start, opts, topts, plan, label)
    run.engine = engine or {}
    run.notes.extend(notes)
    writer = RunWriter(run, path)
    runner = PointRunner(restarter, opts, plan, writer, metric, topts.workload, progress, on_point, transport)
    result: SearchResult | None = None
    interrupted = False
    try:
        result = _search(axes, start, runner, metric, feasible, topts, on_step)
        interrupted = result.stopped == "interrupted"
    except BaseException:
        interrupted = True
        raise
    finally:
        try:
            run.notes.append(restarter.finish())
        finally:
            apply_baselines(run)
            try:
                run.summary = summarize_run(run)
            except Exception as exc:  # noqa: BLE001  (a summary must never cost the measured records)
                run.notes.append(f"no summary: {type(exc).__name__}: {exc}")
            if result is not None:
                run.notes.extend(result.notes)
                run.summary["tune"] = result.as_dict()
            writer.close(interrupted=interrupted)
    return run, path, result
