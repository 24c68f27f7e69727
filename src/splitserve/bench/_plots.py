"""PNG plots of runs with matplotlib (Agg backend, no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

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


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close a figure; returns its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_throughput(runs: Sequence[BenchRun], path: Path) -> Path | None:
    """Aggregate throughput and per-request decode speed vs concurrency, a line per prompt size (and run)."""
    series = []
    for run in runs:
        rows = speed_rows(run.records)
        for prompt in sorted({r["prompt_target"] for r in rows}):
            pts = sorted((r["concurrency"], r["throughput_tps"], r["decode_tps_server"] or r["decode_tps_client"])
                         for r in rows if r["prompt_target"] == prompt)
            label = f"{run.name} · {prompt} tok" if len(runs) > 1 else f"prompt {prompt} tok"
            series.append((label, pts))
    if not series:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, pts in series:
        xs = [p[0] for p in pts]
        ax1.plot(xs, [p[1] for p in pts], marker="o", label=label)
        ax2.plot(xs, [p[2] for p in pts], marker="o", label=label)
    ax1.set(title="Aggregate throughput", xlabel="concurrent requests", ylabel="generated tokens/s")
    ax2.set(title="Per-request decode speed", xlabel="concurrent requests", ylabel="tokens/s per request")
    ticks = sorted({p[0] for _, pts in series for p in pts})
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_prefill_vs_length(runs: Sequence[BenchRun], path: Path) -> Path | None:
    series = [(run.name, prefill_by_length(run.records)) for run in runs]
    series = [(n, rows) for n, rows in series if rows]
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, rows in series:
        ax.plot([r["prompt_tokens"] or r["length"] for r in rows], [r["prefill_tps_server"] for r in rows],
                marker="o", label=name)
    ax.set(title="Prefill speed vs context length", xlabel="prompt tokens", ylabel="prefill tokens/s (server)")
    ax.set_xscale("log", base=2)
    ticks = sorted({r["prompt_tokens"] or r["length"] for _, rows in series for r in rows})
    ax.set_xticks(ticks, [f"{t / 1024:.0f}k" if t >= 1024 else f"{t:.0f}" for t in ticks])
    ax.minorticks_off()
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_retrieval_grid(run: BenchRun, path: Path) -> Path | None:
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
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.6 + 1.1 * len(depths), 1.4 + 0.55 * len(lengths)))
    ax.imshow(grid, cmap="RdYlGn", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(depths)), [str(d) for d in depths])
    ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set(xlabel="needle depth", ylabel="context length (tokens)", title=f"Needle retrieval: {run.name}")
    for i in range(len(lengths)):
        for j in range(len(depths)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=8)
    return _save(plt, fig, path)


def plot_sweep(run: BenchRun, path: Path) -> Path | None:
    rows = [r for r in sweep_rows(run) if "error" not in r]
    if not rows or not run.points:
        return None
    axis = list(run.points[0].values)[0]
    others = [k for k in run.points[0].values if k != axis]
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
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
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    return _save(plt, fig, path)


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


def _grouped_bars(ax: Any, groups: list[str], series: list[tuple[str, dict[str, tuple[float | None, str]]]],
                  hatch_first: bool = False) -> None:
    """Bars of ``series`` (label, {group: (value, note)}) side by side per group."""
    n = max(1, len(series))
    width = 0.8 / n
    for k, (label, vals) in enumerate(series):
        xs = [i - 0.4 + width * (k + 0.5) for i in range(len(groups))]
        ys = [(vals.get(g) or (None, ""))[0] or 0.0 for g in groups]
        bars = ax.bar(xs, ys, width * 0.92, label=label, hatch="//" if hatch_first and k == 0 else None,
                      edgecolor="black" if hatch_first and k == 0 else None, linewidth=0.4)
        ax.bar_label(bars, labels=[(vals.get(g) or (None, ""))[1] for g in groups], fontsize=6.5, padding=2)
    ax.set_xticks(range(len(groups)), groups)
    ax.grid(alpha=0.3, axis="y")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.22)
    ax.legend(fontsize=7, loc="upper left")


def plot_workloads(runs: Sequence[BenchRun], path: Path) -> Path | None:
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

    series = [(name, {group(r): (r["decode_tps_server"] or r["decode_tps_client"], note(r, k)) for r in rows})
              for k, (name, rows) in enumerate(per_run)]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 + 1.5 * len(groups) * max(1, len(series)) ** 0.5), 4.4))
    _grouped_bars(ax, groups, series)
    ax.set(title="Decode speed per workload", xlabel="workload", ylabel="decode tokens/s (server)")
    return _save(plt, fig, path)


def plot_agent_turns(series: Sequence[tuple[str, list[Any]]], path: Path) -> Path | None:
    """Cached fraction of the prompt and time to first token per agent turn, a line per series
    (run, or sweep point) and concurrency."""
    lines = []
    for name, records in series:
        rows = agent_turn_rows(records)
        for conc in sorted({r["concurrency"] for r in rows}):
            pts = [r for r in rows if r["concurrency"] == conc]
            label = name if len({r["concurrency"] for r in rows}) == 1 else f"{name} · c{conc}"
            lines.append((label, pts))
    if not lines:
        return None
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for label, pts in lines:
        turns = [p["turn"] for p in pts]
        ax1.plot(turns, [p["cached_fraction"] if p["cached_fraction"] is not None else float("nan") for p in pts],
                 marker="o", label=label)
        ax2.plot(turns, [p["ttft_ms_p50"] if p["ttft_ms_p50"] is not None else float("nan")
                         for p in pts], marker="o", label=label)
        for p in pts:
            if p["cached_fraction"] is not None:
                ax1.annotate(f"{p['cached_tokens']:.0f}/{p['prompt_tokens']:.0f}", (p["turn"], p["cached_fraction"]),
                             textcoords="offset points", xytext=(0, 7 if p["cached_fraction"] < 0.2 else -12),
                             ha="center", fontsize=6.5)
    ax1.set(title="Prompt served from the cache, per agent turn", xlabel="turn",
            ylabel="cached tokens / prompt tokens")
    ax1.set_ylim(-0.05, 1.05)
    ax2.set(title="Time to first token per agent turn", xlabel="turn", ylabel="ms (p50)")
    ax2.set_ylim(bottom=0)
    ticks = sorted({p["turn"] for _, pts in lines for p in pts})
    for ax in (ax1, ax2):
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, path)


def plot_sweep_workloads(run: BenchRun, path: Path) -> Path | None:
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
    series = [(p, {group(r): (r["decode_tps_server"], _bar_note(r, r["speedup"])) for r in rows if point(r) == p})
              for p in points]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(6.5, 1.5 + 0.75 * len(groups) * len(points)), 4.6))
    _grouped_bars(ax, groups, series, hatch_first=any(r["baseline"] for r in rows))
    ax.set(title=f"Decode speed per workload: {run.name}", xlabel="workload", ylabel="decode tokens/s (server)")
    return _save(plt, fig, path)


def write_plots(runs: Sequence[BenchRun], out_dir: Path) -> list[Path]:
    """Every plot the runs support, as PNG files in ``out_dir``."""
    made: list[Path | None] = []
    speed = [r for r in runs if r.kind == "speed"]
    context = [r for r in runs if r.kind == "context"]
    if speed:
        if any(speed_rows(r.records) for r in speed):
            made.append(plot_throughput(speed, out_dir / "throughput-vs-concurrency.png"))
        made.append(plot_workloads(speed, out_dir / "decode-per-workload.png"))
        made.append(plot_agent_turns([(r.name, r.records) for r in speed], out_dir / "agent-cached-per-turn.png"))
    if context:
        made.append(plot_prefill_vs_length(context, out_dir / "prefill-vs-length.png"))
        for r in context:
            made.append(plot_retrieval_grid(r, out_dir / f"retrieval-{_slug(r.name)}.png"))
    for r in runs:
        if r.kind == "sweep":
            made.append(plot_sweep(r, out_dir / f"sweep-{_slug(r.name)}.png"))
            made.append(plot_sweep_workloads(r, out_dir / f"sweep-workloads-{_slug(r.name)}.png"))
            made.append(plot_agent_turns([(", ".join(f"{k}={v}" for k, v in p.values.items()), p.records)
                                          for p in r.points if not p.error],
                                         out_dir / f"sweep-agent-{_slug(r.name)}.png"))
    return [p for p in made if p is not None]
