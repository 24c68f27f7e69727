"""``splitserve tune``'s search: the noise-aware decisions (:func:`margin`, :func:`beats`,
:func:`better_score`), the trace (:class:`Step`, :class:`SearchResult`), the bookkeeping of what was
measured, ruled out and the budget, :func:`coordinate_search` (with the start's re-measurement and
the confirmation of winners), :func:`grid_search` and the first pass ``--dry-run`` lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ._stats import median
from ._tune_metrics import Measurement, Metric
from ._tune_space import Axis, grid_points, grid_size, point_key, point_label

# -- noise-aware decisions ---------------------------------------------------------------------


def margin(a: Measurement, b: Measurement, min_gain: float, noise: float = 0.0) -> float:
    """How much better one of ``a``/``b`` must be to count: the larger spread of the two (or
    ``noise``, the typical spread of the search so far, when that is larger), and at least
    ``min_gain`` of ``b``'s score."""
    return max(a.spread, b.spread, noise, min_gain * abs(b.score or 0.0))


def beats(cand: Measurement, inc: Measurement, metric: Metric, min_gain: float = 0.02, noise: float = 0.0) -> bool:
    """Whether ``cand`` is better than the incumbent by more than the noise (see :func:`margin`)."""
    if not cand.ok:
        return False
    if not inc.ok:
        return True
    assert cand.score is not None and inc.score is not None
    diff = cand.score - inc.score if metric.higher else inc.score - cand.score
    return diff > margin(cand, inc, min_gain, noise)


def better_score(a: float | None, b: float | None, metric: Metric) -> bool:
    """``a`` strictly better than ``b`` (no noise rule: for picking a grid's best)."""
    if a is None:
        return False
    if b is None:
        return True
    return a > b if metric.higher else a < b


# -- the search ----------------------------------------------------------------------------------


@dataclass
class Step:
    """One measured point of a search."""

    run: int
    point: dict[str, Any]
    axis: str | None
    """The axis being varied (None: the start, or a grid point)."""
    measurement: Measurement
    verdict: str
    """``start``, ``new best``, ``within noise``, ``worse``, ``failed``; ``grid`` in a grid."""
    best: dict[str, Any]
    """The incumbent after this step."""
    merged: float | None = None
    """The score over every run of this point so far, when it has had more than one."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "point": self.point,
            "axis": self.axis,
            "verdict": self.verdict,
            "best": self.best,
            **self.measurement.as_dict(),
            "score_all_runs": self.merged,
        }


@dataclass
class SearchResult:
    mode: str
    """``tune`` (coordinate search) or ``grid``."""
    metric: Metric
    axes: list[Axis]
    start: dict[str, Any]
    best: dict[str, Any] | None
    best_measurement: Measurement | None
    steps: list[Step]
    excluded: list[tuple[dict[str, Any], str]]
    budget: int | None
    stopped: str
    """``converged``, ``budget``, ``passes``, ``grid``, ``interrupted``, ``failed``."""
    passes: int = 0
    min_gain: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def runs(self) -> int:
        return len(self.steps)

    @property
    def grid_size(self) -> int:
        return grid_size(self.axes)

    def measurement_of(self, point: dict[str, Any]) -> Measurement | None:
        """Every run of ``point`` together (None: never measured)."""
        runs = [s.measurement for s in self.steps if s.point == point]
        if not runs:
            return None
        out = runs[0].copy()
        for m in runs[1:]:
            out.merge(m)
        return out

    def start_measurement(self) -> Measurement | None:
        return self.measurement_of(self.start)

    def as_dict(self) -> dict[str, Any]:
        start = self.start_measurement()
        bm = self.best_measurement
        return {
            "mode": self.mode,
            "metric": self.metric.name,
            "metric_label": self.metric.label,
            "unit": self.metric.unit,
            "higher_is_better": self.metric.higher,
            "min_gain": self.min_gain,
            "axes": [{"name": a.name, "values": list(a.values), "ordered": a.ordered} for a in self.axes],
            "grid_size": self.grid_size,
            "runs": self.runs,
            "budget": self.budget,
            "stopped": self.stopped,
            "passes": self.passes,
            "start": self.start,
            "start_score": start.score if start else None,
            "best": self.best,
            "best_score": bm.score if bm else None,
            "best_spread": bm.spread if bm and bm.spread_known else None,
            "steps": [s.as_dict() for s in self.steps],
            "excluded": [{"point": p, "reason": r} for p, r in self.excluded],
            "notes": self.notes,
        }


class _BudgetSpent(Exception):
    """The search's budget of measurements is spent: a signal caught in this module, not an error."""


