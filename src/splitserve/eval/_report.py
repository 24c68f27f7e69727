"""``eval report`` / ``eval compare``: Markdown, JSON and PNG plots from run files.

One run: pass rates per tier and category with intervals clustered by scenario, failure
causes, timeouts and errors apart, timings. Two runs: B against A paired by scenario id
(see :func:`._stats.paired_compare` for the test and the significance rule).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ._plots import plot_causes, plot_compare, plot_flips, plot_tiers
from ._records import read_records, run_file
from ._stats import (
    Comparison,
    Flip,
    PassRate,
    compare_summaries,
    planning_mde,
    scenarios_needed,
    summarize,
    tier_sorted,
)

EVIDENCE_CHARS = 160


def fmt(value: Any, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}{unit}"
    return f"{value}{unit}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(out)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    if seconds < 60:
        return f"{seconds:.1f} s"
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m {s:02d}s" if h else f"{m}m {s:02d}s"


def _short(text: str | None) -> str:
    if not text:
        return "–"
    return text if len(text) <= EVIDENCE_CHARS else text[: EVIDENCE_CHARS - 1] + "…"


def _pct(rate: PassRate) -> str:
    return fmt(None if rate.estimate is None else 100 * rate.estimate)


def _ci(rate: PassRate) -> str:
    if rate.low is None or rate.high is None:
        return "–"
    return f"{100 * rate.low:.1f}–{100 * rate.high:.1f}"


def _jsonable(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _dump(obj: Any, path: Path) -> Path:
    path.write_text(json.dumps(obj, indent=2, default=_jsonable) + "\n")
    return path


def load_summary(run: Path) -> dict[str, Any]:
    """:func:`summarize` of a run folder (or its ``run.jsonl``)."""
    path = run_file(run)
    if not path.is_file():
        raise UsageError(f"{path}: no such eval run file")
    return summarize(read_records(path))


def run_label(summary: Mapping[str, Any], run: Path) -> str:
    """The run's ``label``, else its model, else its folder's name."""
    head = summary["header"]
    return str(head.get("label") or head.get("model") or run_file(run).parent.name)


def _group_rows(groups: Mapping[str, Mapping[str, Any]]) -> list[list[Any]]:
    return [
        [name, g["scenarios"], g["rate"].n_trials, _pct(g["rate"]), _ci(g["rate"]), g["timeouts"], g["errors"]]
        for name, g in groups.items()
    ]


def _header_lines(s: Mapping[str, Any]) -> list[str]:
    h = s["header"]
    planned = len(h.get("scenarios") or []) * int(h.get("trials") or 0)
    state = "complete" if s["complete"] else f"incomplete ({s['trials']} of {planned or '?'} trials)"
    sessions = f", resumed {s['sessions'] - 1}×" if s["sessions"] > 1 else ""
    scale = h.get("time_scale")
    lines = [
        f"- suite `{h.get('suite', '–')}`, target {h.get('url', '–')}, model `{h.get('model', '–')}`",
        f"- trials per scenario {h.get('trials', '–')}, concurrency {h.get('concurrency', '–')}, "
        f"time scale {fmt(scale, 2, '×') if scale is not None else '–'}",
        f"- measured decode {fmt(s['decode_tps'], 1, ' t/s')} (at the start)",
        f"- {state}{sessions}; started {h.get('started_at', '–')}, splitserve {h.get('splitserve', '–')}",
        f"- duration {duration(s['wall_s'])} wall, {duration(s['trial_sum_s'])} summed over trials; "
        f"{fmt(s['scenarios_per_s'], 3)} scenarios/s",
        f"- generation {fmt(s['generation_tps'], 1, ' t/s')} per request (Σ completion tokens / Σ time in "
        f"chat requests), {fmt(s['throughput_tps'], 1, ' t/s')} aggregate (/ wall)",
    ]
    n = s["total"]["rate"].n_scenarios
    if n:
        lines.append(
            f"- a comparison with another run of this size can detect differences of about "
            f"{planning_mde(n, 1):.1f} pp at trials 1 and {planning_mde(n, 5):.1f} pp at trials 5 "
            f"(planning estimate, α .05, power .8); resolving 2 / 4 / 8 pp at trials 3 takes "
            f"{' / '.join(str(scenarios_needed(d, 3)) for d in (2, 4, 8))} scenarios"
        )
    return lines


def render_report(s: Mapping[str, Any], name: str, plots: Sequence[Path] = ()) -> str:
    """The Markdown of one run."""
    parts = [f"# Eval report: {name}\n", "\n".join(_header_lines(s)) + "\n"]
    note = (
        "Trials are scored pass or fail; timeouts and errors are not the model's answer and are "
        "left out of the pass rate. The 95% interval is Wilson's on the effective sample size "
        "(clustered by scenario: trials of one scenario are not independent)."
    )
    total = {"TOTAL": s["total"]}
    parts.append(
        "## Pass rate by tier\n\n"
        + note
        + "\n\n"
        + table(
            ["tier", "scenarios", "trials", "pass %", "95% CI", "timeouts", "errors"],
            _group_rows({**s["tiers"], **total}),
        )
        + "\n"
    )
    parts.append(
        "## Pass rate by category\n\n"
        + table(
            ["category", "scenarios", "trials", "pass %", "95% CI", "timeouts", "errors"],
            _group_rows({**s["categories"], **total}),
        )
        + "\n"
    )
    if s["causes"]:
        rows = [
            [
                c,
                v["trials"],
                v["scenarios"],
                _short(f"{v['example']['scenario']}#{v['example']['trial']}: {v['example']['evidence']}")
                if v["example"]
                else "–",
            ]
            for c, v in s["causes"].items()
        ]
        parts.append("## Failure causes\n\n" + table(["cause", "trials", "scenarios", "example evidence"], rows) + "\n")
    else:
        parts.append("## Failure causes\n\n_no scored trial failed_\n")
    apart = [(k, v) for k, v in s["scenarios"].items() if v["timeouts"] or v["errors"]]
    if apart:
        totals = ", ".join(f"{v['trials']} {c} trials in {v['scenarios']} scenarios" for c, v in s["apart"].items())
        parts.append(
            "## Timeouts and errors (not scored)\n\n"
            + totals
            + ".\n\n"
            + table(
                ["scenario", "tier", "timeouts", "errors", "budget s", "evidence"],
                [
                    [k, v["tier"], v["timeouts"], v["errors"], fmt(v["budget_s"]), _short(v["apart_evidence"])]
                    for k, v in apart
                ],
            )
            + "\n"
        )
    failed = sorted(
        ((k, v) for k, v in s["scenarios"].items() if v["scored"] > v["passes"]),
        key=lambda kv: kv[1]["passes"] / kv[1]["scored"],
    )  # stable: tier order within a fraction
    if failed:
        parts.append(
            f"## Failed scenarios ({len(failed)})\n\n"
            + table(
                ["scenario", "tier", "category", "passed", "causes", "evidence"],
                [
                    [
                        k,
                        v["tier"],
                        v["category"],
                        f"{v['passes']}/{v['scored']}",
                        ", ".join(f"{c} ×{n}" for c, n in v["causes"].items()),
                        _short(v["evidence"]),
                    ]
                    for k, v in failed
                ],
            )
            + "\n"
        )
    if plots:
        parts.append("## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in plots) + "\n")
    return "\n".join(parts)


def write_report(run_dir: Path, out_dir: Path) -> list[Path]:
    """``report.md``, ``summary.json`` and the PNGs (``tiers.png``, ``causes.png``) of one run."""
    s = load_summary(run_dir)
    name = run_label(s, run_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [
        p
        for p in (plot_tiers(s, name, out_dir / "tiers.png"), plot_causes(s, name, out_dir / "causes.png"))
        if p is not None
    ]
    md = out_dir / "report.md"
    md.write_text(render_report(s, name, plots))
    return [md, _dump({"label": name, **s}, out_dir / "summary.json"), *plots]


def verdict(c: Comparison, labels: tuple[str, str]) -> str:
    """One plain-language paragraph on the total comparison."""
    a, b = labels
    if c.delta_pp is None or c.ci_low_pp is None or c.ci_high_pp is None:
        return "No scenario was scored in both runs: there is nothing to compare."
    d = c.delta_pp
    head = (
        f"{b} and {a} have the same pass rate"
        if round(d, 1) == 0
        else f"{b} is {'higher' if d > 0 else 'lower'} than {a} by {abs(d):.1f} pp"
    )
    text = (
        f"{head} (95% CI {c.ci_low_pp:+.1f} to {c.ci_high_pp:+.1f} pp, paired over {c.n_scenarios} "
        f"scenarios; {c.a_pass_b_fail} went from pass to fail and {c.a_fail_b_pass} from fail to pass, "
        f"exact McNemar p {'= ' if c.p_mcnemar >= 0.001 else ''}{_p(c.p_mcnemar)}). At this size, "
        f"differences under {fmt(c.mde_pp)} pp cannot be reliably detected (α .05, power .8). "
    )
    if c.significant:
        return text + "The difference is significant: the interval excludes 0 and McNemar p < .05."
    why = [
        w
        for w, bad in (
            ("the interval includes 0", c.ci_low_pp <= 0 <= c.ci_high_pp),
            ("McNemar p ≥ .05", c.p_mcnemar >= 0.05),
        )
        if bad
    ]
    text += f"Not significant ({' and '.join(why)})"
    if c.mde_pp is not None and abs(d) < c.mde_pp:
        text += (
            "; a difference this small is below what this suite reliably detects, so this does not show "
            "that the runs are equal"
        )
    return text + "."


def _p(p: float) -> str:
    return "< 0.001" if p < 0.001 else f"{p:.3f}"


def _cmp_row(name: str, c: Comparison) -> list[Any]:
    ci = "–" if c.ci_low_pp is None else f"{c.ci_low_pp:+.1f} to {c.ci_high_pp:+.1f}"
    delta = "–" if c.delta_pp is None else f"{c.delta_pp:+.1f}"
    return [name, fmt(c.a_pct), fmt(c.b_pct), delta, ci, _p(c.p_mcnemar), fmt(c.mde_pp), c.n_scenarios]


def _flip_rows(flips: Sequence[Flip], tier_of: Mapping[str, str], failing: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    for f in tier_sorted(flips, tier_of):
        sc = failing["scenarios"].get(f.scenario, {})
        causes = ", ".join(f"{c} ×{n}" for c, n in (sc.get("causes") or {}).items()) or "–"
        rows.append(
            [
                f.scenario,
                tier_of.get(f.scenario, "–"),
                f"{f.a[0]}/{f.a[1]}",
                f"{f.b[0]}/{f.b[1]}",
                causes,
                _short(sc.get("evidence")),
            ]
        )
    return rows


def _speed_rows(sa: Mapping[str, Any], sb: Mapping[str, Any]) -> list[list[Any]]:
    def row(label: str, key: str, show: Any) -> list[Any]:
        return [label, show(sa[key]), show(sb[key])]

    heads = [
        ["trials per scenario", sa["header"].get("trials", "–"), sb["header"].get("trials", "–")],
        ["concurrency", sa["header"].get("concurrency", "–"), sb["header"].get("concurrency", "–")],
        ["time scale", fmt(sa["header"].get("time_scale"), 2), fmt(sb["header"].get("time_scale"), 2)],
    ]
    return heads + [
        row("wall duration", "wall_s", duration),
        row("summed trial duration", "trial_sum_s", duration),
        row("scenarios/s", "scenarios_per_s", lambda v: fmt(v, 3)),
        row("generation t/s (per request)", "generation_tps", fmt),
        row("generation t/s (aggregate)", "throughput_tps", fmt),
        row("measured decode t/s", "decode_tps", fmt),
    ]


def render_compare(
    sa: Mapping[str, Any],
    sb: Mapping[str, Any],
    cmp: Mapping[str, Any],
    labels: tuple[str, str],
    plots: Sequence[Path] = (),
) -> str:
    """The Markdown of a comparison of run B against run A."""
    a, b = labels
    total: Comparison = cmp["total"]
    parts = [f"# Eval comparison: A = {a}, B = {b}\n"]
    for tag, lab, s in (("A", a, sa), ("B", b, sb)):
        h = s["header"]
        parts.append(
            f"- {tag}: **{lab}**: suite `{h.get('suite', '–')}`, model `{h.get('model', '–')}`, "
            f"{h.get('url', '–')}, {s['total']['rate'].n_scenarios} scenarios scored"
        )
    parts.append("")
    parts.append(
        "Paired by scenario id over the scenarios scored in both runs. A % and B % are mean per-scenario pass "
        "fractions, so Δ = B − A in percentage points; the 95% CI is a paired bootstrap over scenarios; McNemar "
        "is exact, on per-scenario majority verdicts (a fraction of exactly 0.5 is left out); MDE is the "
        "smallest difference this many scenarios detect with power .8 at α .05. A difference is called "
        "significant only when the CI excludes 0 and McNemar p < .05. Timeouts and errors are not scored.\n"
    )
    rows = [_cmp_row(t, c) for t, c in cmp["tiers"].items()] + [_cmp_row("TOTAL", total)]
    parts.append(
        "## Pass rate, B − A\n\n"
        + table(["tier", "A %", "B %", "Δ pp", "95% CI", "McNemar p", "MDE pp", "n scenarios"], rows)
        + "\n"
    )
    if cmp["only_a"] or cmp["only_b"]:
        parts.append(
            f"Not compared (scored in one run only): {len(cmp['only_a'])} in A only, {len(cmp['only_b'])} in B only.\n"
        )
    parts.append("## Verdict\n\n" + verdict(total, labels) + "\n")
    parts.append("## Duration and speed\n\n" + table(["figure", f"A: {a}", f"B: {b}"], _speed_rows(sa, sb)) + "\n")
    cause_rows = [[c, na, nb] for c, (na, nb) in cmp["causes"].items()]
    for kind in ("timeout", "error"):
        na = sa["apart"].get(kind, {}).get("trials", 0)
        nb = sb["apart"].get(kind, {}).get("trials", 0)
        if na or nb:
            cause_rows.append([f"{kind} (not scored)", na, nb])
    causes = table(["cause", f"A: {a}", f"B: {b}"], cause_rows) if cause_rows else "_no failures_"
    parts.append(f"## Failure causes (trials)\n\n{causes}\n")
    for title, flips, who, failing in (
        ("A pass → B fail", total.flips_down, "B", sb),
        ("A fail → B pass", total.flips_up, "A", sa),
    ):
        body = (
            table(
                ["scenario", "tier", "A", "B", f"{who} causes", f"{who} evidence"],
                _flip_rows(flips, cmp["tier_of"], failing),
            )
            if flips
            else "_none_"
        )
        parts.append(f"## Flipped: {title} ({len(flips)})\n\n{body}\n")
    if plots:
        parts.append("## Plots\n\n" + "\n".join(f"![{p.stem}]({p.name})" for p in plots) + "\n")
    return "\n".join(parts)


def write_compare(run_a: Path, run_b: Path, out_dir: Path) -> list[Path]:
    """``compare.md``, ``compare.json``, ``compare.png`` and ``flips.png`` of run B against run A."""
    sa, sb = load_summary(run_a), load_summary(run_b)
    labels = run_label(sa, run_a), run_label(sb, run_b)
    if labels[0] == labels[1]:
        folders = run_file(run_a).parent.name, run_file(run_b).parent.name
        tags = folders if folders[0] != folders[1] else ("A", "B")
        labels = f"{labels[0]} ({tags[0]})", f"{labels[1]} ({tags[1]})"
    cmp = compare_summaries(sa, sb)
    out_dir.mkdir(parents=True, exist_ok=True)
    plots = [
        p
        for p in (plot_compare(cmp, labels, out_dir / "compare.png"), plot_flips(cmp, labels, out_dir / "flips.png"))
        if p is not None
    ]
    md = out_dir / "compare.md"
    md.write_text(render_compare(sa, sb, cmp, labels, plots))
    keep = (
        "header",
        "total",
        "tiers",
        "apart",
        "wall_s",
        "trial_sum_s",
        "generation_tps",
        "throughput_tps",
        "decode_tps",
        "scenarios_per_s",
    )
    data = {
        "labels": {"a": labels[0], "b": labels[1]},
        "verdict": verdict(cmp["total"], labels),
        **cmp,
        "runs": {tag: {k: s[k] for k in keep} for tag, s in (("a", sa), ("b", sb))},
    }
    return [md, _dump(data, out_dir / "compare.json"), *plots]
