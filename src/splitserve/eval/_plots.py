"""PNG plots of eval runs with matplotlib (Agg backend, no display needed)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ._stats import Comparison, Flip, tier_sorted

MAX_FLIPS = 60  # rows of flips.png; the report lists every flip


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


WIDTH = 7.0
"""Inches: the tier and cause plots share one width, so that side by side (the report, the live
page) they show at one scale."""


def _title(ax: Any, text: str, fig_width: float, fontsize: float = 11.0) -> None:
    """A title wrapped to the axes' width (a long run label otherwise runs off the image): the
    axes take the figure's width less ~1.8 in of tick labels; a character is ~0.6 em wide."""
    chars = max(30, int((fig_width - 1.8) * 72 / (fontsize * 0.6)))
    lines = [textwrap.fill(part, chars) for part in text.split("\n")]
    ax.set_title("\n".join(lines), fontsize=fontsize)


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """Lay out, write (110 dpi) and close a figure; returns its path."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_tiers(summary: Mapping[str, Any], title: str, path: Path) -> Path | None:
    """Pass rate per tier and in total, with 95% clustered Wilson intervals as error bars."""
    groups = [(t, g) for t, g in summary["tiers"].items() if g["rate"].estimate is not None]
    if not groups:
        return None
    groups.append(("TOTAL", summary["total"]))
    plt = _plt()
    width = max(WIDTH, 1.0 + 1.1 * len(groups))  # WIDTH up to 5 bars (the builtin suite: 4 tiers + TOTAL)
    fig, ax = plt.subplots(figsize=(width, 4.4))
    xs = range(len(groups))
    est = [100 * g["rate"].estimate for _, g in groups]
    # max(0, …): an interval end equal to the estimate can come out a rounding error past it
    err = [
        [max(0.0, e - 100 * g["rate"].low) for e, (_, g) in zip(est, groups)],
        [max(0.0, 100 * g["rate"].high - e) for e, (_, g) in zip(est, groups)],
    ]
    colors = ["#4c72b0"] * (len(groups) - 1) + ["#55585c"]
    ax.bar(xs, est, color=colors, width=0.6)
    ax.errorbar(xs, est, yerr=err, fmt="none", ecolor="black", capsize=5, lw=1.2)
    for x, e, (_, g) in zip(xs, est, groups):
        ax.text(x, 100 * g["rate"].high + 2, f"{e:.1f}%", ha="center", va="bottom", fontsize=9)
    labels = [f"{t}\n{g['rate'].n_scenarios} scen · {g['rate'].n_trials} tr" for t, g in groups]
    ax.set_xticks(list(xs), labels, fontsize=8)
    ax.set_ylim(0, 112)
    ax.set_yticks(range(0, 101, 20))
    ax.set(ylabel="pass rate (%)")
    _title(ax, f"Pass rate by tier: {title}\n(95% interval clustered by scenario)", width)
    ax.grid(axis="y", alpha=0.3)
    return _save(plt, fig, path)


def plot_causes(summary: Mapping[str, Any], title: str, path: Path) -> Path | None:
    """Failed trials per cause (scored failures), then timeouts and errors (not scored) in grey."""
    rows = [(c, v, "#c44e52") for c, v in summary["causes"].items()]
    rows += [(f"{c} (not scored)", v, "#8c8c8c") for c, v in summary["apart"].items()]
    if not rows:
        return None
    plt = _plt()
    # at least as tall as the tier plot is wide-ish, so the two sit side by side at one scale
    fig, ax = plt.subplots(figsize=(WIDTH, max(3.6, 1.3 + 0.38 * len(rows))))
    ys = list(range(len(rows)))[::-1]
    counts = [v["trials"] for _, v, _ in rows]
    ax.barh(ys, counts, color=[c for *_, c in rows], height=0.6)
    for y, (_, v, _) in zip(ys, rows):
        ax.text(v["trials"], y, f" {v['trials']} tr · {v['scenarios']} scen", va="center", fontsize=8)
    ax.set_yticks(ys, [name for name, *_ in rows], fontsize=9)
    ax.set_xlim(0, max(counts) * 1.3 + 0.5)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="trials")
    _title(ax, f"Failure causes: {title}", WIDTH)
    ax.grid(axis="x", alpha=0.3)
    return _save(plt, fig, path)


def plot_compare(cmp: Mapping[str, Any], labels: tuple[str, str], path: Path) -> Path | None:
    """Per-tier and total delta (B − A, pp) with its bootstrap interval, the ±MDE band and a zero line."""
    rows: list[tuple[str, Comparison]] = [(t, c) for t, c in cmp["tiers"].items() if c.delta_pp is not None]
    if cmp["total"].delta_pp is None:
        return None
    rows.append(("TOTAL", cmp["total"]))
    plt = _plt()
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig, ax = plt.subplots(figsize=(2.4 + 1.3 * len(rows), 4.6))
    for x, (_, c) in enumerate(rows):
        delta, ci_low, ci_high = c.delta_pp, c.ci_low_pp, c.ci_high_pp
        # rows hold compared tiers only, and paired_compare sets the interval with the delta
        assert delta is not None and ci_low is not None and ci_high is not None
        if c.mde_pp is not None:
            band = min(c.mde_pp, 100.0)
            ax.fill_between([x - 0.3, x + 0.3], -band, band, color="#dddddd", lw=0)
        color = ("#2a9d3a" if delta > 0 else "#c44e52") if c.significant else "#4c72b0"
        ax.errorbar(
            [x],
            [delta],
            yerr=[[max(0.0, delta - ci_low)], [max(0.0, ci_high - delta)]],
            fmt="o",
            color=color,
            ecolor=color,
            capsize=6,
            lw=1.5,
            ms=7,
        )
        ax.annotate(
            f"{delta:+.1f}",
            (x, delta),
            xytext=(9, 0),
            textcoords="offset points",
            va="center",
            fontsize=9,
            bbox={"fc": "white", "ec": "none", "pad": 1, "alpha": 0.8},
        )
    ax.axhline(0, color="black", lw=1)
    low, high = ax.get_ylim()
    ax.set_ylim(max(low, -105), min(high, 105))
    ax.set_xticks(range(len(rows)), [f"{t}\nn={c.n_scenarios}" for t, c in rows], fontsize=8)
    ax.set_xlim(-0.6, len(rows) - 0.4)
    ax.set(
        ylabel="Δ pass rate, percentage points",
        title=f"{labels[1]} − {labels[0]}\n(95% paired bootstrap over scenarios)",
    )
    ax.grid(axis="y", alpha=0.3)
    ax.legend(
        handles=[
            Patch(color="#dddddd", label="±MDE: too small to detect"),
            Line2D([], [], color="#4c72b0", marker="o", label="not significant"),
            Line2D([], [], color="#c44e52", marker="o", label="significant, lower"),
            Line2D([], [], color="#2a9d3a", marker="o", label="significant, higher"),
        ],
        fontsize=7,
        loc="center left",
        bbox_to_anchor=(1.01, 0.5),
    )
    return _save(plt, fig, path)


def plot_flips(cmp: Mapping[str, Any], labels: tuple[str, str], path: Path) -> Path | None:
    """One row per flipped scenario: its pass fraction in A and B, arrowed from A to B."""
    total: Comparison = cmp["total"]
    tier_of = cmp["tier_of"]
    flips: list[tuple[Flip, str]] = [(f, "#c44e52") for f in tier_sorted(total.flips_down, tier_of)] + [
        (f, "#2a9d3a") for f in tier_sorted(total.flips_up, tier_of)
    ]
    if not flips:
        return None
    shown = flips[:MAX_FLIPS]
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.5, 1.6 + 0.3 * len(shown)))
    ys = list(range(len(shown)))[::-1]
    for y, (f, color) in zip(ys, shown):
        fa, fb = f.a[0] / f.a[1], f.b[0] / f.b[1]
        ax.annotate("", xy=(fb, y), xytext=(fa, y), arrowprops={"arrowstyle": "->", "color": color, "lw": 1.6})
        ax.plot([fa], [y], "o", color="#55585c", ms=5)
    ax.axvline(0.5, color="black", lw=0.8, ls=":")
    names = [f"{f.scenario} ({tier_of.get(f.scenario, '?')})" for f, _ in shown]
    ax.set_yticks(ys, names, fontsize=8)
    ax.set_xlim(-0.05, 1.05)
    ax.set_ylim(-0.8, len(shown) - 0.2)
    more = f", first {len(shown)} of {len(flips)}" if len(flips) > len(shown) else ""
    ax.set(
        xlabel=f"pass fraction (dot: {labels[0]}, arrow head: {labels[1]})",
        title=f"Flipped scenarios (red: pass → fail, green: fail → pass{more})",
    )
    ax.grid(axis="x", alpha=0.3)
    return _save(plt, fig, path)
