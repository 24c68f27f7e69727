"""The short tables a bench command prints when it ends: the headline, and one row per cell
with the figures people look at first (the report has every column).

Data only, from the report's rows and formatting: ``(title, headers, rows)`` of strings; the
CLI renders them with rich, under :func:`~splitserve.bench._describe.caption`.
"""

from __future__ import annotations

from collections.abc import Callable

from ._markdown import exact, fmt, headline_items, pct
from ._records import BenchRun
from ._tables import engine_rows, prefill_by_length, speed_rows, sweep_rows, workload_rows

Table = tuple[str, list[str], list[list[str]]]
"""(title, headers, rows), every cell a string."""


def _speed(run: BenchRun) -> list[Table]:
    out = []
    rows = speed_rows(run.records)
    if rows:
        out.append(
            (
                "per cell (medians)",
                ["prompt", "conc", "n", "errors", "prefill t/s", "decode t/s", "TTFT ms (p50)", "throughput t/s"],
                [
                    [
                        str(r["prompt_target"]),
                        str(r["concurrency"]),
                        str(r["n"]),
                        str(r["errors"]),
                        fmt(r["prefill_tps_server"]),
                        fmt(r["decode_tps_server"]),
                        fmt(r["ttf_token_ms_p50"], 0),
                        fmt(r["throughput_tps"]),
                    ]
                    for r in rows
                ],
            )
        )
    wrows = workload_rows(run.records)
    if wrows:
        out.append(
            (
                "per workload",
                ["workload", "conc", "n", "errors", "decode t/s", "TTFT ms (p50)", "acceptance", "agreement", "exact"],
                [
                    [
                        r["workload"],
                        str(r["concurrency"]),
                        str(r["n"]),
                        str(r["errors"]),
                        fmt(r["decode_tps_server"]),
                        fmt(r["ttf_token_ms_p50"], 0),
                        pct(r["acceptance"]),
                        pct(r["agreement"]),
                        exact(r),
                    ]
                    for r in wrows
                ],
            )
        )
    return out


def _context(run: BenchRun) -> list[Table]:
    rows = prefill_by_length(run.records)
    return (
        [
            (
                "per length",
                ["length", "prompt tok", "prefill t/s", "decode t/s", "TTFT ms (p50)"],
                [
                    [
                        str(r["length"]),
                        fmt(r["prompt_tokens"], 0),
                        fmt(r["prefill_tps_server"]),
                        fmt(r["decode_tps_server"]),
                        fmt(r["ttf_token_ms_p50"], 0),
                    ]
                    for r in rows
                ],
            )
        ]
        if rows
        else []
    )


def _sweep(run: BenchRun) -> list[Table]:
    names = list(run.points[0].values) if run.points else []
    body = []
    for r in sweep_rows(run):
        vals = [str(r["values"].get(n)) for n in names]
        if "error" in r:
            body.append(vals + ["–", "–", f"start failed: {r['error']}", "", ""])
        else:
            body.append(
                vals
                + [
                    str(r["prompt_target"]),
                    str(r["concurrency"]),
                    fmt(r["prefill_tps_server"]),
                    fmt(r["decode_tps_server"]),
                    fmt(r["ttf_token_ms_p50"], 0),
                ]
            )
    return (
        [("per point", names + ["prompt", "conc", "prefill t/s", "decode t/s", "TTFT ms (p50)"], body)] if body else []
    )


def _engine(run: BenchRun) -> list[Table]:
    rows = engine_rows(run)
    return (
        [
            (
                "llama-bench",
                ["test", "ubatch", "t/s", "± sd"],
                [[str(r["test"]), fmt(r["n_ubatch"]), fmt(r["avg_ts"], 2), fmt(r["stddev_ts"], 2)] for r in rows],
            )
        ]
        if rows
        else []
    )


_CELLS: dict[str, Callable[[BenchRun], list[Table]]] = {
    "speed": _speed,
    "context": _context,
    "sweep": _sweep,
    "engine": _engine,
}


def summary_tables(run: BenchRun) -> list[Table]:
    """The headline, then the cells (what the run measured; none for a run with no results)."""
    heads = headline_items(run)
    out: list[Table] = [("headline", ["figure", "value"], [[k, v] for k, v in heads])] if heads else []
    cells = _CELLS.get(run.kind)
    return out + (cells(run) if cells is not None else [])
