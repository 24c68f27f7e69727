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
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import re
import secrets
import tomllib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .._errors import ClusterError, SplitserveError, UsageError
from ._client import BenchClient
from ._machine import machine_info
from ._records import BenchRun, RequestRecord, RunWriter, SweepPoint, new_run_id
from ._speed import Session, SpeedOptions, speed_notes, workload_cells
from ._stats import batch_throughput, median, request_metrics
from ._workloads import WorkloadPlan, apply_baselines

# -- metrics ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    name: str
    label: str
    unit: str
    higher: bool
    """Higher is better (speeds); lower is better (latencies)."""


METRICS = {
    "decode": Metric("decode", "decode t/s (server)", "t/s", True),
    "prefill": Metric("prefill", "prefill t/s (server)", "t/s", True),
    "ttft": Metric("ttft", "time to first token", "ms", False),
    "e2e": Metric("e2e", "end-to-end latency", "ms", False),
    "throughput": Metric("throughput", "aggregate throughput t/s", "t/s", True),
}


def metric_for(name: str) -> Metric:
    m = METRICS.get(name.strip().lower())
    if m is None:
        raise UsageError(f"--metric {name!r}: use one of {', '.join(METRICS)}")
    return m


def record_kind(workload: str) -> str:
    """The record kind of a workload's requests (``chat`` is the speed bench's ``speed``)."""
    return "speed" if workload == "chat" else workload


def keyed_samples(records: Iterable[RequestRecord], metric: Metric, workload: str) -> list[tuple[str, float]]:
    """(request id, figure) per request of ``workload`` (per batch for ``throughput``); failed requests
    and, for prefill figures, prompt-cache hits left out."""
    kind = record_kind(workload)
    recs = [r for r in records if r.kind == kind and r.ok]
    if metric.name in ("prefill", "ttft"):
        recs = [r for r in recs if not r.cache_hit]
    if metric.name == "throughput":
        return [(f"batch-{i}", v) for i, v in enumerate(batch_throughput(recs))]
    out: list[tuple[str, float]] = []
    for r in recs:
        if metric.name == "decode":
            v = request_metrics(r)["decode_tps_server"]
        elif metric.name == "prefill":
            v = request_metrics(r)["prefill_tps_server"]
        elif metric.name == "ttft":
            v = r.ttf_token_ms
        else:
            v = r.e2e_ms
        if v is not None and not math.isnan(v):
            out.append((r.id, float(v)))
    return out


def samples_of(records: Iterable[RequestRecord], metric: Metric, workload: str) -> list[float]:
    return [v for _, v in keyed_samples(records, metric, workload)]


def exchangeable(workload: str, metric: Metric) -> bool:
    """Whether a point's requests are alike (``chat``: random words of one size), so that their spread is
    noise; the fixed workloads send different items (files, turns) whose speeds differ for reasons of
    their own, so only the same request's runs are compared for noise."""
    return workload == "chat" or metric.name == "throughput"


@dataclass
class Measurement:
    """A point's figures: one sample per request; the score is their median.  The spread is max - min
    over the samples, or (``alike=False``) over the runs of the same request (its id)."""

    samples: list[float] = field(default_factory=list)
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    ids: list[str] = field(default_factory=list)
    alike: bool = True

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.samples)

    @property
    def score(self) -> float | None:
        return median(self.samples)

    @property
    def spread(self) -> float:
        if self.alike or len(self.ids) != len(self.samples):
            return max(self.samples) - min(self.samples) if len(self.samples) > 1 else 0.0
        groups: dict[str, list[float]] = {}
        for i, v in zip(self.ids, self.samples):
            groups.setdefault(i, []).append(v)
        return max((max(g) - min(g) for g in groups.values()), default=0.0)

    def merge(self, other: Measurement) -> None:
        """Another run's samples join these."""
        if other.ok:
            if len(self.ids) == len(self.samples) and len(other.ids) == len(other.samples):
                self.ids.extend(other.ids)
            else:
                self.ids = []
            self.samples.extend(other.samples)
            if self.samples:
                self.error = None

    def copy(self) -> Measurement:
        return Measurement(list(self.samples), self.error, dict(self.extra), list(self.ids), self.alike)

    @property
    def spread_known(self) -> bool:
        """Whether the spread says anything: alike samples (two or more), or a request run twice."""
        if self.alike or len(self.ids) != len(self.samples):
            return len(self.samples) > 1
        return len(set(self.ids)) < len(self.ids)

    def as_dict(self) -> dict[str, Any]:
        return {"score": self.score, "spread": self.spread if self.spread_known else None, "n": len(self.samples),
                "min": min(self.samples) if self.samples else None,
                "max": max(self.samples) if self.samples else None,
                "samples": [round(s, 4) for s in self.samples], "ids": self.ids, "alike": self.alike,
                "error": self.error, **self.extra}


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


# -- axes --------------------------------------------------------------------------------------

KV = "kv"
"""The axis that sets both cache types (``cache_type_k`` and ``cache_type_v``)."""

ORDERS = {
    "decode": ("speculation", "threads", KV, "cache_type_k", "cache_type_v", "ubatch", "batch"),
    "prefill": ("ubatch", "batch", "threads", KV, "cache_type_k", "cache_type_v", "speculation"),
}
ORDERS["ttft"] = ORDERS["prefill"]
ORDERS["e2e"] = ORDERS["decode"]
ORDERS["throughput"] = ORDERS["decode"]

UNSET = ("auto", "default")
"""``--set threads=auto``: leave the option out (llama.cpp's default)."""
INT_FIELDS = ("ubatch", "batch", "threads")
DEFAULT_UBATCH = (128, 256, 512, 1024, 2048)
DEFAULT_BATCH = (512, 1024, 2048, 4096)
DEFAULT_KV = ("f16", "q8_0")
DEFAULT_SPECULATION = ("none", "ngram-simple", "ngram-map-k", "ngram-mod")
LLAMA_DEFAULTS = {"ubatch": 512, "batch": 2048, "cache_type_k": "f16", "cache_type_v": "f16", KV: "f16",
                  "speculation": "none"}
