"""``bench report``: Markdown tables (and PNG plots) for one run, or several side by side.

Given two or more runs, every figure that both measured is put next to the
first run's with the ratio ``run / first``; cells are matched by their keys
(prompt size and concurrency, context length, llama-bench test, sweep point).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._describe import build_text, engine_version, machine_text, model_text
from ._machine import gpu_clocks_text
from ._records import BenchRun
from ._tables import (
    TTFT_AT,
    agent_turn_rows,
    context_rows,
    engine_rows,
    headline,
    prefill_by_length,
    speed_rows,
    sweep_rows,
    sweep_workload_rows,
    workload_rows,
)


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


FRACTIONS = {"acceptance", "agreement", "cached_fraction", "fidelity"}
"""Figures that are fractions (shown as percentages)."""


def pct(value: float | None) -> str:
    if value is None:
        return "–"
    text = f"{value:.1%}"
    return text.replace(".0%", "%")


def exact(row: dict[str, Any]) -> str:
    return "–" if not row.get("compared") else f"{row['exact_matches']}/{row['compared']}"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for row in rows:
        out.append("| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |")
    return "\n".join(out)


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


def speed_section(records: list[Any], decode_bound: float | None = None) -> str:
    rows = speed_rows(records)
    workloads = workload_section(records)
    if not rows:
        return workloads or "_no speed records_"
    head = [
        "prompt",
        "conc",
        "n",
        "cache hits",
        "errors",
        "prompt tok",
        "gen tok",
        "prefill t/s (server)",
        "prefill t/s (client)",
        "decode t/s (server)",
        "decode t/s (client)",
        "TTF chunk ms",
        "TTF token ms",
        "TTF content ms",
        "TTF reasoning ms",
        "ITL p50 ms",
        "ITL p90 ms",
        "ITL p99 ms",
        "E2E p50 ms",
        "throughput t/s",
    ]
    body = [
        [
            r["prompt_target"],
            r["concurrency"],
            r["n"],
            r["cache_hits"],
            r["errors"],
            fmt(r["prompt_tokens"], 0),
            fmt(r["completion_tokens"], 0),
            fmt(r["prefill_tps_server"]),
            fmt(r["prefill_tps_client"]),
            fmt(r["decode_tps_server"]),
            fmt(r["decode_tps_client"]),
            fmt(r["ttf_chunk_ms_p50"]),
            fmt(r["ttf_token_ms_p50"]),
            fmt(r["ttf_content_ms_p50"]),
            fmt(r["ttf_reasoning_ms_p50"]),
            fmt(r["itl_ms_p50"], 2),
            fmt(r["itl_ms_p90"], 2),
            fmt(r["itl_ms_p99"], 2),
            fmt(r["e2e_ms_p50"], 0),
            fmt(r["throughput_tps"]),
        ]
        for r in rows
    ]
    out = table(head, body)
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


def workload_section(records: list[Any]) -> str:
    rows = workload_rows(records)
    if not rows:
        return ""
    body = [
        [
            r["workload"],
            r["concurrency"],
            fmt(r["items"]),
            r["n"],
            r["errors"],
            fmt(r["prompt_tokens"], 0),
            fmt(r["completion_tokens"], 0),
            pct(r["cached_fraction"]),
            fmt(r["ttf_token_ms_p50"], 0),
            fmt(r["decode_tps_server"]),
            fmt(r["decode_tps_client"]),
            fmt(r["draft_n"]),
            fmt(r["draft_accepted"]),
            pct(r["acceptance"]),
            pct(r["agreement"]),
            exact(r),
            pct(r["fidelity"]),
        ]
        for r in rows
    ]
    out = (
        "### Workloads\n\n"
        + table(
            [
                "workload",
                "conc",
                "items",
                "n",
                "errors",
                "prompt tok",
                "gen tok",
                "cached",
                "TTF token ms",
                "decode t/s (server)",
                "decode t/s (client)",
                "drafted",
                "accepted",
                "acceptance",
                "agreement",
                "exact",
                "faithful",
            ],
            body,
        )
        + "\n\n"
        + WORKLOAD_NOTE
    )
    turns = agent_turn_rows(records)
    if turns:
        out += (
            "\n\n### Agent turns\n\n"
            + agent_turns_table(turns)
            + (
                "\n\nEach turn sends the recorded history up to that turn's assistant message; cached: prompt "
                "tokens the server served from its prompt cache (`cached_tokens` / `timings.cache_n`); TTFT: the "
                "first generated token (for a turn that generated none, the end of the response); medians over "
                "the replays."
            )
        )
    return out


def agent_turns_table(turns: list[dict[str, Any]]) -> str:
    return table(
        [
            "conc",
            "turn",
            "n",
            "prompt tok",
            "cached tok",
            "cached",
            "new tok",
            "TTFT ms",
            "prefill ms (server)",
            "prefill t/s (server)",
            "gen tok",
            "decode t/s (server)",
            "acceptance",
            "agreement",
        ],
        [
            [
                t["concurrency"],
                t["turn"],
                t["n"],
                fmt(t["prompt_tokens"], 0),
                fmt(t["cached_tokens"], 0),
                pct(t["cached_fraction"]),
                fmt(t["new_tokens"], 0),
                fmt(t["ttft_ms_p50"], 0),
                fmt(t["prompt_ms_server_p50"], 0),
                fmt(t["prefill_tps_server"]),
                fmt(t["completion_tokens"], 0),
                fmt(t["decode_tps_server"]),
                pct(t["acceptance"]),
                pct(t["agreement"]),
            ]
            for t in turns
        ],
    )


def sweep_workload_section(run: BenchRun) -> str:
    rows = sweep_workload_rows(run)
    if not rows:
        return ""
    names = list(run.points[0].values) if run.points else []
    body = [
        [
            *(str(r["values"].get(n)) for n in names),
            r["workload"],
            r["concurrency"],
            r["n"],
            r["errors"],
            fmt(r["decode_tps_server"]),
            "baseline" if r["baseline"] else fmt(r["baseline_decode_tps_server"]),
            f"{r['speedup']:.2f}×" if r["speedup"] else "–",
            fmt(r["draft_n"]),
            fmt(r["draft_accepted"]),
            pct(r["acceptance"]),
            "reference" if r["baseline"] else pct(r["agreement"]),
            "–" if r["baseline"] else exact(r),
            pct(r["fidelity"]),
            fmt(r["ttf_token_ms_p50"], 0),
        ]
        for r in rows
    ]
    return (
        "### Decode per workload and setting\n\n"
        + table(
            [
                *names,
                "workload",
                "conc",
                "n",
                "errors",
                "decode t/s (server)",
                "baseline t/s",
                "speedup",
                "drafted",
                "accepted",
                "acceptance",
                "agreement",
                "exact",
                "faithful",
                "TTF token ms",
            ],
            body,
        )
        + (
            "\n\nbaseline: the `speculation=none` point with the same other settings, run first; its outputs are "
            "the reference of the others' agreement. " + WORKLOAD_NOTE.split("; ", 1)[1]
        )
    )


def context_section(records: list[Any]) -> str:
    pre = prefill_by_length(records)
    parts = []
    if pre:
        parts.append(
            table(
                [
                    "length",
                    "n",
                    "prompt tok",
                    "prefill t/s (server)",
                    "prefill t/s (client)",
                    "decode t/s (server)",
                    "TTF token ms",
                    "cache hits",
                ],
                [
                    [
                        r["length"],
                        r["n"],
                        fmt(r["prompt_tokens"], 0),
                        fmt(r["prefill_tps_server"]),
                        fmt(r["prefill_tps_client"]),
                        fmt(r["decode_tps_server"]),
                        fmt(r["ttf_token_ms_p50"], 0),
                        r["cache_hits"],
                    ]
                    for r in pre
                ],
            )
        )
    cells = context_rows(records)
    graded = [c for c in cells if c["depth"] is not None]
    if graded:
        parts.append(
            "Retrieval (needle, graded by string match):\n\n"
            + table(
                ["length", "depth", "verdict", "reason", "prompt tok", "TTF token ms"],
                [
                    [
                        c["length"],
                        c["depth"],
                        c["verdict"],
                        c["reason"] or "",
                        fmt(c["prompt_tokens"], 0),
                        fmt(c["ttf_token_ms_p50"], 0),
                    ]
                    for c in graded
                ],
            )
        )
        lengths = sorted({c["length"] for c in graded})
        depths = sorted({c["depth"] for c in graded}, key=lambda d: (isinstance(d, str), d))
        mark = {"found": "found", "miss": "MISS", "skipped": "skipped"}
        grid = {(c["length"], c["depth"]): mark.get(c["verdict"], c["verdict"]) for c in graded}
        parts.append(
            "Grid (rows: length, columns: depth):\n\n"
            + table(
                ["length"] + [str(d) for d in depths], [[n] + [grid.get((n, d), "–") for d in depths] for n in lengths]
            )
        )
    return "\n\n".join(parts) if parts else "_no context records_"


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


def engine_section(run: BenchRun) -> str:
    rows = engine_rows(run)
    if not rows:
        return "_no llama-bench rows_"
    return table(
        ["test", "ubatch", "batch", "t/s", "± sd", "model", "backends", "ngl"],
        [
            [
                r["test"],
                r["n_ubatch"],
                r["n_batch"],
                fmt(r["avg_ts"], 2),
                fmt(r["stddev_ts"], 2),
                r["model_type"],
                r["backends"],
                r["n_gpu_layers"],
            ]
            for r in rows
        ],
    )


HEADLINE_LABELS = {
    "prefill_tps_server": "prefill t/s (server, lowest concurrency)",
    "decode_tps_server": "decode t/s (server, lowest concurrency)",
    "decode_tps_client": "decode t/s (client, lowest concurrency)",
    "max_throughput_tps": "best aggregate throughput t/s",
    "prefill_tps_server_longest": "prefill t/s at the longest length (server)",
    "retrieval_found_fraction": "needles found (fraction of graded cells)",
    "pp_tps": "llama-bench pp t/s",
    "tg_tps": "llama-bench tg t/s",
    "best_prefill_tps_server": "best prefill t/s (server)",
    "best_decode_tps_server": "best decode t/s (server)",
    "best_speculation_speedup": "best decode speedup over no speculation",
    "agent_cached_fraction_turn2plus": "agent: cached fraction of the prompt from turn 2 on (median)",
    **{f"{w}_decode_tps_server": f"{w}: decode t/s (server)" for w in ("copy", "edit", "json", "agent")},
    **{f"{w}_acceptance": f"{w}: draft acceptance" for w in ("copy", "edit", "json", "agent")},
    **{f"{w}_agreement": f"{w}: agreement with the reference" for w in ("copy", "edit", "json", "agent")},
}


def headline_label(key: str) -> str:
    """The words for a headline key; the time to first token names its prompt size."""
    if key.startswith(TTFT_AT):
        return f"time to first token ms (p50, {key.removeprefix(TTFT_AT)}-token prompt, lowest concurrency)"
    return HEADLINE_LABELS.get(key, key)


def headline_value(key: str, value: float | None) -> str:
    if value is not None and key.endswith(("_acceptance", "_agreement", "_fraction", "_turn2plus")):
        return pct(value)
    return fmt(value, 2 if value is not None and value < 10 else 1)


def headline_items(run: BenchRun) -> list[tuple[str, str]]:
    """(label, value) of the run's headline figures it measured, in the headline's order."""
    return [(headline_label(k), headline_value(k, v)) for k, v in headline(run).items() if v is not None]


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


def _ratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return "–"
    return f"{b / a:.2f}×"


def _compare(
    runs: Sequence[BenchRun],
    title: str,
    keyed: Callable[[BenchRun], dict[Any, dict[str, Any]]],
    metrics: Sequence[tuple[str, str]],
) -> str:
    tables = [keyed(r) for r in runs]
    keys = [k for k in tables[0] if all(k in t for t in tables[1:])]
    if not keys:
        return f"### {title}\n\n_no cells that every run measured_\n"
    parts = [f"### {title}\n"]
    for metric, label in metrics:
        head = ["cell"] + [r.name for r in runs] + [f"{r.name} / {runs[0].name}" for r in runs[1:]]
        body = []
        for k in keys:
            vals = [t[k].get(metric) for t in tables]
            shown = [pct(v) if metric in FRACTIONS else fmt(v) for v in vals]
            body.append([str(k)] + shown + [_ratio(vals[0], v) for v in vals[1:]])
        parts.append(f"{label}:\n\n" + table(head, body) + "\n")
    return "\n".join(parts)


def comparison_section(runs: Sequence[BenchRun]) -> str:
    out = ["## Comparison\n"]
    heads = [headline(r) for r in runs]
    names = list(dict.fromkeys(k for h in heads for k in h))
    out.append(
        table(
            ["headline"] + [r.name for r in runs] + [f"{r.name} / {runs[0].name}" for r in runs[1:]],
            [
                [headline_label(n)]
                + [fmt(h.get(n), 2) for h in heads]
                + [_ratio(heads[0].get(n), h.get(n)) for h in heads[1:]]
                for n in names
            ],
        )
        + "\n"
    )
    kinds = {r.kind for r in runs}
    if kinds == {"speed"} and any(workload_rows(r.records) for r in runs):
        out.append(
            _compare(
                runs,
                "workloads (workload, concurrency)",
                lambda r: {(x["workload"], x["concurrency"]): x for x in workload_rows(r.records)},
                [
                    ("decode_tps_server", "decode t/s (server)"),
                    ("acceptance", "draft acceptance"),
                    ("agreement", "agreement with the reference"),
                    ("ttf_token_ms_p50", "time to first token, ms (p50)"),
                ],
            )
        )
        if any(agent_turn_rows(r.records) for r in runs):
            out.append(
                _compare(
                    runs,
                    "agent turns (concurrency, turn)",
                    lambda r: {(x["concurrency"], x["turn"]): x for x in agent_turn_rows(r.records)},
                    [
                        ("cached_fraction", "cached fraction of the prompt"),
                        ("ttft_ms_p50", "time to first token, ms (p50)"),
                    ],
                )
            )
    if kinds == {"speed"} and any(speed_rows(r.records) for r in runs):
        out.append(
            _compare(
                runs,
                "speed cells (prompt, concurrency)",
                lambda r: {(x["prompt_target"], x["concurrency"]): x for x in speed_rows(r.records)},
                [
                    ("prefill_tps_server", "prefill t/s (server)"),
                    ("decode_tps_server", "decode t/s (server)"),
                    ("ttf_token_ms_p50", "time to first token, ms (p50)"),
                    ("throughput_tps", "aggregate throughput t/s"),
                ],
            )
        )
    elif kinds == {"context"}:
        out.append(
            _compare(
                runs,
                "context lengths",
                lambda r: {x["length"]: x for x in prefill_by_length(r.records)},
                [("prefill_tps_server", "prefill t/s (server)"), ("ttf_token_ms_p50", "time to first token, ms (p50)")],
            )
        )
    elif kinds == {"engine"}:
        out.append(
            _compare(
                runs,
                "llama-bench tests",
                lambda r: {(x["test"], x["n_ubatch"]): x for x in engine_rows(r)},
                [("avg_ts", "t/s")],
            )
        )
    elif kinds == {"sweep"}:
        out.append(
            _compare(
                runs,
                "sweep points",
                lambda r: {
                    (tuple(x["values"].items()), x["prompt_target"], x["concurrency"]): x
                    for x in sweep_rows(r)
                    if "error" not in x
                },
                [("prefill_tps_server", "prefill t/s (server)"), ("decode_tps_server", "decode t/s (server)")],
            )
        )
    return "\n".join(out)


def serving_cost(runs: Sequence[BenchRun]) -> str | None:
    """HTTP decode vs llama-bench's in-process tg: the cost of the serving path."""
    http = [r for r in runs if r.kind == "speed"]
    eng = [r for r in runs if r.kind == "engine"]
    if not http or not eng:
        return None
    h = headline(http[0])
    e = headline(eng[0])
    lines = ["## Serving path cost\n"]
    tg, pp = e.get("tg_tps"), e.get("pp_tps")
    for key, label in (("decode_tps_server", "decode, server timings"), ("decode_tps_client", "decode, client clock")):
        value = h.get(key)
        if value and tg:
            lines.append(f"- HTTP {label} {value:,.1f} t/s vs llama-bench tg {tg:,.1f} t/s: {value / tg:.2f}×")
    prefill = h.get("prefill_tps_server")
    if prefill and pp:
        lines.append(
            f"- HTTP prefill (server timings) {prefill:,.1f} t/s vs llama-bench pp {pp:,.1f} t/s: {prefill / pp:.2f}×"
        )
    return "\n".join(lines) + "\n"


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