Measure = Callable[[dict[str, Any]], Measurement]
Feasible = Callable[[dict[str, Any]], "str | None"]
OnStep = Callable[[Step], None]


class _Book:
    """What a search has measured (one merged measurement per point) and ruled out; the budget."""

    def __init__(self, measure: Measure, feasible: Feasible, budget: int | None, on_step: OnStep | None) -> None:
        self.measure = measure
        self.feasible = feasible
        self.budget = budget
        self.on_step = on_step
        self.memo: dict[tuple[tuple[str, Any], ...], Measurement] = {}
        self.runs_of: dict[tuple[tuple[str, Any], ...], int] = {}
        self.ruled: dict[tuple[tuple[str, Any], ...], str | None] = {}
        self.excluded: list[tuple[dict[str, Any], str]] = []
        self.steps: list[Step] = []
        self.last: Measurement | None = None
        """The latest run's own measurement (the memo merges a point's runs)."""
        self.restart_noise = 0.0
        """How far two restarts of the same point fell apart (the start's, measured twice)."""

    def why_not(self, point: dict[str, Any]) -> str | None:
        key = point_key(point)
        if key not in self.ruled:
            reason = self.feasible(point)
            self.ruled[key] = reason
            if reason:
                self.excluded.append((dict(point), reason))
        return self.ruled[key]

    def _run(self, point: dict[str, Any]) -> Measurement:
        if self.budget is not None and len(self.steps) >= self.budget:
            raise _BudgetSpent
        own = self.measure(dict(point))
        self.last = own
        return own

    def get(self, point: dict[str, Any]) -> Measurement | None:
        """The point's measurement (measured now unless known); None when it is ruled out."""
        key = point_key(point)
        if key in self.memo:
            return self.memo[key]
        if self.why_not(point):
            return None
        own = self._run(point)
        self.memo[key] = own.copy()
        self.runs_of[key] = 1
        return self.memo[key]

    def again(self, point: dict[str, Any]) -> Measurement:
        """Measure a known point once more (a restart of its own); its samples join the earlier ones."""
        key = point_key(point)
        own = self._run(point)
        merged = self.memo[key]
        merged.merge(own)
        self.runs_of[key] = self.runs_of.get(key, 1) + 1
        return merged

    def noise(self) -> float:
        """The noise of the search so far: the larger of the restart-to-restart difference of the
        start and the typical (median) spread of the points measured (with three or more)."""
        spreads = [m.spread for m in self.memo.values() if m.ok and m.spread_known]
        typical = (median(spreads) or 0.0) if len(spreads) >= 3 else 0.0
        return max(typical, self.restart_noise)

    def record(self, point: dict[str, Any], axis: str | None, verdict: str, best: dict[str, Any]) -> None:
        own = self.last if self.last is not None else Measurement()
        key = point_key(point)
        merged = self.memo[key].score if self.runs_of.get(key, 0) > 1 and key in self.memo else None
        step = Step(len(self.steps) + 1, dict(point), axis, own, verdict, dict(best), merged)
        self.steps.append(step)
        if self.on_step:
            self.on_step(step)


