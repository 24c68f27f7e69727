"""PNG plots of runs with matplotlib (Agg backend, no display needed).

Every figure is built by a ``*_figure`` function (returns the matplotlib Figure, or ``None``
when the runs hold nothing to draw) and written by its ``plot_*`` function.  Each carries a
caption naming the runs, model, machine and engine it shows, and leaves headroom above its
highest point; a single concurrency level is drawn as labelled bars, not a lone dot.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from ._describe import caption
from ._records import BenchRun
from ._tables import (
    agent_turn_rows,
    context_rows,
    prefill_by_length,
    speed_rows,
    sweep_rows,
    sweep_workload_rows,
    workload_rows,
)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)[:60]


def _figure(runs: Sequence[BenchRun], ncols: int, figsize: tuple[float, float]) -> tuple[Any, Any]:
    """A figure of ``ncols`` axes, laid out by matplotlib's constrained layout, captioned with
    what the runs are (wrapped to the figure's width)."""
    fig, axes = _plt().subplots(1, ncols, figsize=figsize, layout="constrained")
    chars = max(40, int(figsize[0] * 15))
    text = "\n".join(textwrap.fill(line, chars, subsequent_indent="  ") for line in caption(runs).splitlines())
    fig.suptitle(text, fontsize=8, color="0.25")
    return fig, axes


def _headroom(ax: Any, values: Iterable[float | None], factor: float = 1.18) -> None:
    """Y from 0 to ``factor`` × the highest value, so no point or label sits on the frame."""
    top = max((v for v in values if v is not None and math.isfinite(v)), default=0.0)
    if top > 0:
        ax.set_ylim(0, top * factor)
    else:
        ax.set_ylim(bottom=0)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out (tight), write (110 dpi) and close a figure made without a layout; returns its path
    (for figures outside this module, e.g. the tune plot)."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _write(fig: Any, path: Path | None) -> Path | None:
    """Write (110 dpi) and close a figure; returns its path (``None`` for no figure)."""
    if fig is None or path is None:
        return None
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


def _speed_series(runs: Sequence[BenchRun]) -> list[tuple[str, list[tuple[Any, Any, Any]]]]:
    """(label, [(concurrency, throughput, decode)]) per prompt size (and run)."""
    series = []
    for run in runs:
        rows = speed_rows(run.records)
        for prompt in sorted({r["prompt_target"] for r in rows}):
            pts = sorted(
                (r["concurrency"], r["throughput_tps"], r["decode_tps_server"] or r["decode_tps_client"])
                for r in rows
                if r["prompt_target"] == prompt
            )
            label = f"{run.name} · {prompt} tok" if len(runs) > 1 else f"prompt {prompt} tok"
            series.append((label, pts))
    return series


def throughput_figure(runs: Sequence[BenchRun]) -> Any:
    """Aggregate throughput and per-request decode speed vs concurrency, a line per prompt size
    (and run); with one concurrency level, a labelled bar per prompt size (and run)."""
    series = _speed_series(runs)
    if not series:
        return None
    levels = sorted({p[0] for _, pts in series for p in pts})
    fig, (ax1, ax2) = _figure(runs, 2, (11, 4.6))
    if len(levels) == 1:
        _level_bars(ax1, ax2, series)
        at = f" at concurrency {levels[0]}"
        ax1.set(title="Aggregate throughput" + at, xlabel="prompt size", ylabel="generated tokens/s")
        ax2.set(title="Per-request decode speed" + at, xlabel="prompt size", ylabel="tokens/s per request")
        return fig
    for label, pts in series:
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker="o", label=label)
        ax2.plot(xs, [p[2] for p in pts], marker="o", label=label)
    ax1.set(title="Aggregate throughput", xlabel="concurrent requests", ylabel="generated tokens/s")
    ax2.set(title="Per-request decode speed", xlabel="concurrent requests", ylabel="tokens/s per request")
    for ax, k in ((ax1, 1), (ax2, 2)):
        ax.grid(alpha=0.3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(levels, [str(t) for t in levels])
        ax.minorticks_off()
        _headroom(ax, (p[k] for _, pts in series for p in pts))
        ax.legend(fontsize=8)
    return fig


def _level_bars(ax1: Any, ax2: Any, series: list[tuple[str, list[tuple[Any, Any, Any]]]]) -> None:
    """One concurrency level: a bar per series (prompt size, and run), its value over it."""
    groups = [label for label, _ in series]
    for ax, k in ((ax1, 1), (ax2, 2)):
        values = {label: (pts[0][k], fmt_value(pts[0][k])) for label, pts in series}
        _grouped_bars(ax, groups, [("", values)], legend=False)


def fmt_value(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}" if v < 1000 else f"{v:,.0f}"


def plot_throughput(runs: Sequence[BenchRun], path: Path) -> Path | None:
    return _write(throughput_figure(runs), path)


def prefill_figure(runs: Sequence[BenchRun]) -> Any:
    """Prefill speed vs context length, a line per run (values written on a lone point)."""
    series = [(run.name, prefill_by_length(run.records)) for run in runs]
    series = [(n, rows) for n, rows in series if rows]
    if not series:
        return None
    fig, ax = _figure(runs, 1, (6.5, 4.6))
    ticks = sorted({r["prompt_tokens"] or r["length"] for _, rows in series for r in rows})
    for name, rows in series:
        xs, ys = [r["prompt_tokens"] or r["length"] for r in rows], [r["prefill_tps_server"] for r in rows]
        ax.plot(xs, ys, marker="o", label=name)
        if len(ticks) == 1:
            for x, y in zip(xs, ys):
                ax.annotate(fmt_value(y), (x, y), textcoords="offset points", xytext=(0, 7), ha="center", fontsize=8)
    ax.set(title="Prefill speed vs context length", xlabel="prompt tokens", ylabel="prefill tokens/s (server)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [f"{t / 1024:.0f}k" if t >= 1024 else f"{t:.0f}" for t in ticks])
    ax.minorticks_off()
    _headroom(ax, (r["prefill_tps_server"] for _, rows in series for r in rows))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_prefill_vs_length(runs: Sequence[BenchRun], path: Path) -> Path | None:
    return _write(prefill_figure(runs), path)


def retrieval_figure(run: BenchRun) -> Any:
    """The needle grid: a cell per (length, depth), green found, red missed."""
    cells = [c for c in context_rows(run.records) if c["depth"] is not None]
    if not cells:
        return None
    lengths = sorted({c["length"] for c in cells})
    depths = sorted({c["depth"] for c in cells}, key=lambda d: (isinstance(d, str), d))
    score = {"found": 1.0, "miss": 0.0, "skipped": float("nan")}
    grid = [[float("nan")] * len(depths) for _ in lengths]
    text = [[""] * len(depths) for _ in lengths]
    for c in cells:
        i, j = lengths.index(c["length"]), depths.index(c["depth"])
        v = c["verdict"]
        if v in score:
            grid[i][j] = score[v]
        elif "/" in v:
            found, total = v.split()[0].split("/")
            grid[i][j] = int(found) / int(total)
        text[i][j] = {"found": "found", "miss": "miss", "skipped": "skip"}.get(v, v)
    fig, ax = _figure([run], 1, (max(5.5, 1.6 + 1.1 * len(depths)), 2.0 + 0.55 * len(lengths)))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(depths)), [str(d) for d in depths])
    ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set(xlabel="needle depth", ylabel="context length (tokens)", title="Needle retrieval")
    for i in range(len(lengths)):
        for j in range(len(depths)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=8)
    return fig


