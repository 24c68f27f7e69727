"""``splitserve tune``'s report: a run's measured points (:func:`scores_of_run`), the comparison of a
tune with a full grid (:func:`compare`), the Markdown report, the PNG plot and
:func:`write_tune_report` (``report.md`` and ``tune.png``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ._markdown import fmt, pct, table
from ._records import BenchRun
from ._stats import median
from ._tune_metrics import Measurement, Metric, exchangeable, keyed_samples, metric_for
from ._tune_space import norm_value, point_key, point_label, server_values

# -- comparison with a grid ------------------------------------------------------------------


def scores_of_run(run: BenchRun, metric: Metric, workload: str) -> dict[tuple[tuple[str, Any], ...], Measurement]:
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
        m = (
            Measurement(error=p.error)
            if p.error
            else Measurement([v for _, v in keyed], ids=[i for i, _ in keyed], alike=exchangeable(workload, metric))
        )
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
    ranked = sorted(
        ((k, m) for k, m in gscores.items() if m.ok), key=lambda km: km[1].score or 0.0, reverse=metric.higher
    )
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
        "metric": metric.name,
        "unit": metric.unit,
        "tune_runs": t.get("runs", len(tune.points)),
        "grid_runs": g.get("runs", len(grid.points)),
        "grid_size": g.get("grid_size") or t.get("grid_size"),
        "tune_best": t["best"],
        "tune_best_score": t.get("best_score"),
        "grid_best": named.get(gbest_key, dict(gbest_key)),
        "grid_best_score": gbest.score,
        "grid_best_spread": spread(gbest),
        "tune_best_in_grid": in_grid.score if in_grid is not None else None,
        "tune_best_in_grid_spread": spread(in_grid),
        "start_in_grid": start_in_grid.score if start_in_grid is not None else None,
        "gap": gap,
        "gap_fraction": gap / gbest.score if gap is not None and gbest.score else None,
        "rank_in_grid": rank,
        "grid_points_measured": len(ranked),
        "same_point": tkey == gbest_key,
        "within_noise": (gap <= max(gbest.spread, in_grid.spread))
        if known and gap is not None and in_grid is not None
        else None,
        "grid_run": grid.id,
    }


# -- report ----------------------------------------------------------------------------------


def _fmt(v: Any) -> str:
    """The report's number format (:func:`._markdown.fmt`) at two decimals."""

    return fmt(v, 2)


def tune_markdown(
    run: BenchRun, comparison: dict[str, Any] | None = None, plots: Sequence[Path] = (), best_spec: Path | None = None
) -> str:
    """The tune report: how it searched, its result, the comparison with a grid (when given), every
    point measured, the points ruled out, the plots and the run's settings."""
    from ._report import run_section

    t = run.summary.get("tune") or {}
    if not t:
        return "_no tune summary in this run_\n"
    parts = [f"# Tune report: {run.name}\n", _how_section(run, t), _result_section(t, best_spec)]
    if comparison and "error" not in comparison:
        parts.append(_grid_section(comparison, t["unit"]))
    parts.append(_steps_section(t))
    if t["excluded"]:
        parts.append(_excluded_section(t["excluded"]))
    for p in plots:
        parts.append(f"![{p.stem}]({p.name})\n")
    parts.append(run_section(run))
    return "\n".join(parts)


def _how_section(run: BenchRun, t: dict[str, Any]) -> str:
    """The workload, the metric, the load per point, the search, the noise rule and the axes."""
    opts = run.settings
    tset = opts.get("tune") or {}
    mode = t["mode"]
    how = (
        "every allowed point of the grid (`--grid`)"
        if mode == "grid"
        else "coordinate search: one axis at a time from the spec's settings, biggest effects first; an ordered "
        "axis walks while each step wins; passes until one changes nothing"
    )
    return (
        f"- workload **{tset.get('workload', 'chat')}**, metric **{t['metric_label']}** "
        f"({'higher' if t['higher_is_better'] else 'lower'} is better); {opts.get('repeat')} request(s) per "
        f"point, "
        + (
            f"prompt tokens {opts.get('prompt_tokens')}, gen tokens {opts.get('gen_tokens')}"
            if tset.get("workload", "chat") == "chat"
            else f"output cap {opts.get('max_tokens') or 'the workload default'} tokens"
        )
        + f", concurrency {opts.get('concurrency')}\n- search: {how}\n"
        + (
            f"- noise rule: a point wins only when better by more than the larger spread (max - min over its "
            f"requests) of the two, the noise floor and the search's typical spread, and by at least "
            f"{t['min_gain']:.0%}"
            + (
                "; the start is measured on two restarts (their difference is the noise floor) and a point "
                "that wins is restarted and measured again and must still win with every run's samples"
                if tset.get("confirm", True)
                else ""
            )
            + "\n"
            if mode == "tune"
            else ""
        )
        + "- axes: "
        + "; ".join(
            f"{a['name']} = {', '.join('auto' if v is None else str(v) for v in a['values'])}" for a in t["axes"]
        )
        + "\n"
    )