def coordinate_search(
    axes: Sequence[Axis],
    start: dict[str, Any],
    measure: Measure,
    metric: Metric,
    feasible: Feasible = lambda p: None,
    budget: int | None = None,
    min_gain: float = 0.02,
    max_passes: int = 4,
    on_step: OnStep | None = None,
    confirm: bool = True,
) -> SearchResult:
    """One axis at a time from ``start`` (see the module's doc); ``axes`` in the order to visit.

    ``confirm``: the start is measured twice (two restarts: how far they fall apart is the noise
    floor of every comparison), and a point that beats the incumbent is measured again and wins
    only if it still does with both runs' samples, so one lucky restart does not move the search."""
    search = _CoordinateSearch(list(axes), _Book(measure, feasible, budget, on_step), metric, min_gain, confirm)
    return search.run(start, max_passes)


class _CoordinateSearch:
    """:func:`coordinate_search`'s state: the incumbent (``inc``, ``inc_m``) and the steps to move it."""

    def __init__(self, axes: list[Axis], book: _Book, metric: Metric, min_gain: float, confirm: bool) -> None:
        self.axes = axes
        self.book = book
        self.metric = metric
        self.min_gain = min_gain
        self.confirm = confirm
        self.notes: list[str] = []
        self.start: dict[str, Any] = {}
        self.inc: dict[str, Any] = {}
        self.inc_m: Measurement | None = None
        self.passes = 0

    def result(self, stopped: str, best: bool = True, notes: Sequence[str] = ()) -> SearchResult:
        """The search so far as a result (``best=False``: no best point, as when the start fails)."""
        book = self.book
        return SearchResult(
            "tune",
            self.metric,
            self.axes,
            self.start,
            self.inc if best else None,
            self.inc_m if best else None,
            book.steps,
            book.excluded,
            book.budget,
            stopped,
            self.passes,
            self.min_gain,
            self.notes + list(notes),
        )

    def run(self, start: dict[str, Any], max_passes: int) -> SearchResult:
        book = self.book
        self.start = start
        first = self.usable_start(dict(start))
        if first is None:
            return self.result("failed", best=False, notes=["the planner rules out every point of the grid"])
        self.start = dict(first)
        self.inc = first
        stopped = "passes"
        try:
            inc_m = self.inc_m = book.get(first)
            assert inc_m is not None
            book.record(first, None, "start" if inc_m.ok else "failed", first)
            if not inc_m.ok:
                why = inc_m.error or "no figures"
                return self.result("failed", best=False, notes=[f"the start {point_label(first)} failed: {why}"])
            if self.confirm:
                self.remeasure_start()
            for self.passes in range(1, max_passes + 1):
                before = dict(self.inc)
                for axis in self.axes:
                    if len(axis.values) < 2:
                        continue
                    if axis.ordered:
                        self.walk(axis)
                    else:
                        for value in axis.values:
                            if value != self.inc[axis.name]:
                                self.consider(self.inc | {axis.name: value}, axis.name)
                if self.inc == before:
                    stopped = "converged"
                    break
        except _BudgetSpent:
            stopped = "budget"
        except KeyboardInterrupt:
            return self.result("interrupted")
        return self.result(stopped)

    def usable_start(self, inc: dict[str, Any]) -> dict[str, Any] | None:
        """``inc``, or when the planner rules it out the grid's first point it allows (with a note);
        None when it allows none."""
        book = self.book
        if not book.why_not(inc):
            return inc
        reason = book.ruled[point_key(inc)]
        first = next((p for p in grid_points(self.axes) if not book.why_not(p)), None)
        if first is not None:
            self.notes.append(
                f"the start {point_label(inc)} is ruled out ({reason}); starting from {point_label(first)}"
            )
        return first

    def remeasure_start(self) -> None:
        """The start again: how far two restarts of one point fall apart is the noise floor."""
        book, inc = self.book, self.inc
        assert self.inc_m is not None
        first_score = self.inc_m.score
        book.again(inc)
        second = book.last.score if book.last is not None and book.last.ok else None
        if first_score is not None and second is not None:
            book.restart_noise = abs(first_score - second)
        book.record(inc, None, "start re-measured", inc)

    def walk(self, axis: Axis) -> None:
        """An ordered axis: up from the incumbent's value while each step wins, then down unless it
        climbed (one peak); a point the planner rules out is stepped over."""
        idx = axis.values.index(self.inc[axis.name])
        moved_up = False
        for direction in (1, -1):
            if direction == -1 and moved_up:
                break  # one peak: having climbed up, down is worse
            j = idx + direction
            while 0 <= j < len(axis.values):
                cand = self.inc | {axis.name: axis.values[j]}
                if self.book.why_not(cand):
                    j += direction  # ruled out: look past it
                    continue
                if not self.consider(cand, axis.name):
                    break  # early stop: a step that does not win ends this direction
                moved_up = moved_up or direction == 1
                j += direction

    def verdict_of(self, m: Measurement, ref: Measurement) -> str:
        if not m.ok:
            return "failed"
        assert m.score is not None and ref.score is not None
        ahead = better_score(m.score, ref.score, self.metric)
        near = abs(m.score - ref.score) <= margin(m, ref, self.min_gain, self.book.noise())
        return "within noise" if ahead or near else "worse"

    def consider(self, point: dict[str, Any], axis: str) -> bool:
        """Measure ``point`` (unless known) and make it the incumbent when it wins (confirmed by a
        second run with ``confirm``)."""
        book, inc, inc_m = self.book, self.inc, self.inc_m
        key = point_key(point)
        known = key in book.memo
        m = book.get(point)
        if m is None:
            return False
        assert inc_m is not None
        won = beats(m, inc_m, self.metric, self.min_gain, book.noise())
        pending = won and self.confirm and book.runs_of.get(key, 0) < 2
        if not known:
            book.record(
                point,
                axis,
                "ahead: confirming" if pending else ("new best" if won else self.verdict_of(m, inc_m)),
                point if won and not pending else inc,
            )
        if pending:
            if book.runs_of.get(point_key(inc), 0) < 2:
                book.again(inc)
                book.record(inc, None, "incumbent re-measured", inc)
            book.again(point)
            won = beats(m, inc_m, self.metric, self.min_gain, book.noise())
            book.record(point, axis, "new best (confirmed)" if won else "not confirmed", point if won else inc)
        if won:
            self.inc, self.inc_m = dict(point), m
        return won


