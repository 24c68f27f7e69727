"""``splitserve tune`` as a library call: :func:`prepare_tune` turns what the user asked
(:class:`TuneRequest`) into the search's axes, start point, budget and the planner's exclusions;
:func:`tune` runs the search through `up` restarts, writes the run file, the best spec and the
report, and tells its progress as typed events (:data:`TuneEvent`) to a callback.  The command
line only parses its options and renders the events."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ClusterError, UsageError
from ._records import BenchRun
from ._speed import SpeedOptions
from ._tune import TuneOptions, run_tune, tune_out_path
from ._tune_metrics import Metric, metric_for
from ._tune_search import SearchResult, Step, first_pass_points
from ._tune_space import (
    Axis,
    PlannerCheck,
    default_axes,
    default_budget,
    grid_points,
    grid_size,
    order_axes,
    parse_axes,
    point_label,
    server_values,
    start_point,
)
from ._workloads import WorkloadPlan

# -- what the user asks ----------------------------------------------------------------------


@dataclass
class TuneRequest:
    """Everything ``tune`` is asked: the spec (loaded), the workload's measurement, the axes."""

    spec: Any
    opts: SpeedOptions
    plan: WorkloadPlan
    workload: str
    metric: str = "decode"
    axes: list[str] | None = None
    """``--set NAME=V1,V2`` strings; None: the default axes from the spec."""
    budget_runs: int | None = None
    grid: bool = False
    min_gain: float = 0.02
    confirm: bool = True
    compare_with: Path | None = None
    out: Path | None = None
    label: str = ""
    ignore_eos: bool | None = None
    api_key: str | None = None
    cores: tuple[int, int] | None = None
    """(physical, logical) cores of this machine; None: asked of psutil."""


@dataclass
class TunePlan:
    """The search :func:`prepare_tune` sets up: what ``--dry-run`` shows and :func:`tune` runs."""

    request: TuneRequest
    metric: Metric
    axes: list[Axis]
    start: dict[str, Any]
    notes: list[str]
    check: PlannerCheck
    budget: int | None
    size: int
    compare_run: BenchRun | None

    def rows(self) -> list[tuple[dict[str, Any], str | None]]:
        """The points the first pass may try (every point with ``grid``), each with why the
        planner rules it out (None: allowed)."""
        shown = grid_points(self.axes) if self.request.grid else first_pass_points(self.axes, self.start)
        return [(p, self.check(p)) for p in shown]

    def ruled_elsewhere(self) -> dict[str, list[dict[str, Any]]]:
        """The grid's other ruled-out points by reason, the most common first (none with ``grid``)."""
        if self.request.grid:
            return {}
        shown = [p for p, _ in self.rows()]
        by_reason: dict[str, list[dict[str, Any]]] = {}
        for p in grid_points(self.axes):
            why = self.check(p)
            if why and p not in shown:
                by_reason.setdefault(why, []).append(p)
        return dict(sorted(by_reason.items(), key=lambda kv: -len(kv[1])))

    def allowed(self) -> int:
        return sum(1 for p in grid_points(self.axes) if not self.check(p))


# -- what it tells on the way ------------------------------------------------------------------


@dataclass(frozen=True)
class TuneWarning:
    """A caveat about the request itself (before anything is set up)."""

    text: str


@dataclass(frozen=True)
class TuneStarted:
    """The search begins: its run file, grid and budget."""

    path: Path
    notes: list[str]
    axes: list[Axis]
    size: int
    budget: int | None
    grid: bool
    metric: Metric
    workload: str


@dataclass(frozen=True)
class PointRuledOut:
    """A point the planner rules out, told once; ``n`` counts the distinct ones so far."""

    label: str
    why: str
    n: int


@dataclass(frozen=True)
class PointStarted:
    """A point's restart begins (``run`` of at most ``budget``)."""

    run: int
    budget: int | None
    point: dict[str, Any]
    label: str


@dataclass(frozen=True)
class PointMeasured:
    step: Step
    unit: str


@dataclass(frozen=True)
class PointFailed:
    step: Step
    error: str


@dataclass(frozen=True)
class NodeNote:
    """A node's note during a restart (a stale process, ...)."""

    node: str
    message: str


@dataclass(frozen=True)
class BudgetSpent:
    runs: int
    budget: int | None


@dataclass(frozen=True)
class ReportWritten:
    run_path: Path
    report: Path