def plot_retrieval_grid(run: BenchRun, path: Path) -> Path | None:
    return _write(retrieval_figure(run), path)


def sweep_figure(run: BenchRun) -> Any:
    """Prefill and decode speed per value of the sweep's first setting, a line per cell."""
    rows = [r for r in sweep_rows(run) if "error" not in r]
    if not rows or not run.points:
        return None
    axis = next(iter(run.points[0].values))
    others = [k for k in run.points[0].values if k != axis]
    fig, (ax1, ax2) = _figure([run], 2, (11, 4.6))
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for r in rows:
        key = tuple(r["values"].get(k) for k in others) + (r["prompt_target"], r["concurrency"])
        groups.setdefault(key, []).append(r)
    for key, rs in groups.items():
        rs.sort(key=lambda r: r["values"][axis] if isinstance(r["values"][axis], (int, float)) else 0)
        xs = [str(r["values"][axis]) for r in rs]
        label = ", ".join([f"{k}={v}" for k, v in zip(others, key)] + [f"prompt {key[-2]}", f"conc {key[-1]}"])
        ax1.plot(xs, [r["prefill_tps_server"] for r in rs], marker="o", label=label)
        ax2.plot(xs, [r["decode_tps_server"] for r in rs], marker="o", label=label)
    ax1.set(title=f"Prefill vs {axis}", xlabel=axis, ylabel="prefill tokens/s (server)")
    ax2.set(title=f"Decode vs {axis}", xlabel=axis, ylabel="decode tokens/s (server)")
    for ax, field in ((ax1, "prefill_tps_server"), (ax2, "decode_tps_server")):
        ax.grid(alpha=0.3)
        _headroom(ax, (r[field] for r in rows))
        ax.legend(fontsize=7)
    return fig