def grid_search(
    axes: Sequence[Axis],
    start: dict[str, Any],
    measure: Measure,
    metric: Metric,
    feasible: Feasible = lambda p: None,
    budget: int | None = None,
    on_step: OnStep | None = None,
) -> SearchResult:
    """Every allowed point of the grid, in order; the best is the best score (no noise rule)."""
    axes = list(axes)
    book = _Book(measure, feasible, budget, on_step)
    best: dict[str, Any] | None = None
    best_m: Measurement | None = None
    stopped = "grid"
    try:
        for point in grid_points(axes):
            m = book.get(point)
            if m is None:
                continue
            if m.ok and (best_m is None or better_score(m.score, best_m.score, metric)):
                best, best_m = point, m
            book.record(point, None, "grid" if m.ok else "failed", best or point)
    except _BudgetSpent:
        stopped = "budget"
    except KeyboardInterrupt:
        stopped = "interrupted"
    return SearchResult("grid", metric, axes, start, best, best_m, book.steps, book.excluded, budget, stopped)


def first_pass_points(axes: Sequence[Axis], start: dict[str, Any]) -> list[dict[str, Any]]:
    """The points a first pass visits at most when nothing wins (the start, then every other value
    of each axis with the rest at the start): what ``--dry-run`` lists."""
    out = [dict(start)]
    for a in axes:
        for v in a.values:
            if v != start[a.name]:
                out.append(start | {a.name: v})
    return out