"""llama-server's values for options a spec leaves out."""


@dataclass(frozen=True)
class Axis:
    name: str
    """A ServerSpec field (``ubatch``, ``threads``, ``speculation`` ...) or ``kv``."""
    values: tuple[Any, ...]

    @property
    def ordered(self) -> bool:
        """Numbers only: walked from the current value outwards (early stopping)."""
        return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)


def axis_name(name: str) -> str:
    from ._cluster import server_field

    norm = name.strip().lower().replace("-", "_")
    if norm in (KV, "cache_type", "cache", "ct"):
        return KV
    return server_field(name)


def norm_value(axis: str, value: Any) -> Any:
    """A value as the search compares it: speculation as ``a+b`` type names (``none`` for off),
    ``auto``/``default`` as None for the numeric options."""
    if axis == "speculation":
        from ..plan import parse_types

        text = "+".join(value) if isinstance(value, (list, tuple)) else str(value)
        try:
            types = parse_types(text.replace("+", ","))
        except ValueError as exc:
            raise UsageError(f"--set speculation={text}: {exc}") from None
        return "+".join(types) or "none"
    if axis in INT_FIELDS and isinstance(value, str) and value.strip().lower() in UNSET:
        return None
    return value


def server_values(point: dict[str, Any]) -> dict[str, Any]:
    """A point as ServerSpec fields (``kv`` sets both cache types)."""
    out: dict[str, Any] = {}
    for name, value in point.items():
        if name == KV:
            out["cache_type_k"] = value
            out["cache_type_v"] = value
        else:
            out[name] = value
    return out


def parse_axes(items: Sequence[str]) -> list[Axis]:
    """``["ubatch=128,512", "speculation=none,ngram-mod"]`` -> axes (values in the order given)."""
    from ._run import parse_set

    axes: list[Axis] = []
    for item in items:
        name, sep, _ = item.partition("=")
        if not sep:
            raise UsageError(f"--set {item!r}: expected NAME=V1,V2,... (e.g. ubatch=128,512)")
        combos = parse_set([item])
        raw = name.strip()
        key = axis_name(raw)
        if any(a.name == key for a in axes):
            raise UsageError(f"--set {raw}: given twice (one --set per option)")
        values: list[Any] = []
        for combo in combos:
            v = norm_value(key, combo[raw])
            if v not in values:
                values.append(v)
        axes.append(Axis(key, tuple(values)))
    return axes


def order_axes(axes: Sequence[Axis], metric: Metric) -> list[Axis]:
    """Biggest effects first (:data:`ORDERS`); other axes after, in the order given."""
    rank = {n: i for i, n in enumerate(ORDERS[metric.name])}
    return sorted(axes, key=lambda a: (rank.get(a.name, len(rank)), axes.index(a)))


def spec_value(server: Any, axis: str) -> Any:
    """The value the spec runs with on ``axis`` (llama-server's default where it leaves it out;
    None where that default is not known here, e.g. ``threads``)."""
    if axis == KV:
        k, v = server.cache_type_k or "f16", server.cache_type_v or "f16"
        return k if k == v else None
    value = getattr(server, axis, None)
    if axis == "speculation":
        return norm_value(axis, value or [])
    if value is None:
        return LLAMA_DEFAULTS.get(axis)
    return value