@dataclass(frozen=True)
class BestFound:
    point: dict[str, Any]
    label: str
    score: float
    unit: str
    start_score: float | None
    runs: int
    size: int
    excluded: int
    stopped: str


@dataclass(frozen=True)
class BestSpecWritten:
    path: Path
    changes: dict[str, Any]
    """The [server] keys the best point changed (None: back to the default); empty: the spec won."""


TuneEvent = (
    TuneWarning
    | TuneStarted
    | PointRuledOut
    | PointStarted
    | PointMeasured
    | PointFailed
    | NodeNote
    | BudgetSpent
    | ReportWritten
    | BestFound
    | BestSpecWritten
)
OnTuneEvent = Callable[[TuneEvent], None]


@dataclass
class TuneResult:
    run: BenchRun
    path: Path
    search: SearchResult
    report: Path
    best_spec: Path | None = None
    changes: dict[str, Any] = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        return self.search.stopped == "interrupted"


# -- the calls ---------------------------------------------------------------------------------


def tune_request(
    spec: Any,
    opts: SpeedOptions,
    plan: WorkloadPlan,
    *,
    workload: str,
    metric: str = "decode",
    axes: list[str] | None = None,
    budget_runs: int | None = None,
    grid: bool = False,
    min_gain: float = 0.02,
    confirm: bool = True,
    compare_with: Path | None = None,
    out: Path | None = None,
    label: str = "",
    ignore_eos: bool | None = None,
    api_key: str | None = None,
) -> TuneRequest:
    """The request of ``splitserve tune``'s options: the metric by its own name (``--metric``
    checked), exactly one workload (``workload`` is what ``--workload`` said; ``opts`` holds it
    parsed), ``axes`` the ``--set`` strings (none: the defaults)."""
    m = metric_for(metric)
    if len(opts.workloads) != 1:
        raise UsageError(f"--workload {workload}: tune optimizes for one workload; give one of them")
    return TuneRequest(
        spec=spec,
        opts=opts,
        plan=plan,
        workload=opts.workloads[0],
        metric=m.name,
        axes=axes or None,
        budget_runs=budget_runs,
        grid=grid,
        min_gain=min_gain,
        confirm=confirm,
        compare_with=compare_with,
        out=out,
        label=label,
        ignore_eos=ignore_eos,
        api_key=api_key,
    )


def rewrite_tune_report(run_path: Path, compare_with: Path | None = None) -> Path:
    """``tune --report RUN.json``: (re)write the report of an earlier tune run beside it (folder
    ``RUN/``, naming ``RUN.toml`` when that best spec is there), against the grid run
    ``compare_with`` if given; returns the report's Markdown file.  Starts nothing."""
    from ._records import load_run
    from ._tune_report import write_tune_report

    run = load_run(run_path)
    if "tune" not in run.summary:
        raise UsageError(f"--report {run_path}: not a tune run (no tune summary); `bench report` renders other runs")
    grid = load_run(compare_with) if compare_with is not None else None
    best = run_path.with_suffix(".toml")
    md, _ = write_tune_report(run, run_path.with_suffix(""), grid, best if best.is_file() else None)
    return md


def prepare_tune(req: TuneRequest, on_event: OnTuneEvent = lambda _e: None) -> TunePlan:
    """The axes (``--set`` or the defaults from the spec), each value checked against the spec
    before anything starts, in search order; the start point, the budget and the grid run to
    compare with.  Starts nothing."""
    import psutil

    from ._cluster import with_server
    from ._records import load_run

    m = metric_for(req.metric)
    if m.name == "prefill" and req.workload == "agent":
        on_event(
            TuneWarning(
                "agent turns after the first are served from the prompt cache; their prefill figures are few tokens"
            )
        )
    cores = req.cores or (psutil.cpu_count(logical=False) or 1, psutil.cpu_count() or 1)
    check = PlannerCheck(req.spec)
    axes = parse_axes(req.axes) if req.axes else default_axes(req.spec.server, check.supported_types(), cores)
    for a in axes:
        for v in a.values:
            with_server(req.spec, server_values({a.name: v}))  # every value is valid before anything starts
    axes = order_axes(axes, m)
    start, start_notes = start_point(req.spec.server, axes, cores)
    plan = TunePlan(req, m, list(axes), start, start_notes + check.notes, check, None, grid_size(axes), None)
    if req.budget_runs is not None:
        plan.budget = req.budget_runs
    elif not req.grid:
        plan.budget = default_budget(axes, plan.allowed(), req.confirm)
    plan.compare_run = load_run(req.compare_with) if req.compare_with is not None else None
    return plan


