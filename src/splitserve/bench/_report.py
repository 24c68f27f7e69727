"""``bench report``: Markdown tables (and PNG plots) for one run, or several side by side.

Given two or more runs, every figure that both measured is put next to the
first run's with the ratio ``run / first``; cells are matched by their keys
(prompt size and concurrency, context length, llama-bench test, sweep point).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._compare import comparison_section, serving_cost
from ._describe import build_text, engine_version, machine_text, model_text
from ._machine import gpu_clocks_text
from ._markdown import (
    Cell,
    Column,
    column_table,
    exact,
    fmt,
    frac,
    headline_items,
    num,
    pct,
    raw,
    table,
)
from ._records import BenchRun
from ._tables import (
    agent_turn_rows,
    context_rows,
    engine_rows,
    prefill_by_length,
    speed_rows,
    sweep_rows,
    sweep_workload_rows,
    workload_rows,
)


def _header(run: BenchRun) -> str:
    s = run.server
    e = run.engine
    m = run.machine
    gpus = ", ".join(g.get("name", "?") for g in m.get("gpus", [])) or "none"
    state = "complete" if run.complete else ("interrupted (partial)" if run.interrupted else "incomplete")
    lines = [
        f"- run: `{run.id}`" + (f" ({run.label})" if run.label else "") + f", {run.kind}, {state}",
        f"- started {run.created_at}, finished {run.finished_at or '–'}",
        f"- target: {run.target.get('url', '–')}"
        + (f", model `{run.target.get('model')}`" if run.target.get("model") else ""),
        f"- model: {model_text(run)}; machine: {machine_text(run)}",
    ]
    if s:
        lines.append(
            f"- server: n_ctx {s.get('n_ctx', '–')}, slots {s.get('total_slots', '–')}, "
            f"build {build_text(s.get('build_info')) or 'not reported'}"
        )
    if run.target.get("rpc"):
        lines.append(f"- RPC workers: {', '.join(run.target['rpc'])}")
    if e:
        lines.append(
            f"- engine: {e.get('key', 'not recorded')}"
            + (f", backend {e['backend']}" if e.get("backend") else "")
            + f", version {engine_version(run)}"
        )
    lines.append(
        f"- machine (client): {m.get('label') or m.get('hostname', '?')}, {m.get('cpu', '?')}, "
        f"{m.get('cpu_cores', '?')} cores, {m.get('memory_gib', '?')} GiB, GPUs: {gpus}"
    )
    lines.append(f"- GPU clocks at the start: {gpu_clocks_text(m)}")
    for w in (m.get("gpu_state") or {}).get("warnings") or []:
        lines.append(f"- warning: {w}")
    if run.calibration:
        c = run.calibration
        lines.append(
            f"- calibration: {c.get('tokens_per_word')} tokens/word, template overhead "
            f"{c.get('overhead_tokens')} tokens, cache allowance {c.get('cache_allowance')} tokens"
        )
    s_ = run.settings
    shown = {k: v for k, v in s_.items() if k not in ("argv",)}
    lines.append(f"- settings: `{shown}`")
    for note in run.notes:
        lines.append(f"- note: {note}")
    return "\n".join(lines)


_SPEED: list[Column] = [
    ("prompt", raw("prompt_target")),
    ("conc", raw("concurrency")),
    ("n", raw("n")),
    ("cache hits", raw("cache_hits")),
    ("errors", raw("errors")),
    ("prompt tok", num("prompt_tokens", 0)),
    ("gen tok", num("completion_tokens", 0)),
    ("prefill t/s (server)", num("prefill_tps_server")),
    ("prefill t/s (client)", num("prefill_tps_client")),
    ("decode t/s (server)", num("decode_tps_server")),
    ("decode t/s (client)", num("decode_tps_client")),
    ("TTF chunk ms", num("ttf_chunk_ms_p50")),
    ("TTF token ms", num("ttf_token_ms_p50")),
    ("TTF content ms", num("ttf_content_ms_p50")),
    ("TTF reasoning ms", num("ttf_reasoning_ms_p50")),
    ("ITL p50 ms", num("itl_ms_p50", 2)),
    ("ITL p90 ms", num("itl_ms_p90", 2)),
    ("ITL p99 ms", num("itl_ms_p99", 2)),
    ("E2E p50 ms", num("e2e_ms_p50", 0)),
    ("throughput t/s", num("throughput_tps")),
]


def speed_section(records: list[Any], decode_bound: float | None = None) -> str:
    rows = speed_rows(records)
    workloads = workload_section(records)
    if not rows:
        return workloads or "_no speed records_"
    out = column_table(_SPEED, rows)
    if decode_bound:
        ones = [r for r in rows if r["concurrency"] == 1 and r["decode_tps_server"]]
        if ones:
            best = max(r["decode_tps_server"] for r in ones)
            out += (
                f"\n\nDecode upper bound (bandwidth / bytes per token): {decode_bound:,.1f} t/s; "
                f"best single-stream decode {best:,.1f} t/s = {best / decode_bound:.0%} of the bound."
            )
    return out + ("\n\n" + workloads if workloads else "")


WORKLOAD_NOTE = (
    "decode t/s: the server's `timings` (median per request); drafted / accepted: speculative decoding's "
    "tokens (`timings.draft_n`, `draft_n_accepted`; – when the server reports none); agreement: longest "
    "common prefix with the reference output (same prompt, no speculation) over the reference's length, "
    "mean over requests (– without a reference); exact: outputs equal to the reference; faithful: similarity "
    "(difflib ratio) of the answer's code block and the correct answer (the file, the edited file, the changed "
    "JSON), 100% = exactly right."
)


_WORKLOAD: list[Column] = [
    ("workload", raw("workload")),
    ("conc", raw("concurrency")),
    ("items", num("items")),
    ("n", raw("n")),
    ("errors", raw("errors")),
    ("prompt tok", num("prompt_tokens", 0)),
    ("gen tok", num("completion_tokens", 0)),
    ("cached", frac("cached_fraction")),
    ("TTF token ms", num("ttf_token_ms_p50", 0)),
    ("decode t/s (server)", num("decode_tps_server")),
    ("decode t/s (client)", num("decode_tps_client")),
    ("drafted", num("draft_n")),
    ("accepted", num("draft_accepted")),
    ("acceptance", frac("acceptance")),
    ("agreement", frac("agreement")),
    ("exact", exact),
    ("faithful", frac("fidelity")),
]

AGENT_TURNS_NOTE = (
    "Each turn sends the recorded history up to that turn's assistant message; cached: prompt "
    "tokens the server served from its prompt cache (`cached_tokens` / `timings.cache_n`); TTFT: the "
    "first generated token (for a turn that generated none, the end of the response); medians over "
    "the replays."
)


def workload_section(records: list[Any]) -> str:
    rows = workload_rows(records)
    if not rows:
        return ""
    out = "### Workloads\n\n" + column_table(_WORKLOAD, rows) + "\n\n" + WORKLOAD_NOTE
    turns = agent_turn_rows(records)
    if turns:
        out += "\n\n### Agent turns\n\n" + agent_turns_table(turns) + "\n\n" + AGENT_TURNS_NOTE
    return out


_AGENT_TURNS: list[Column] = [
    ("conc", raw("concurrency")),
    ("turn", raw("turn")),
    ("n", raw("n")),
    ("prompt tok", num("prompt_tokens", 0)),
    ("cached tok", num("cached_tokens", 0)),
    ("cached", frac("cached_fraction")),
    ("new tok", num("new_tokens", 0)),
    ("TTFT ms", num("ttft_ms_p50", 0)),
    ("prefill ms (server)", num("prompt_ms_server_p50", 0)),
    ("prefill t/s (server)", num("prefill_tps_server")),
    ("gen tok", num("completion_tokens", 0)),
    ("decode t/s (server)", num("decode_tps_server")),
    ("acceptance", frac("acceptance")),
    ("agreement", frac("agreement")),
]


def agent_turns_table(turns: list[dict[str, Any]]) -> str:
    return column_table(_AGENT_TURNS, turns)


_SWEEP_WORKLOAD: list[Column] = [
    ("workload", raw("workload")),
    ("conc", raw("concurrency")),
    ("n", raw("n")),
    ("errors", raw("errors")),
    ("decode t/s (server)", num("decode_tps_server")),
    ("baseline t/s", lambda r: "baseline" if r["baseline"] else fmt(r["baseline_decode_tps_server"])),
    ("speedup", lambda r: f"{r['speedup']:.2f}×" if r["speedup"] else "–"),
    ("drafted", num("draft_n")),
    ("accepted", num("draft_accepted")),
    ("acceptance", frac("acceptance")),
    ("agreement", lambda r: "reference" if r["baseline"] else pct(r["agreement"])),
    ("exact", lambda r: "–" if r["baseline"] else exact(r)),
    ("faithful", frac("fidelity")),
    ("TTF token ms", num("ttf_token_ms_p50", 0)),
]


def _setting_columns(run: BenchRun) -> list[Column]:
    """A column for each setting a sweep varies (the first point's names), its value as text."""
    names = list(run.points[0].values) if run.points else []
    return [(n, _setting(n)) for n in names]


def _setting(name: str) -> Cell:
    return lambda r: str(r["values"].get(name))


def sweep_workload_section(run: BenchRun) -> str:
    rows = sweep_workload_rows(run)
    if not rows:
        return ""
    return (
        "### Decode per workload and setting\n\n"
        + column_table(_setting_columns(run) + _SWEEP_WORKLOAD, rows)
        + (
            "\n\nbaseline: the `speculation=none` point with the same other settings, run first; its outputs are "
            "the reference of the others' agreement. " + WORKLOAD_NOTE.split("; ", 1)[1]
        )
    )


_PREFILL_BY_LENGTH: list[Column] = [
    ("length", raw("length")),
    ("n", raw("n")),
    ("prompt tok", num("prompt_tokens", 0)),
    ("prefill t/s (server)", num("prefill_tps_server")),
    ("prefill t/s (client)", num("prefill_tps_client")),
    ("decode t/s (server)", num("decode_tps_server")),
    ("TTF token ms", num("ttf_token_ms_p50", 0)),
    ("cache hits", raw("cache_hits")),
]
_RETRIEVAL: list[Column] = [
    ("length", raw("length")),
    ("depth", raw("depth")),
    ("verdict", raw("verdict")),
    ("reason", lambda c: c["reason"] or ""),
    ("prompt tok", num("prompt_tokens", 0)),
    ("TTF token ms", num("ttf_token_ms_p50", 0)),
]


def context_section(records: list[Any]) -> str:
    pre = prefill_by_length(records)
    parts = []
    if pre:
        parts.append(column_table(_PREFILL_BY_LENGTH, pre))
    cells = context_rows(records)
    graded = [c for c in cells if c["depth"] is not None]
    if graded:
        parts.append("Retrieval (needle, graded by string match):\n\n" + column_table(_RETRIEVAL, graded))
        parts.append("Grid (rows: length, columns: depth):\n\n" + _retrieval_grid(graded))
    return "\n\n".join(parts) if parts else "_no context records_"


def _retrieval_grid(graded: list[dict[str, Any]]) -> str:
    """The verdict of each (length, depth) cell: a row a length, a column a depth."""
    lengths = sorted({c["length"] for c in graded})
    depths = sorted({c["depth"] for c in graded}, key=lambda d: (isinstance(d, str), d))
    mark = {"found": "found", "miss": "MISS", "skipped": "skipped"}
    grid = {(c["length"], c["depth"]): mark.get(c["verdict"], c["verdict"]) for c in graded}
    return table(
        ["length"] + [str(d) for d in depths], [[n] + [grid.get((n, d), "–") for d in depths] for n in lengths]
    )


def sweep_section(run: BenchRun) -> str:
    rows = sweep_rows(run)
    per_workload = sweep_workload_section(run)
    if per_workload:
        if any("error" not in r for r in rows):  # the chat workload ran: its per-prompt-size table too
            return _sweep_table(run, rows) + "\n\n" + per_workload
        failed = "".join(f"\n\n- {r['values']}: start failed: {r['error']}" for r in rows if "error" in r)
        return per_workload + failed
    if not rows:
        return "_no sweep points_"
    return _sweep_table(run, rows)


def _sweep_table(run: BenchRun, rows: list[dict[str, Any]]) -> str:
    names = list(run.points[0].values) if run.points else []
    head = names + [
        "prompt",
        "conc",
        "n_ctx",
        "slots",
        "n_ubatch",
        "n_batch",
        "prefill t/s (server)",
        "decode t/s (server)",
        "TTF token ms",
        "throughput t/s",
        "cache hits",
        "errors",
    ]
    body = []
    for r in rows:
        vals = [r["values"].get(n) for n in names]
        if "error" in r:
            body.append(vals + ["–"] * 10 + [f"start failed: {r['error']}"] + ["–"])
            continue
        s = r["server"]
        body.append(
            vals
            + [
                r["prompt_target"],
                r["concurrency"],
                fmt(s.get("n_ctx")),
                fmt(s.get("total_slots")),
                fmt(s.get("n_ubatch")),
                fmt(s.get("n_batch")),
                fmt(r["prefill_tps_server"]),
                fmt(r["decode_tps_server"]),
                fmt(r["ttf_token_ms_p50"], 0),
                fmt(r["throughput_tps"]),
                r["cache_hits"],
                r["errors"],
            ]
        )
    return table(head, body)


_ENGINE: list[Column] = [
    ("test", raw("test")),
    ("ubatch", raw("n_ubatch")),
    ("batch", raw("n_batch")),
    ("t/s", num("avg_ts", 2)),
    ("± sd", num("stddev_ts", 2)),
    ("model", raw("model_type")),
    ("backends", raw("backends")),
    ("ngl", raw("n_gpu_layers")),
]


def engine_section(run: BenchRun) -> str:
    rows = engine_rows(run)
    if not rows:
        return "_no llama-bench rows_"
    return column_table(_ENGINE, rows)


def run_section(run: BenchRun, decode_bound: float | None = None) -> str:
    if decode_bound is None:
        planned = (run.target.get("cluster") or {}).get("decode_tps_upper_bound")
        decode_bound = float(planned) if planned else None
    body = {
        "speed": lambda: speed_section(run.records, decode_bound),
        "context": lambda: context_section(run.records),
        "sweep": lambda: sweep_section(run),
        "engine": lambda: engine_section(run),
    }[run.kind]()
    heads = headline_items(run)
    top = "Headline: " + "; ".join(f"{k} **{v}**" for k, v in heads) + "\n\n" if heads else ""
    return f"## {run.kind}: {run.name}\n\n{_header(run)}\n\n{top}{body}\n"


def render_markdown(
    runs: Sequence[BenchRun], plots: Sequence[Path] = (), decode_bound: float | None = None, base: Path | None = None
) -> str:
    title = "# Bench report" + (f": {runs[0].name}" if len(runs) == 1 else f": {len(runs)} runs")
    parts = [title + "\n"]
    for run in runs:
        parts.append(run_section(run, decode_bound))
    cost = serving_cost(runs)
    if cost:
        parts.append(cost)
    same_kind = len({r.kind for r in runs}) == 1
    if len(runs) > 1 and same_kind:
        parts.append(comparison_section(runs))
    if plots:
        parts.append("## Plots\n")
        for p in plots:
            rel = p.relative_to(base) if base and p.is_relative_to(base) else p
            parts.append(f"![{p.stem}]({rel.as_posix()})\n")
    return "\n".join(parts)


def write_report(
    runs: Sequence[BenchRun], out_dir: Path, decode_bound: float | None = None, with_plots: bool = True
) -> tuple[Path, list[Path]]:
    """``report.md`` and the PNG plots in ``out_dir``; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    plots: list[Path] = []
    if with_plots:
        from ._plots import write_plots

        plots = write_plots(runs, out_dir)
    md = render_markdown(runs, plots, decode_bound, base=out_dir)
    path = out_dir / "report.md"
    path.write_text(md)
    return path, plots