def _result_section(t: dict[str, Any], best_spec: Path | None) -> str:
    """``## Result``: the best point, the start, the runs and why the search stopped."""
    unit = t["unit"]
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
        lines.append(f"- start (the spec's settings): {point_label(start)}: {_fmt(t['start_score'])} {unit}{ratio}")
    budget = f" (budget {t['budget']})" if t.get("budget") else ""
    lines.append(
        f"- runs: **{t['runs']}**, grid of {t['grid_size']} points{budget}; "
        f"{len(t['excluded'])} point(s) ruled out before measuring; stopped: {t['stopped']}"
        + (f" after {t['passes']} pass(es)" if t["mode"] == "tune" else "")
    )
    if best_spec is not None:
        lines.append(f"- best spec: `{best_spec}`")
    for n in t.get("notes") or []:
        lines.append(f"- note: {n}")
    return "## Result\n\n" + "\n".join(lines) + "\n"


def _grid_section(c: dict[str, Any], unit: str) -> str:
    """``## Against the full grid``: :func:`compare`'s figures as a table and a sentence."""
    frac = c["tune_runs"] / c["grid_runs"] if c.get("grid_runs") else None
    if c["same_point"]:
        same = "the same point"
    elif c["within_noise"] is None:
        same = "no noise estimate: the grid ran each point once and this workload's requests are different items"
    else:
        same = (
            "within the grid's spread of those two points"
            if c["within_noise"]
            else "more than the grid's spread of those two points"
        )
    rows = [
        ["tune", c["tune_runs"], point_label(c["tune_best"]), _fmt(c["tune_best_score"]), _fmt(c["tune_best_in_grid"])],
        ["grid", c["grid_runs"], point_label(c["grid_best"]), _fmt(c["grid_best_score"]), _fmt(c["grid_best_score"])],
    ]
    return (
        f"## Against the full grid ({c['grid_run']})\n\n"
        + table(["", "runs", "best point", f"best {unit} (own run)", f"{unit} in the grid"], rows)
        + f"\n\ntune used {c['tune_runs']} of the grid's {c['grid_runs']} runs"
        + (f" ({frac:.0%})" if frac is not None else "")
        + f"; its pick ranks #{_fmt(c['rank_in_grid'])} of {c['grid_points_measured']} in the grid, "
        f"gap {_fmt(c['gap'])} {unit}"
        + (f" ({c['gap_fraction']:.1%})" if c.get("gap_fraction") is not None else "")
        + f": {same}."
        + (
            f" The tune's start scored {_fmt(c['start_in_grid'])} {unit} in the grid."
            if c.get("start_in_grid") is not None
            else ""
        )
        + "\n"
    )


def _steps_section(t: dict[str, Any]) -> str:
    """``## Every point measured``: a row a run, in the order measured."""
    axes = [a["name"] for a in t["axes"]]
    rows = []
    for s in t["steps"]:
        p = s["point"]
        rows.append(
            [s["run"], s["axis"] or "–"]
            + ["auto" if p.get(a) is None else p.get(a) for a in axes]
            + [
                _fmt(s["score"])
                + (f" (all runs {_fmt(s['score_all_runs'])})" if s.get("score_all_runs") is not None else ""),
                f"{_fmt(s['min'])}–{_fmt(s['max'])}",
                _fmt(s["spread"]),
                s["n"],
                pct(s.get("acceptance")),
                pct(s.get("agreement")),
                s["verdict"] + (f": {s['error']}" if s.get("error") else ""),
            ]
        )
    head = ["run", "varied", *axes, f"{t['metric']} {t['unit']}", "min–max", "spread", "n"]
    return "## Every point measured\n\n" + table([*head, "acceptance", "agreement", "verdict"], rows) + "\n"