def default_threads(cores: tuple[int, int]) -> tuple[int, ...]:
    """Thread counts worth trying on a head with (physical, logical) cores."""
    phys, logical = max(1, cores[0]), max(1, cores[1])
    vals = {max(1, phys // 4), max(1, phys // 2), phys, logical}
    if phys <= 4:
        vals |= set(range(1, phys + 1))
    return tuple(sorted(vals))


def default_axes(server: Any, supported: Sequence[str] = (), cores: tuple[int, int] = (1, 1)) -> list[Axis]:
    """The five axes ``tune`` searches without ``--set``.

    ``supported``: speculation types the model can use (the planner's ``speculation_support``);
    the draftless n-gram types are always tried, MTP and draft-model types when supported.
    """
    spec_types = list(DEFAULT_SPECULATION)
    for t in ("draft-mtp", "draft-simple", "draft-eagle3", "draft-dflash", "draft-dspark"):
        if t in supported:
            spec_types.append(t)
    axes: list[Axis] = []
    for name, base in (("speculation", spec_types), ("threads", list(default_threads(cores))),
                       (KV, list(DEFAULT_KV)), ("ubatch", list(DEFAULT_UBATCH)), ("batch", list(DEFAULT_BATCH))):
        current = spec_value(server, name)
        values = list(base)
        if current is not None and current not in values:
            values.append(current)
        if all(isinstance(v, int) for v in values):
            values.sort()
        axes.append(Axis(name, tuple(values)))
    return axes


def start_point(server: Any, axes: Sequence[Axis],
                cores: tuple[int, int] = (1, 1)) -> tuple[dict[str, Any], list[str]]:
    """Where the search starts: the spec's own value on each axis (or, where the axis does not
    have it, its first value); notes say where it had to pick."""
    point: dict[str, Any] = {}
    notes: list[str] = []
    for a in axes:
        current = spec_value(server, a.name)
        if current is None and a.name == "threads" and a.ordered:
            # llama-server's default is about the number of physical cores
            current = min(a.values, key=lambda v: abs(v - max(1, cores[0])))
        if current in a.values:
            point[a.name] = current
        else:
            point[a.name] = a.values[0]
            notes.append(f"{a.name}: the spec's value ({current if current is not None else 'unset'}) is not "
                         f"on the axis; starting from {a.values[0]}")
    return point, notes


def grid_points(axes: Sequence[Axis]) -> list[dict[str, Any]]:
    names = [a.name for a in axes]
    return [dict(zip(names, combo)) for combo in itertools.product(*(a.values for a in axes))]


def grid_size(axes: Sequence[Axis]) -> int:
    return math.prod(len(a.values) for a in axes)


def default_budget(axes: Sequence[Axis], allowed: int | None = None, confirm: bool = True) -> int:
    """A third of the grid's runs (its ``allowed`` points, default all), but at least one full pass
    (the start, twice with ``confirm``, and every other value once)."""
    one_pass = (2 if confirm else 1) + sum(len(a.values) - 1 for a in axes)
    return max(math.ceil((grid_size(axes) if allowed is None else allowed) / 3), one_pass)


def point_label(point: dict[str, Any]) -> str:
    return ", ".join(f"{k}={'auto' if v is None else v}" for k, v in point.items())


def point_key(point: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(point.items(), key=lambda kv: kv[0]))


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
        return {"run": self.run, "point": self.point, "axis": self.axis, "verdict": self.verdict,
                "best": self.best, **self.measurement.as_dict(), "score_all_runs": self.merged}


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
            "mode": self.mode, "metric": self.metric.name, "metric_label": self.metric.label,
            "unit": self.metric.unit, "higher_is_better": self.metric.higher, "min_gain": self.min_gain,
            "axes": [{"name": a.name, "values": list(a.values), "ordered": a.ordered} for a in self.axes],
            "grid_size": self.grid_size, "runs": self.runs, "budget": self.budget, "stopped": self.stopped,
            "passes": self.passes, "start": self.start, "start_score": start.score if start else None,
            "best": self.best, "best_score": bm.score if bm else None,
            "best_spread": bm.spread if bm and bm.spread_known else None,
            "steps": [s.as_dict() for s in self.steps],
            "excluded": [{"point": p, "reason": r} for p, r in self.excluded],
            "notes": self.notes,
        }


class BudgetSpent(Exception):
    pass


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
            raise BudgetSpent
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


def coordinate_search(axes: Sequence[Axis], start: dict[str, Any], measure: Measure, metric: Metric,
                      feasible: Feasible = lambda p: None, budget: int | None = None, min_gain: float = 0.02,
                      max_passes: int = 4, on_step: OnStep | None = None, confirm: bool = True) -> SearchResult:
    """One axis at a time from ``start`` (see the module's doc); ``axes`` in the order to visit.

    ``confirm``: the start is measured twice (two restarts: how far they fall apart is the noise
    floor of every comparison), and a point that beats the incumbent is measured again and wins
    only if it still does with both runs' samples, so one lucky restart does not move the search."""
    axes = list(axes)
    book = _Book(measure, feasible, budget, on_step)
    notes: list[str] = []
    inc = dict(start)
    if book.why_not(inc):
        reason = book.ruled[point_key(inc)]
        first = next((p for p in grid_points(axes) if not book.why_not(p)), None)
        if first is None:
            return SearchResult("tune", metric, axes, start, None, None, [], book.excluded, budget, "failed",
                                min_gain=min_gain, notes=["the planner rules out every point of the grid"])
        notes.append(f"the start {point_label(inc)} is ruled out ({reason}); starting from {point_label(first)}")
        inc = first
    start = dict(inc)
    stopped = "passes"
    passes = 0
    inc_m: Measurement | None = None
    try:
        inc_m = book.get(inc)
        assert inc_m is not None
        book.record(inc, None, "start" if inc_m.ok else "failed", inc)
        if not inc_m.ok:
            why = inc_m.error or "no figures"
            return SearchResult("tune", metric, axes, start, None, None, book.steps, book.excluded, budget,
                                "failed", min_gain=min_gain,
                                notes=notes + [f"the start {point_label(inc)} failed: {why}"])
        if confirm:  # the start again: how far two restarts of one point fall apart is the noise floor
            first = inc_m.score
            book.again(inc)
            second = book.last.score if book.last is not None and book.last.ok else None
            if first is not None and second is not None:
                book.restart_noise = abs(first - second)
            book.record(inc, None, "start re-measured", inc)

        def verdict_of(m: Measurement, ref: Measurement) -> str:
            if not m.ok:
                return "failed"
            assert m.score is not None and ref.score is not None
            ahead = better_score(m.score, ref.score, metric)
            near = abs(m.score - ref.score) <= margin(m, ref, min_gain, book.noise())
            return "within noise" if ahead or near else "worse"

        def consider(point: dict[str, Any], axis: str) -> bool:
            nonlocal inc, inc_m
            key = point_key(point)
            known = key in book.memo
            m = book.get(point)
            if m is None:
                return False
            assert inc_m is not None
            won = beats(m, inc_m, metric, min_gain, book.noise())
            pending = won and confirm and book.runs_of.get(key, 0) < 2
            if not known:
                book.record(point, axis, "ahead: confirming" if pending else
                            ("new best" if won else verdict_of(m, inc_m)), point if won and not pending else inc)
            if pending:
                if book.runs_of.get(point_key(inc), 0) < 2:
                    book.again(inc)
                    book.record(inc, None, "incumbent re-measured", inc)
                book.again(point)
                won = beats(m, inc_m, metric, min_gain, book.noise())
                book.record(point, axis, "new best (confirmed)" if won else "not confirmed",
                            point if won else inc)
            if won:
                inc, inc_m = dict(point), m
            return won

        for passes in range(1, max_passes + 1):
            before = dict(inc)
            for axis in axes:
                if len(axis.values) < 2:
                    continue
                if axis.ordered:
                    idx = axis.values.index(inc[axis.name])
                    moved_up = False
                    for direction in (1, -1):
                        if direction == -1 and moved_up:
                            break  # one peak: having climbed up, down is worse
                        j = idx + direction
                        while 0 <= j < len(axis.values):
                            cand = inc | {axis.name: axis.values[j]}
                            if book.why_not(cand):
                                j += direction  # ruled out: look past it
                                continue
                            if not consider(cand, axis.name):
                                break  # early stop: a step that does not win ends this direction
                            moved_up = moved_up or direction == 1
                            j += direction
                else:
                    for value in axis.values:
                        if value != inc[axis.name]:
                            consider(inc | {axis.name: value}, axis.name)
            if inc == before:
                stopped = "converged"
                break
    except BudgetSpent:
        stopped = "budget"
    except KeyboardInterrupt:
        return SearchResult("tune", metric, axes, start, inc, inc_m, book.steps, book.excluded, budget,
                            "interrupted", passes, min_gain, notes)
    return SearchResult("tune", metric, axes, start, inc, inc_m, book.steps, book.excluded, budget, stopped,
                        passes, min_gain, notes)


def grid_search(axes: Sequence[Axis], start: dict[str, Any], measure: Measure, metric: Metric,
                feasible: Feasible = lambda p: None, budget: int | None = None,
                on_step: OnStep | None = None) -> SearchResult:
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
    except BudgetSpent:
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


# -- what the planner allows -------------------------------------------------------------------


class PlannerCheck:
    """Why a point cannot run (None: it can): an invalid setting, ``ubatch`` above ``batch``,
    a quantized V cache without flash attention, a speculation type the model cannot use, or (when
    the spec gives the nodes' memory) a plan that does not fit."""

    def __init__(self, spec: Any) -> None:
        from ..model import inspect_model
        from ..plan import draft_info, spec_nodes

        self.spec = spec
        self.notes: list[str] = []
        self.info: Any = None
        self.draft: Any = None
        try:
            self.info = inspect_model(spec.model)
            self.draft = draft_info(spec)
        except SplitserveError as exc:
            self.notes.append(f"the model's headers could not be read ({exc}): the planner rules nothing out")
        self.nodes: Any = None
        if self.info is not None:
            try:
                self.nodes = spec_nodes(spec)
            except UsageError:
                self.notes.append("the spec gives no memory sizes (memory_gib on the workers/head): the planner "
                                  "cannot say what fits, so no point is ruled out for memory")
        self._cache: dict[tuple[tuple[str, Any], ...], str | None] = {}

    def supported_types(self) -> list[str]:
        from ..plan import speculation_support

        if self.info is None:
            return []
        return [r.type for r in speculation_support(self.info, self.draft) if r.supported]

    def __call__(self, point: dict[str, Any]) -> str | None:
        key = point_key(server_values(point))
        if key not in self._cache:
            self._cache[key] = self._why(point)
        return self._cache[key]

    def _why(self, point: dict[str, Any]) -> str | None:
        from ..plan import make_plan, require_fit, spec_options, speculation_refusal
        from ._cluster import with_server

        try:
            cand = with_server(self.spec, server_values(point))
        except UsageError as exc:
            return str(exc)
        s = cand.server
        ub, b = s.ubatch or 512, s.batch or 2048
        if ub > b:
            return f"ubatch {ub} > batch {b}: llama.cpp caps ubatch at batch (the same run as ubatch = {b})"
        quantized_v = (s.cache_type_v or "f16") not in ("f16", "f32", "bf16")
        if quantized_v and s.flash_attn == "off":
            return f"cache_type_v = {s.cache_type_v} needs flash attention (server.flash_attn is off)"
        if self.info is None:
            return None
        if s.speculation:
            problem = speculation_refusal(list(s.speculation), self.info, self.draft)
            if problem:
                return f"speculation: {problem}"
        if self.nodes is not None:
            try:
                require_fit(make_plan(self.info, self.nodes, spec_options(cand)))
            except ClusterError as exc:
                return f"the planner: {exc}".split("; lower ctx_size")[0]
        return None


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

    def __init__(self, restarter: Any, opts: SpeedOptions, plan: WorkloadPlan, writer: RunWriter,
                 metric: Metric, workload: str, progress: Callable[[RequestRecord], None] | None = None,
                 on_point: Callable[[dict[str, Any]], None] | None = None, transport: Any = None) -> None:
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
        except Exception as exc:  # a point that does not start is a result, not the end
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
            async with BenchClient(target, transport=self.transport,
                                   max_connections=max(opts.concurrency) + 2) as client:
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
        return Measurement(samples=samples, extra=extra, ids=[i for i, _ in keyed],
                           alike=exchangeable(self.workload, self.metric))


def run_tune(restarter: Any, spec: Any, axes: Sequence[Axis], start: dict[str, Any], opts: SpeedOptions,
             topts: TuneOptions, feasible: Feasible, out: Path | None = None, label: str = "",
             plan: WorkloadPlan | None = None, engine: dict[str, Any] | None = None,
             progress: Callable[[RequestRecord], None] | None = None,
             on_point: Callable[[dict[str, Any]], None] | None = None, on_step: OnStep | None = None,
             transport: Any = None, notes: Sequence[str] = ()) -> tuple[BenchRun, Path, SearchResult]:
    """Search (or, with ``topts.grid``, measure the whole grid), writing the run file as it goes;
    the cluster is brought back as it was (``restarter.finish()``) however it ends."""
    from ._run import plan_for, summarize_run

    metric = metric_for(topts.metric)
    plan = plan or plan_for(opts)
    path = tune_out_path(out)
    mode = "grid" if topts.grid else "tune"
    run = BenchRun(kind="sweep", id=_run_id(path), label=label or f"{mode} {spec.name} ({topts.workload}, "
                   f"{metric.name})", machine=machine_info(),
                   settings=opts.as_dict() | {"workload_items": plan.describe(), "tune": topts.as_dict() | {
                       "mode": mode, "spec_file": str(spec.source_file) if spec.source_file else None,
                       "axes": [{"name": a.name, "values": list(a.values)} for a in axes], "start": start}})
    run.engine = engine or {}
    run.notes.extend(notes)
    writer = RunWriter(run, path)
    runner = PointRunner(restarter, opts, plan, writer, metric, topts.workload, progress, on_point, transport)
    result: SearchResult | None = None
    interrupted = False
    try:
        if topts.grid:
            result = grid_search(axes, start, runner, metric, feasible, topts.budget, on_step)
        else:
            result = coordinate_search(axes, start, runner, metric, feasible, topts.budget, topts.min_gain,
                                       topts.max_passes, on_step, topts.confirm)
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


# -- the best spec ----------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML value for a Python one (strings as basic strings, lists inline, dicts as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dump_toml(data: dict[str, Any]) -> str:
    """A whole document: plain keys first, then tables (``[a]``, ``[a.b]``) and arrays of tables."""
    lines: list[str] = []

    def emit(table: dict[str, Any], prefix: str) -> None:
        plain = {k: v for k, v in table.items() if not _is_table(v) and not _is_aot(v)}
        for k, v in plain.items():
            lines.append(f"{_key(k)} = {toml_value(v)}")
        for k, v in table.items():
            name = f"{prefix}{_key(k)}"
            if _is_table(v):
                lines.extend(["", f"[{name}]"])
                emit(v, name + ".")
            elif _is_aot(v):
                for item in v:
                    lines.extend(["", f"[[{name}]]"])
                    emit(item, name + ".")

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


_HEADER = re.compile(r"^\s*\[(\[?)\s*([^\]\[]+?)\s*\]\]?\s*(#.*)?$")


def _sections(lines: list[str]) -> list[tuple[str | None, int, int]]:
    """(table name or None for the top, first line after the header, end) per section; arrays
    of tables are named ``[[name]]``."""
    out: list[tuple[str | None, int, int]] = []
    name: str | None = None
    begin = 0
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m:
            out.append((name, begin, i))
            name = (f"[[{m.group(2)}]]" if m.group(1) else m.group(2)).replace(" ", "")
            begin = i + 1
    out.append((name, begin, len(lines)))
    return out


def _value_extent(lines: list[str], i: int) -> tuple[int, str]:
    """The lines ``key = value`` at ``i`` spans (a multi-line array) and its trailing comment."""
    for j in range(i, min(len(lines), i + 200)):
        chunk = "\n".join(lines[i:j + 1])
        try:
            tomllib.loads(chunk)
        except tomllib.TOMLDecodeError:
            continue
        comment = ""
        last = lines[j]
        for pos in [p for p, c in enumerate(last) if c == "#"]:
            try:
                tomllib.loads("\n".join(lines[i:j] + [last[:pos]]))
            except tomllib.TOMLDecodeError:
                continue
            comment = last[pos:]
            break
        return j + 1, comment
    return i + 1, ""


def set_key(lines: list[str], table: str | None, key: str, value: str | None, note: str = "") -> list[str]:
    """``lines`` with ``key`` of ``table`` set to the TOML text ``value`` (None: commented out),
    the key's own comment kept; a missing key goes after the table's last key, a missing table at
    the end."""
    lines = list(lines)
    key_re = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for name, begin, end in _sections(lines):
        if name != table:
            continue
        for i in range(begin, end):
            if key_re.match(lines[i]):
                stop, comment = _value_extent(lines, i)
                if value is None:
                    lines[i:stop] = [f"# {ln}" for ln in lines[i:stop]]
                    lines[i] += f"  # {note}" if note else ""
                else:
                    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                    lines[i:stop] = [f"{indent}{key} = {value}" + (f"  {comment}" if comment else "")]
                return lines
        if value is None:
            return lines
        last = begin - 1
        for i in range(begin, end):
            if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                last = i
        if last >= begin:
            last = _value_extent(lines, last)[0] - 1 if "=" in lines[last] else last
        lines.insert(last + 1, f"{key} = {value}" + (f"  # {note}" if note else ""))
        return lines
    if value is None:
        return lines
    if table is None:
        return [f"{key} = {value}"] + lines
    while lines and not lines[-1].strip():
        lines.pop()
    return lines + ["", f"[{table}]", f"{key} = {value}" + (f"  # {note}" if note else "")]


PATH_KEYS: tuple[tuple[str | None, str], ...] = (
    (None, "model"), (None, "state_dir"), ("server", "chat_template_file"), ("server", "draft_model"),
    ("gateway", "chat_template_file"), ("gateway", "keys_file"), ("ssh", "config"))
"""Keys whose relative paths resolve against the spec's folder."""


def spec_changes(server: Any, best: dict[str, Any]) -> dict[str, Any]:
    """The [server] keys to write: the best point's values where they differ from what the spec
    runs with (``kv`` as both cache types; None: take the key out, llama.cpp's default).  An option
    whose llama.cpp default is not known here (``threads``) is written whenever the spec leaves it out."""
    changes: dict[str, Any] = {}
    for axis, value in best.items():
        if axis == KV:
            for k in ("cache_type_k", "cache_type_v"):
                if (getattr(server, k) or "f16") != value:
                    changes[k] = value
        elif axis == "speculation":
            if spec_value(server, axis) != value:
                changes[axis] = value.split("+") if "+" in str(value) else value
        elif value is None:
            if getattr(server, axis, None) is not None:
                changes[axis] = None
        else:
            current = getattr(server, axis, None)
            effective = current if current is not None else LLAMA_DEFAULTS.get(axis)
            if effective != value:
                changes[axis] = value
    return changes


def tuned_spec_text(text: str, changes: dict[str, Any], header: Sequence[str] = (),
                    spec_dir: Path | None = None, out_dir: Path | None = None) -> str:
    """The user's spec ``text`` with ``changes`` in [server], its other keys and comments kept.

    Relative paths are made absolute when the file moves to another folder.  If the text cannot
    be edited in place (an inline ``server = {...}`` table, ...), the document is written anew
    from its data (comments lost)."""
    data = tomllib.loads(text)
    expected = json.loads(json.dumps(data))
    lines = text.splitlines()
    moved = spec_dir is not None and out_dir is not None and spec_dir.resolve() != out_dir.resolve()
    for table, key in PATH_KEYS if moved else ():
        holder = data if table is None else data.get(table)
        if not isinstance(holder, dict) or not isinstance(holder.get(key), str):
            continue
        raw = holder[key]
        if raw.startswith(("/", "~")):
            continue
        absolute = str((spec_dir / raw).resolve())  # type: ignore[operator]
        lines = set_key(lines, table, key, toml_value(absolute))
        (expected if table is None else expected[table])[key] = absolute
    server = expected.setdefault("server", {})
    for key, value in changes.items():
        if value is None:
            old = server.pop(key, None)
            lines = set_key(lines, "server", key, None, f"splitserve tune: llama.cpp's default won over {old}")
        else:
            server[key] = value
            lines = set_key(lines, "server", key, toml_value(value), "splitserve tune")
    body = "\n".join(lines) + "\n"
    try:
        ok = tomllib.loads(body) == expected
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        body = dump_toml(expected)
    return "".join(f"# {h}\n" for h in header) + body


def write_best_spec(spec: Any, result: SearchResult, path: Path, run_path: Path | None = None,
                    workload: str = "chat") -> tuple[Path, dict[str, Any]]:
    """The user's spec with the best point's [server] values, next to the run; returns the file
    and the keys changed.  The file is checked to load as a valid spec."""
    from ..cluster import load_spec

    assert result.best is not None and spec.source_file is not None
    src = Path(spec.source_file)
    changes = spec_changes(spec.server, result.best)
    bm, sm = result.best_measurement, result.start_measurement()
    m = result.metric
    head = [f"tuned by `splitserve tune` ({result.mode}, workload {workload}, metric {m.label}) from {src}"]
    if bm is not None and bm.score is not None:
        vs = f" vs {sm.score:,.2f} at the start" if sm is not None and sm.score is not None else ""
        head.append(f"best {point_label(result.best)}: {bm.score:,.2f} {m.unit}{vs}; "
                    f"{result.runs} run(s), grid of {result.grid_size} points")
    head.append("changed in [server]: " + (", ".join(f"{k} = {toml_value(v) if v is not None else '(default)'}"
                                                      for k, v in changes.items()) or "nothing (the spec's "
                                                      "own settings were best)"))
    if run_path is not None:
        head.append(f"every point: {run_path}")
    text = tuned_spec_text(src.read_text(), changes, head, src.parent, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    load_spec(path)  # a SpecError here is a bug of the writer, said in one line
    return path, changes


# -- comparison with a grid ------------------------------------------------------------------


def scores_of_run(run: BenchRun, metric: Metric,
                  workload: str) -> dict[tuple[tuple[str, Any], ...], Measurement]:
    """Every measured point of a run (a tune, a grid or a ``bench sweep`` run), keyed by its server
    fields (``ub=128`` and ``ubatch=128`` are one point)."""
    from ._cluster import server_field

    out: dict[tuple[tuple[str, Any], ...], Measurement] = {}
    for p in run.points:
        values: dict[str, Any] = {}
        for k, v in p.values.items():
            try:
                f = server_field(k)
            except UsageError:
                f = k
            values[f] = norm_value(f, v)
        keyed = keyed_samples(p.records, metric, workload)
        m = Measurement(error=p.error) if p.error else Measurement(
            [v for _, v in keyed], ids=[i for i, _ in keyed], alike=exchangeable(workload, metric))
        key = point_key(values)
        if key in out:  # a point run twice (tune's confirmation runs)
            out[key].merge(m)
        else:
            out[key] = m
    return out


def compare(tune: BenchRun, grid: BenchRun) -> dict[str, Any]:
    """Tune's runs against the grid's and the gap between their best points (in the grid's own
    measurements of both, and in each run's own)."""
    t = tune.summary.get("tune") or {}
    g = grid.summary.get("tune") or {}
    metric = metric_for(t.get("metric", "decode"))
    workload = (tune.settings.get("tune") or {}).get("workload", "chat")
    gscores = scores_of_run(grid, metric, workload)
    ranked = sorted(((k, m) for k, m in gscores.items() if m.ok), key=lambda km: km[1].score or 0.0,
                    reverse=metric.higher)
    if not ranked or not t.get("best"):
        return {"error": "no measured point to compare"}
    gbest_key, gbest = ranked[0]
    tkey = point_key(server_values(t["best"]))
    in_grid = gscores.get(tkey)
    rank = next((i + 1 for i, (k, _m) in enumerate(ranked) if k == tkey), None)
    gap = None
    if in_grid is not None and in_grid.ok:
        gap = (gbest.score or 0.0) - (in_grid.score or 0.0)
        if not metric.higher:
            gap = -gap
    start_in_grid = gscores.get(point_key(server_values(t.get("start") or {})))
    named = {point_key(server_values(s["point"])): s["point"] for s in g.get("steps", [])}
    known = gbest.spread_known and in_grid is not None and in_grid.spread_known

    def spread(m: Measurement | None) -> float | None:
        return m.spread if m is not None and m.spread_known else None

    return {
        "metric": metric.name, "unit": metric.unit,
        "tune_runs": t.get("runs", len(tune.points)), "grid_runs": g.get("runs", len(grid.points)),
        "grid_size": g.get("grid_size") or t.get("grid_size"),
        "tune_best": t["best"], "tune_best_score": t.get("best_score"),
        "grid_best": named.get(gbest_key, dict(gbest_key)), "grid_best_score": gbest.score, "grid_best_spread": spread(gbest),
        "tune_best_in_grid": in_grid.score if in_grid is not None else None,
        "tune_best_in_grid_spread": spread(in_grid),
        "start_in_grid": start_in_grid.score if start_in_grid is not None else None,
        "gap": gap, "gap_fraction": gap / gbest.score if gap is not None and gbest.score else None,
        "rank_in_grid": rank, "grid_points_measured": len(ranked),
        "same_point": tkey == gbest_key,
        "within_noise": (gap <= max(gbest.spread, in_grid.spread)) if known and gap is not None
        and in_grid is not None else None,
        "grid_run": grid.id,
    }


# -- report ----------------------------------------------------------------------------------


def _fmt(v: Any, digits: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}f}"
    return str(v)


def tune_markdown(run: BenchRun, comparison: dict[str, Any] | None = None, plots: Sequence[Path] = (),
                  best_spec: Path | None = None) -> str:
    from ._report import pct, run_section, table

    t = run.summary.get("tune") or {}
    if not t:
        return "_no tune summary in this run_\n"
    unit = t["unit"]
    axes = [a["name"] for a in t["axes"]]
    opts = run.settings
    tset = opts.get("tune") or {}
    mode = t["mode"]
    parts = [f"# Tune report: {run.name}\n"]
    how = ("every allowed point of the grid (`--grid`)" if mode == "grid" else
           "coordinate search: one axis at a time from the spec's settings, biggest effects first; an ordered "
           "axis walks while each step wins; passes until one changes nothing")
    parts.append(
        f"- workload **{tset.get('workload', 'chat')}**, metric **{t['metric_label']}** "
        f"({'higher' if t['higher_is_better'] else 'lower'} is better); {opts.get('repeat')} request(s) per "
        f"point, " + (f"prompt tokens {opts.get('prompt_tokens')}, gen tokens {opts.get('gen_tokens')}"
                      if tset.get("workload", "chat") == "chat" else
                      f"output cap {opts.get('max_tokens') or 'the workload default'} tokens")
        + f", concurrency {opts.get('concurrency')}\n- search: {how}\n"
        + (f"- noise rule: a point wins only when better by more than the larger spread (max - min over its "
           f"requests) of the two, the noise floor and the search's typical spread, and by at least "
           f"{t['min_gain']:.0%}"
           + ("; the start is measured on two restarts (their difference is the noise floor) and a point "
              "that wins is restarted and measured again and must still win with every run's samples"
              if tset.get("confirm", True) else "") + "\n" if mode == "tune" else "")
        + "- axes: " + "; ".join(f"{a['name']} = {', '.join('auto' if v is None else str(v) for v in a['values'])}"
                                 for a in t["axes"]) + "\n")
    start, best = t.get("start") or {}, t.get("best")
    lines = []
    if best:
        spread = f" (spread {_fmt(t['best_spread'])})" if t.get("best_spread") is not None else ""
        lines.append(f"- best: **{point_label(best)}**: **{_fmt(t.get('best_score'))} {unit}**{spread}")
    if t.get("start_score") is not None:
        ratio = ""
        if t.get("best_score") and t["start_score"]:
            r = t["best_score"] / t["start_score"] if t["higher_is_better"] else t["start_score"] / t["best_score"]
            ratio = f"; the best is {r:.2f}× the start"
        lines.append(f"- start (the spec's settings): {point_label(start)}: {_fmt(t['start_score'])} "
                     f"{unit}{ratio}")
    budget = f" (budget {t['budget']})" if t.get("budget") else ""
    lines.append(f"- runs: **{t['runs']}**, grid of {t['grid_size']} points{budget}; "
                 f"{len(t['excluded'])} point(s) ruled out before measuring; stopped: {t['stopped']}"
                 + (f" after {t['passes']} pass(es)" if mode == "tune" else ""))
    if best_spec is not None:
        lines.append(f"- best spec: `{best_spec}`")
    for n in t.get("notes") or []:
        lines.append(f"- note: {n}")
    parts.append("## Result\n\n" + "\n".join(lines) + "\n")
    if comparison and "error" not in comparison:
        c = comparison
        frac = c["tune_runs"] / c["grid_runs"] if c.get("grid_runs") else None
        if c["same_point"]:
            same = "the same point"
        elif c["within_noise"] is None:
            same = ("no noise estimate: the grid ran each point once and this workload's requests are "
                    "different items")
        else:
            same = ("within the grid's spread of those two points" if c["within_noise"]
                    else "more than the grid's spread of those two points")
        parts.append(
            f"## Against the full grid ({c['grid_run']})\n\n" + table(
                ["", "runs", "best point", f"best {unit} (own run)", f"{unit} in the grid"],
                [["tune", c["tune_runs"], point_label(c["tune_best"]), _fmt(c["tune_best_score"]),
                  _fmt(c["tune_best_in_grid"])],
                 ["grid", c["grid_runs"], point_label(c["grid_best"]), _fmt(c["grid_best_score"]),
                  _fmt(c["grid_best_score"])]])
            + f"\n\ntune used {c['tune_runs']} of the grid's {c['grid_runs']} runs"
            + (f" ({frac:.0%})" if frac is not None else "")
            + f"; its pick ranks #{_fmt(c['rank_in_grid'])} of {c['grid_points_measured']} in the grid, "
            f"gap {_fmt(c['gap'])} {unit}"
            + (f" ({c['gap_fraction']:.1%})" if c.get("gap_fraction") is not None else "")
            + f": {same}."
            + (f" The tune's start scored {_fmt(c['start_in_grid'])} {unit} in the grid."
               if c.get("start_in_grid") is not None else "") + "\n")
    rows = []
    for s in t["steps"]:
        p = s["point"]
        rows.append([s["run"], s["axis"] or "–"] + ["auto" if p.get(a) is None else p.get(a) for a in axes]
                    + [_fmt(s["score"]) + (f" (all runs {_fmt(s['score_all_runs'])})"
                                           if s.get("score_all_runs") is not None else ""),
                       f"{_fmt(s['min'])}–{_fmt(s['max'])}", _fmt(s["spread"]), s["n"],
                       pct(s.get("acceptance")), pct(s.get("agreement")),
                       s["verdict"] + (f": {s['error']}" if s.get("error") else "")])
    parts.append("## Every point measured\n\n" + table(
        ["run", "varied", *axes, f"{t['metric']} {unit}", "min–max", "spread", "n", "acceptance", "agreement",
         "verdict"],
        rows) + "\n")
    if t["excluded"]:
        shown = t["excluded"][:60]
        parts.append("## Ruled out before measuring\n\n" + table(
            ["point", "why"], [[point_label(e["point"]), e["reason"]] for e in shown])
            + (f"\n\n… and {len(t['excluded']) - len(shown)} more (all in the run file)"
               if len(t["excluded"]) > 60 else "") + "\n")
    for p in plots:
        parts.append(f"![{p.stem}]({p.name})\n")
    parts.append(run_section(run))
    return "\n".join(parts)


def plot_tune(run: BenchRun, path: Path, grid: BenchRun | None = None) -> Path | None:
    """Left: the metric per run in the order measured (bars: min-max), the incumbent as a step line,
    the grid's best as a dashed line.  Right (with a grid, or for a grid run): every grid point by
    score, the points tune measured and its pick marked."""
    from ._plots import _plt, _save

    t = run.summary.get("tune") or {}
    steps = [s for s in t.get("steps", []) if s.get("score") is not None]
    if not steps:
        return None
    metric = metric_for(t["metric"])
    workload = (run.settings.get("tune") or {}).get("workload", "chat")
    grid_run = run if t["mode"] == "grid" else grid
    plt = _plt()
    panels = 2 if grid_run is not None else 1
    fig, axs = plt.subplots(1, panels, figsize=(6.5 * panels, 4.6), squeeze=False)
    ax = axs[0][0]
    colors = {"start": "tab:blue", "start re-measured": "tab:blue", "incumbent re-measured": "tab:cyan",
              "ahead: confirming": "yellowgreen",
              "new best (confirmed)": "tab:green", "new best": "tab:green", "not confirmed": "tab:olive",
              "within noise": "tab:orange", "worse": "tab:red", "grid": "tab:gray", "failed": "black"}
    for verdict, color in colors.items():
        ss = [s for s in steps if s["verdict"] == verdict]
        if not ss:
            continue
        xs = [s["run"] for s in ss]
        ys = [s["score"] for s in ss]
        err = [[s["score"] - s["min"] for s in ss], [s["max"] - s["score"] for s in ss]]
        ax.errorbar(xs, ys, yerr=err, fmt="o", color=color, capsize=3, label=verdict)
    by_run = {s["run"]: s for s in t["steps"]}
    inc_x, inc_y = [], []
    pooled: dict[str, list[float]] = {}  # every run of a point so far
    for r in sorted(by_run):
        pooled.setdefault(json.dumps(by_run[r]["point"], sort_keys=True), []).extend(by_run[r]["samples"])
        y = median(pooled.get(json.dumps(by_run[r]["best"], sort_keys=True), []))
        if y is not None:
            inc_x.append(r)
            inc_y.append(y)
    if len(steps) <= 30:
        for s in steps:
            if s["axis"]:
                v = s["point"].get(s["axis"])
                text = f"{_SHORT.get(s['axis'], s['axis'])}={'auto' if v is None else v}"
                ax.annotate(text, (s["run"], s["score"]), textcoords="offset points", xytext=(4, 4), fontsize=6)
    if t["mode"] == "tune" and inc_x:
        ax.step(inc_x, inc_y, where="post", color="tab:green", alpha=0.6, label="tune's best so far")
    comp = compare(run, grid) if grid is not None else None
    if comp and "error" not in comp:
        ax.axhline(comp["grid_best_score"], ls="--", color="tab:purple",
                   label=f"grid best {comp['grid_best_score']:.1f} ({comp['grid_runs']} runs)")
    ax.set(title=f"{t['mode']}: {metric.label} per run ({workload})", xlabel="run (one restart each)",
           ylabel=_ylabel(metric))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    if grid_run is not None:
        ax2 = axs[0][1]
        gscores = scores_of_run(grid_run, metric, workload)
        ranked = sorted(((k, m) for k, m in gscores.items() if m.ok), key=lambda km: km[1].score or 0.0,
                        reverse=metric.higher)
        tune_keys = {point_key(server_values(s["point"])) for s in t["steps"]} if t["mode"] == "tune" else set()
        pick = point_key(server_values(t["best"])) if t.get("best") else None
        xs = list(range(1, len(ranked) + 1))
        cols = ["tab:green" if k == pick else ("tab:orange" if k in tune_keys else "lightgray") for k, _ in ranked]
        ax2.bar(xs, [m.score for _, m in ranked], color=cols,
                yerr=[[(m.score or 0) - min(m.samples) for _, m in ranked],
                      [max(m.samples) - (m.score or 0) for _, m in ranked]], capsize=2, ecolor="gray")
        if len(ranked) <= 24:
            ax2.set_xticks(xs, [_short(dict(k)) for k, _ in ranked], rotation=70, ha="right", fontsize=6)
        title = "every grid point, best first"
        if pick is not None:
            title += ("\n(green: tune's pick; orange: other points tune measured)" if t["mode"] == "tune"
                      else "\n(green: the best)")
        ax2.set(title=title, xlabel="grid point (rank)", ylabel=_ylabel(metric))
        ax2.grid(alpha=0.3, axis="y")
    return _save(plt, fig, path)


def _ylabel(metric: Metric) -> str:
    return metric.label if metric.unit in metric.label else f"{metric.label} ({metric.unit})"


_SHORT = {"kv": "kv", "speculation": "spec", "threads": "t", "ubatch": "ub", "batch": "b", "cache_type_k": "ctk",
          "cache_type_v": "ctv"}


def _short(values: dict[str, Any]) -> str:
    if values.get("cache_type_k") is not None and values.get("cache_type_k") == values.get("cache_type_v"):
        values = {("kv" if k == "cache_type_k" else k): v for k, v in values.items() if k != "cache_type_v"}
    return " ".join(f"{_SHORT.get(k, k)}={'auto' if v is None else v}" for k, v in values.items())


def write_tune_report(run: BenchRun, folder: Path, grid: BenchRun | None = None,
                      best_spec: Path | None = None) -> tuple[Path, list[Path]]:
    """``report.md`` and ``tune.png`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    comparison = compare(run, grid) if grid is not None else None
    png = plot_tune(run, folder / "tune.png", grid)
    plots = [png] if png else []
    md = folder / "report.md"
    md.write_text(tune_markdown(run, comparison, plots, best_spec))
    return md, plots