def tune(
    req: TuneRequest,
    on_event: OnTuneEvent = lambda _e: None,
    *,
    plan: TunePlan | None = None,
    restarter: Any = None,
    transport: Any = None,
) -> TuneResult:
    """Search the server settings for ``req`` (every allowed point with ``req.grid``), each point
    restarted through `up` (``restarter``: a :class:`ClusterRestarter` of the spec unless given);
    writes the run file, the best spec (unless interrupted or failed) and the report.  Raises
    :class:`ClusterError` when no point could be measured, after the run and report are written."""
    from ._cluster import ClusterRestarter, engine_provenance

    plan = plan or prepare_tune(req, on_event)
    path = tune_out_path(req.out)
    on_event(TuneStarted(path, plan.notes, plan.axes, plan.size, plan.budget, req.grid, plan.metric, req.workload))
    if restarter is None:
        restarter = ClusterRestarter(
            req.spec,
            on_event=lambda ev: on_event(NodeNote(ev.node, ev.message)) if ev.kind == "stale" else None,
            ignore_eos=req.ignore_eos,
            api_key=req.api_key,
        )
        engine = engine_provenance(req.spec)
    else:
        engine = {}
    run, path, search = run_tune(
        restarter,
        req.spec,
        plan.axes,
        plan.start,
        req.opts,
        TuneOptions(req.metric, req.workload, plan.budget, req.grid, req.min_gain, confirm=req.confirm),
        _feasible(plan, on_event),
        path,
        req.label,
        req.plan,
        engine,
        on_point=_counter(plan.budget, on_event),
        on_step=lambda step: on_event(_step_event(step, plan.metric)),
        transport=transport,
        notes=plan.notes,
    )
    return _finish(req, plan, run, path, search, on_event)


def _feasible(plan: TunePlan, on_event: OnTuneEvent) -> Callable[[dict[str, Any]], str | None]:
    seen: set[str] = set()

    def feasible(point: dict[str, Any]) -> str | None:
        why = plan.check(point)
        label = point_label(point)
        if why and label not in seen:
            seen.add(label)
            on_event(PointRuledOut(label, why, len(seen)))
        return why

    return feasible


def _counter(budget: int | None, on_event: OnTuneEvent) -> Callable[[dict[str, Any]], None]:
    count = [0]

    def on_point(point: dict[str, Any]) -> None:
        count[0] += 1
        on_event(PointStarted(count[0], budget, point, point_label(point)))

    return on_point


def _step_event(step: Step, metric: Metric) -> TuneEvent:
    ms = step.measurement
    return PointMeasured(step, metric.unit) if ms.ok else PointFailed(step, str(ms.error))


def _finish(
    req: TuneRequest, plan: TunePlan, run: BenchRun, path: Path, search: SearchResult, on_event: OnTuneEvent
) -> TuneResult:
    from ._tune_report import write_tune_report
    from ._tune_spec import write_best_spec

    out = TuneResult(run, path, search, path)
    if search.stopped == "budget":
        on_event(BudgetSpent(search.runs, plan.budget))
    if search.best is not None and search.stopped not in ("interrupted", "failed"):
        out.best_spec, out.changes = write_best_spec(req.spec, search, path.with_suffix(".toml"), path, req.workload)
    out.report, _pngs = write_tune_report(run, path.with_suffix(""), plan.compare_run, out.best_spec)
    on_event(ReportWritten(path, out.report))
    if out.interrupted:
        return out
    if search.stopped == "failed" or search.best is None:
        raise ClusterError(f"tune: no point could be measured: {(search.notes or ['see ' + str(path)])[-1]}")
    bm, sm = search.best_measurement, search.start_measurement()
    assert bm is not None and bm.score is not None
    start = sm.score if sm is not None else None
    on_event(
        BestFound(
            search.best,
            point_label(search.best),
            bm.score,
            plan.metric.unit,
            start,
            search.runs,
            plan.size,
            len(search.excluded),
            search.stopped,
        )
    )
    if out.best_spec is not None:
        on_event(BestSpecWritten(out.best_spec, out.changes))
    return out