def _excluded_section(excluded: list[dict[str, Any]], most: int = 60) -> str:
    """``## Ruled out before measuring``: the first ``most`` points and why."""
    shown = excluded[:most]
    return (
        "## Ruled out before measuring\n\n"
        + table(["point", "why"], [[point_label(e["point"]), e["reason"]] for e in shown])
        + (f"\n\n… and {len(excluded) - len(shown)} more (all in the run file)" if len(excluded) > most else "")
        + "\n"
    )


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
    _plot_runs(axs[0][0], run, t, steps, grid, metric, workload)
    if grid_run is not None:
        _plot_grid(axs[0][1], t, grid_run, metric, workload)
    return _save(plt, fig, path)


_VERDICT_COLORS = {
    "start": "tab:blue",
    "start re-measured": "tab:blue",
    "incumbent re-measured": "tab:cyan",
    "ahead: confirming": "yellowgreen",
    "new best (confirmed)": "tab:green",
    "new best": "tab:green",
    "not confirmed": "tab:olive",
    "within noise": "tab:orange",
    "worse": "tab:red",
    "grid": "tab:gray",
    "failed": "black",
}


def _plot_runs(
    ax: Any,
    run: BenchRun,
    t: dict[str, Any],
    steps: list[dict[str, Any]],
    grid: BenchRun | None,
    metric: Metric,
    workload: str,
) -> None:
    """The left panel: each run's score by verdict, the incumbent's step line and the grid's best."""
    for verdict, color in _VERDICT_COLORS.items():
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
        ax.axhline(
            comp["grid_best_score"],
            ls="--",
            color="tab:purple",
            label=f"grid best {comp['grid_best_score']:.1f} ({comp['grid_runs']} runs)",
        )
    ax.set(
        title=f"{t['mode']}: {metric.label} per run ({workload})",
        xlabel="run (one restart each)",
        ylabel=_ylabel(metric),
    )
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _plot_grid(ax2: Any, t: dict[str, Any], grid_run: BenchRun, metric: Metric, workload: str) -> None:
    """The right panel: every grid point by score, tune's pick and the other points it measured marked."""
    gscores = scores_of_run(grid_run, metric, workload)
    ranked = sorted(
        ((k, m) for k, m in gscores.items() if m.ok), key=lambda km: km[1].score or 0.0, reverse=metric.higher
    )
    tune_keys = {point_key(server_values(s["point"])) for s in t["steps"]} if t["mode"] == "tune" else set()
    pick = point_key(server_values(t["best"])) if t.get("best") else None
    xs = list(range(1, len(ranked) + 1))
    cols = ["tab:green" if k == pick else ("tab:orange" if k in tune_keys else "lightgray") for k, _ in ranked]
    ax2.bar(
        xs,
        [m.score for _, m in ranked],
        color=cols,
        yerr=[
            [(m.score or 0) - min(m.samples) for _, m in ranked],
            [max(m.samples) - (m.score or 0) for _, m in ranked],
        ],
        capsize=2,
        ecolor="gray",
    )
    if len(ranked) <= 24:
        ax2.set_xticks(xs, [_short(dict(k)) for k, _ in ranked], rotation=70, ha="right", fontsize=6)
    title = "every grid point, best first"
    if pick is not None:
        title += (
            "\n(green: tune's pick; orange: other points tune measured)"
            if t["mode"] == "tune"
            else "\n(green: the best)"
        )
    ax2.set(title=title, xlabel="grid point (rank)", ylabel=_ylabel(metric))
    ax2.grid(alpha=0.3, axis="y")


def _ylabel(metric: Metric) -> str:
    return metric.label if metric.unit in metric.label else f"{metric.label} ({metric.unit})"


_SHORT = {
    "kv": "kv",
    "speculation": "spec",
    "threads": "t",
    "ubatch": "ub",
    "batch": "b",
    "cache_type_k": "ctk",
    "cache_type_v": "ctv",
}


def _short(values: dict[str, Any]) -> str:
    if values.get("cache_type_k") is not None and values.get("cache_type_k") == values.get("cache_type_v"):
        values = {("kv" if k == "cache_type_k" else k): v for k, v in values.items() if k != "cache_type_v"}
    return " ".join(f"{_SHORT.get(k, k)}={'auto' if v is None else v}" for k, v in values.items())


def write_tune_report(
    run: BenchRun, folder: Path, grid: BenchRun | None = None, best_spec: Path | None = None
) -> tuple[Path, list[Path]]:
    """``report.md`` and ``tune.png`` in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    comparison = compare(run, grid) if grid is not None else None
    png = plot_tune(run, folder / "tune.png", grid)
    plots = [png] if png else []
    md = folder / "report.md"
    md.write_text(tune_markdown(run, comparison, plots, best_spec))
    return md, plots