def plot_sweep(run: BenchRun, path: Path) -> Path | None:
    return _write(sweep_figure(run), path)


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{v:.0%}"


def _bar_note(row: dict[str, Any], speedup: float | None = None) -> str:
    """The text over a bar: speedup, acceptance, agreement (what is known)."""
    parts = []
    if speedup:
        parts.append(f"{speedup:.2f}×")
    if row.get("acceptance") is not None:
        parts.append(f"acc {_pct(row['acceptance'])}")
    if row.get("agreement") is not None:
        parts.append(f"agr {_pct(row['agreement'])}")
    return "\n".join(parts)


def _grouped_bars(
    ax: Any,
    groups: list[str],
    series: list[tuple[str, dict[str, tuple[float | None, str]]]],
    hatch_first: bool = False,
    legend: bool = True,
) -> None:
    """Bars of ``series`` (label, {group: (value, note)}) side by side per group."""
    n = max(1, len(series))
    width = 0.8 / n
    for k, (label, vals) in enumerate(series):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(groups))]
        ys = [(vals.get(g) or (None, ""))[0] or 0.0 for g in groups]
        bars = ax.bar(
            xs,
            ys,
            width * 0.92,
            label=label,
            hatch="//" if hatch_first and k == 0 else None,
            edgecolor="black" if hatch_first and k == 0 else None,
            linewidth=0.4,
        )
        ax.bar_label(bars, labels=[(vals.get(g) or (None, ""))[1] for g in groups], fontsize=7.5, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.grid(alpha=0.3, axis="y")
    _headroom(ax, ((vals.get(g) or (None, ""))[0] for _, vals in series for g in groups), 1.25)
    if legend:
        ax.legend(fontsize=7, loc="upper left")


def workloads_figure(runs: Sequence[BenchRun]) -> Any:
    """Decode t/s per workload, a bar per run, with acceptance and agreement over each bar."""
    per_run = [(run.name, workload_rows(run.records)) for run in runs]
    per_run = [(n, rows) for n, rows in per_run if rows]
    if not per_run:
        return None
    concs = {r["concurrency"] for _, rows in per_run for r in rows}

    def group(r: dict[str, Any]) -> str:
        return r["workload"] if len(concs) == 1 else f"{r['workload']} · c{r['concurrency']}"

    groups = list(dict.fromkeys(group(r) for _, rows in per_run for r in rows))
    first = {group(r): r["decode_tps_server"] or r["decode_tps_client"] for r in per_run[0][1]}

    def note(r: dict[str, Any], k: int) -> str:  # later runs: the ratio to the first run's bar too
        base, value = first.get(group(r)), r["decode_tps_server"] or r["decode_tps_client"]
        return _bar_note(r, value / base if k and base and value else None)

    series = [
        (name, {group(r): (r["decode_tps_server"] or r["decode_tps_client"], note(r, k)) for r in rows})
        for k, (name, rows) in enumerate(per_run)
    ]
    fig, ax = _figure(runs, 1, (max(6.0, 1.2 + 1.5 * len(groups) * max(1, len(series)) ** 0.5), 4.8))
    _grouped_bars(ax, groups, series)
    ax.set(title="Decode speed per workload", xlabel="workload", ylabel="decode tokens/s (server)")
    return fig


def plot_workloads(runs: Sequence[BenchRun], path: Path) -> Path | None:
    return _write(workloads_figure(runs), path)


def agent_turns_figure(series: Sequence[tuple[str, list[Any]]], runs: Sequence[BenchRun]) -> Any:
    """Cached fraction of the prompt and time to first token per agent turn, a line per series
    (run, or sweep point) and concurrency; ``runs`` name the caption."""
    lines = []
    for name, records in series:
        rows = agent_turn_rows(records)
        for conc in sorted({r["concurrency"] for r in rows}):
            pts = [r for r in rows if r["concurrency"] == conc]
            label = name if len({r["concurrency"] for r in rows}) == 1 else f"{name} · c{conc}"
            lines.append((label, pts))
    if not lines:
        return None
    fig, (ax1, ax2) = _figure(runs, 2, (11, 4.6))
    for label, pts in lines:
        turns = [p["turn"] for p in pts]
        ax1.plot(
            turns,
            [p["cached_fraction"] if p["cached_fraction"] is not None else float("nan") for p in pts],
            marker="o",
            label=label,
        )
        ax2.plot(
            turns,
            [p["ttft_ms_p50"] if p["ttft_ms_p50"] is not None else float("nan") for p in pts],
            marker="o",
            label=label,
        )
        for p in pts:
            if p["cached_fraction"] is not None:
                ax1.annotate(
                    f"{p['cached_tokens']:.0f}/{p['prompt_tokens']:.0f}",
                    (p["turn"], p["cached_fraction"]),
                    textcoords="offset points",
                    xytext=(0, 7 if p["cached_fraction"] < 0.2 else -12),
                    ha="center",
                    fontsize=6.5,
                )
    ax1.set(title="Prompt served from the cache, per agent turn", xlabel="turn", ylabel="cached tokens / prompt tokens")
    ax1.set_ylim(-0.05, 1.05)
    ax2.set(title="Time to first token per agent turn", xlabel="turn", ylabel="ms (p50)")
    _headroom(ax2, (p["ttft_ms_p50"] for _, pts in lines for p in pts))
    ticks = sorted({p["turn"] for _, pts in lines for p in pts})
    for ax in (ax1, ax2):
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return fig


def plot_agent_turns(series: Sequence[tuple[str, list[Any]]], path: Path, runs: Sequence[BenchRun] = ()) -> Path | None:
    return _write(agent_turns_figure(series, runs), path)


def sweep_workloads_figure(run: BenchRun) -> Any:
    """Decode t/s per workload, a bar per sweep point (the speculation baseline hatched), with the
    speedup over the baseline, the acceptance and the agreement over each bar."""
    rows = sweep_workload_rows(run)
    if not rows:
        return None
    concs = {r["concurrency"] for r in rows}

    def group(r: dict[str, Any]) -> str:
        return r["workload"] if len(concs) == 1 else f"{r['workload']} · c{r['concurrency']}"

    def point(r: dict[str, Any]) -> str:
        return ", ".join(f"{k}={v}" for k, v in r["values"].items())

    groups = list(dict.fromkeys(group(r) for r in rows))
    points = list(dict.fromkeys(point(r) for r in rows))
    series = [
        (p, {group(r): (r["decode_tps_server"], _bar_note(r, r["speedup"])) for r in rows if point(r) == p})
        for p in points
    ]
    fig, ax = _figure([run], 1, (max(6.5, 1.5 + 0.75 * len(groups) * len(points)), 5.0))
    _grouped_bars(ax, groups, series, hatch_first=any(r["baseline"] for r in rows))
    ax.set(title="Decode speed per workload and setting", xlabel="workload", ylabel="decode tokens/s (server)")
    return fig


def plot_sweep_workloads(run: BenchRun, path: Path) -> Path | None:
    return _write(sweep_workloads_figure(run), path)


def write_plots(runs: Sequence[BenchRun], out_dir: Path) -> list[Path]:
    """Every plot the runs support, as PNG files in ``out_dir``."""
    made: list[Path | None] = []
    speed = [r for r in runs if r.kind == "speed"]
    context = [r for r in runs if r.kind == "context"]
    if speed:
        if any(speed_rows(r.records) for r in speed):
            made.append(plot_throughput(speed, out_dir / "throughput-vs-concurrency.png"))
        made.append(plot_workloads(speed, out_dir / "decode-per-workload.png"))
        made.append(
            plot_agent_turns([(r.name, r.records) for r in speed], out_dir / "agent-cached-per-turn.png", speed)
        )
    if context:
        made.append(plot_prefill_vs_length(context, out_dir / "prefill-vs-length.png"))
        for r in context:
            made.append(plot_retrieval_grid(r, out_dir / f"retrieval-{_slug(r.name)}.png"))
    for r in runs:
        if r.kind == "sweep":
            made.append(plot_sweep(r, out_dir / f"sweep-{_slug(r.name)}.png"))
            made.append(plot_sweep_workloads(r, out_dir / f"sweep-workloads-{_slug(r.name)}.png"))
            made.append(
                plot_agent_turns(
                    [(", ".join(f"{k}={v}" for k, v in p.values.items()), p.records) for p in r.points if not p.error],
                    out_dir / f"sweep-agent-{_slug(r.name)}.png",
                    [r],
                )
            )
    return [p for p in made if p is not None]
